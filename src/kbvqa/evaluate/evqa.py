"""Encyclopedic-VQA answer accuracy: the exact-match stage, plus an optional equivalence backend.

Exact match (field-anchors §1.2): both sides pass `evqa_normalize`; single answers must be equal;
``multi_answer`` references are split on ``&&``, the candidate on ``,`` / `` and `` / `` & ``, and the
normalised sets must have IoU >= 0.5; the item score is the max over the ``|`` alternatives.

A reference alternative that is empty after normalisation is a loud error naming the file and row
(the Google scorer raised too, but without saying which row).

``2_hop`` rows: the Google scorer accepts them and scores them with the single-answer rule; the ARA
scorer filters them out. Here they are scored with the same EM rule, reported under their own
question type, and the summary also gives ``accuracy_excluding_2_hop`` for comparison with ARA.

When EM fails, an equivalence backend may rescue the item:
(a) BEM from a local transformers directory (`load_bem`; a TF SavedModel is refused with a clear error);
(b) an LLM judge through a model client (`LLMJudgeBackend`, SimpleQA-style prompt from judge.py), run
    as a runner job over the EM failures: journal, manifest, `--resume` re-sends only failed calls;
(c) a semantic-similarity approximation (`kbvqa.evaluate.semantic.SemanticBackend`: all-MiniLM-L6-v2
    cosine, labelled "semantic-approx (all-MiniLM-L6-v2, not BEM)");
(d) none – EM only. Every item and the summary carry a ``scorer`` naming what produced the number.
A backend is anything with a ``name`` and ``judge_many([(ref, candidate)]) -> [Verdict]`` (one per item).
BEM and the semantic approximation are local models and stay in-process: they score the EM failures
in batches (a runner job would feed them one record at a time) and make no call that can fail
transiently, so resume would buy nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbvqa.data.evqa import EVQA_QUESTION_TYPES
from kbvqa.data.jsonl import gc_paused
from kbvqa.data.schema import Provenance, Verdict
from kbvqa.evaluate import METRICS
from kbvqa.evaluate.io import (DroppedRows, PredictionRecord, ScoreInputError, add_reference, kbvqa_alternatives,
                              last_prediction_per_id, read_csv, read_jsonl)
from kbvqa.evaluate.judge import JUDGE_CONCURRENCY, PROMPT_VERSION, ChatClient, JudgeConfig, JudgeRun, run_judge
from kbvqa.evaluate.normalize import evqa_normalize

__all__ = [
    "EVQA_QUESTION_TYPES", "EVQARef", "load_evqa_references", "exact_match", "multi_answer_iou",
    "split_candidate", "LLMJudgeBackend", "load_bem", "BEMBackend", "score_evqa", "EVQAResult", "ExactMatchPass",
    "exact_match_pass",
]

EM_SCORER = "evqa-em"


@dataclass(slots=True)
class EVQARef:
    """One E-VQA reference: `alternatives` are the `|`-separated raw answers; `norm` their normalised
    form (a str for single answers, a frozenset of parts for multi_answer)."""

    data_id: str
    question: str
    qtype: str
    alternatives: list[str]
    norm: list[Any]
    line: int


def split_candidate(candidate: str) -> list[str]:
    """Candidate list for multi_answer: split on ',', ' and ', ' & ' (before normalising, as E-VQA)."""
    return candidate.replace(" and ", ",").replace(" & ", ",").split(",")


def multi_answer_iou(reference_parts: frozenset[str] | set[str], candidate: str) -> float:
    """Set IoU between the normalised reference parts and the normalised candidate parts."""
    cand = {c for c in (evqa_normalize(x) for x in split_candidate(candidate)) if c}
    union = reference_parts | cand
    return len(reference_parts & cand) / len(union) if union else 0.0


def exact_match(ref: EVQARef, candidate: str | None) -> bool:
    """Max over `|` alternatives of the E-VQA exact-match rule."""
    if candidate is None:
        return False
    if ref.qtype == "multi_answer":
        return any(multi_answer_iou(parts, candidate) >= 0.5 for parts in ref.norm)
    c = evqa_normalize(candidate)
    return c in ref.norm


def _make_ref(did: str, question: str, qtype: str, alternatives: list[str], path: str | Path,
              ln: int) -> EVQARef:
    if qtype not in EVQA_QUESTION_TYPES:
        raise ScoreInputError(path, ln, "question_type",
                              f"unknown E-VQA question type {qtype!r} (expected one of {list(EVQA_QUESTION_TYPES)})")
    if not alternatives:
        raise ScoreInputError(path, ln, "answer", f"no reference answer for {did!r}")
    norm: list[Any] = []
    for alt in alternatives:
        if qtype == "multi_answer":
            parts = frozenset(p for p in (evqa_normalize(x) for x in alt.split("&&")) if p)
            if not parts:
                raise ScoreInputError(path, ln, "answer", f"multi_answer reference {alt!r} of {did!r} is empty "
                                                          "after E-VQA normalisation")
            norm.append(parts)
        else:
            n = evqa_normalize(alt)
            if not n:
                raise ScoreInputError(path, ln, "answer", f"reference {alt!r} of {did!r} is empty after E-VQA "
                                                          "normalisation (e.g. only an article or punctuation)")
            norm.append(n)
    return EVQARef(did, question, qtype, alternatives, norm, ln)


@gc_paused()
def load_evqa_references(path: str | Path) -> dict[str, EVQARef]:
    """E-VQA CSV (needs a `data_id` or `id` column, `answer`, `question_type`; `question` optional)
    or kbvqa JSONL (`id`, `answers` as strings or {text, parts}, `question_type`)."""
    refs: dict[str, EVQARef] = {}
    if str(path).lower().endswith(".csv"):
        for ln, row in read_csv(path):
            did = row.get("data_id") or row.get("id")
            if not did:
                raise ScoreInputError(path, ln, "data_id", "missing: E-VQA CSVs have no id column; add `data_id` "
                                                           "(e.g. with `kbvqa data convert`) so predictions can be joined")
            if row.get("answer") is None:
                raise ScoreInputError(path, ln, "answer", "missing column")
            ref = _make_ref(did, row.get("question") or "", (row.get("question_type") or "").strip(),
                            row["answer"].split("|"), path, ln)
            add_reference(refs, ref, path)
    else:
        dropped = DroppedRows(path)  # an audited file's drop rows are refused (io.including_dropped allows them)
        for ln, obj in read_jsonl(path):
            did = obj.get("id", obj.get("data_id"))
            if not isinstance(did, str) or not did:
                raise ScoreInputError(path, ln, "id", f"must be a non-empty string, got {did!r}")
            dropped.see(obj, ln)
            alts = kbvqa_alternatives(obj.get("answers"), path, ln)
            ref = _make_ref(did, obj.get("question") or "", str(obj.get("question_type") or ""), alts, path, ln)
            add_reference(refs, ref, path)
        dropped.check()
    return refs


def load_bem(model_dir: str | Path, *, threshold: float = 0.5, device: str | None = None) -> "BEMBackend":
    """BEM equivalence from a local model directory, without TensorFlow and without the network.

    Accepted: a transformers BERT sequence-classification directory (`config.json`, weights,
    `vocab.txt`/tokenizer files) holding a PyTorch port of BEM. The public BEM is a TF-Hub SavedModel;
    kbvqa does not depend on TensorFlow, so such a directory (`saved_model.pb`) is refused with a clear
    error: convert it to a transformers directory first. Anything else is refused too.
    """
    d = Path(model_dir)
    if not d.is_dir():
        raise RuntimeError(f"BEM backend not available: {str(d)!r} is not a directory")
    if (d / "saved_model.pb").is_file():
        raise RuntimeError(f"BEM backend not available: {str(d)!r} is a TensorFlow SavedModel; kbvqa has no TensorFlow "
                           "dependency. Convert BEM to a transformers BertForSequenceClassification directory, "
                           "or use an LLM judge (--judge-base-url/--judge-model, --config) or --semantic.")
    has_weights = any((d / f).is_file() for f in ("model.safetensors", "pytorch_model.bin"))
    if not ((d / "config.json").is_file() and has_weights):
        raise RuntimeError(f"BEM backend not available: {str(d)!r} holds no transformers model (config.json plus "
                           "model.safetensors or pytorch_model.bin); kbvqa cannot load BEM from it.")
    try:
        return BEMBackend(d, threshold=threshold, device=device)
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"BEM backend not available: loading {str(d)!r} failed: {exc}") from exc


class BEMBackend:
    """BEM as E-VQA's evaluation_utils applies it (read against that code and the BEM example colab):

    * input: the raw texts, lower-cased WordPiece, ``[CLS] candidate [SEP] reference [SEP] question
      [SEP]``; segment ids 0 for CLS + candidate + SEP, 1 for the reference and its SEP, 2 for the
      question and its SEP (tf_text.combine_segments), padding (id 0) masked out;
    * a multi_answer reference has its ``&&`` replaced by ``,`` (only that question type, as there);
    * decision: softmax(logits)[1] >= 0.5; E-VQA's score is exact match first (BEM is not asked about
      an EM hit) and the max over the ``|`` alternatives — `score_evqa` does both.

    kbvqa's where the reference has no rule: a model with two token types gets segment ids 0, 1, 1; an
    input over 512 tokens is cut (question first, then reference, then candidate) where the
    reference would fail; an empty or missing answer is wrong without asking BEM. Loaded with
    transformers from a local directory only: the code path is tested (tests/test_bem.py, a tiny
    random BERT), the weights' agreement with TF-Hub BEM is not verified here, which the summary says."""

    prompt_version = None
    max_len = 512

    def __init__(self, model_dir: Path, *, threshold: float = 0.5, device: str | None = None):
        import os

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.torch = torch
        self.model_dir = Path(model_dir)
        self.threshold = threshold
        self.device = device or "cpu"
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir), local_files_only=True)
        self.model = AutoModelForSequenceClassification.from_pretrained(str(self.model_dir), local_files_only=True)
        self.model.eval().to(self.device)
        if self.model.config.num_labels != 2:
            raise RuntimeError(f"BEM backend: {self.model_dir} has {self.model.config.num_labels} labels, expected 2")
        self.n_types = int(getattr(self.model.config, "type_vocab_size", 2) or 2)
        probe = ("Menger", "menger")
        if self.tokenizer.tokenize(probe[0]) != self.tokenizer.tokenize(probe[1]):
            raise RuntimeError(f"BEM backend: the tokenizer in {self.model_dir} keeps case; BEM reads lower-cased "
                               "(uncased BERT) WordPiece, so this directory is not a BEM port")
        self.name = f"{EM_SCORER}+bem(local:{self.model_dir.name})"

    def describe(self) -> dict[str, Any]:
        return {"kind": "bem", "model_dir": str(self.model_dir), "threshold": self.threshold,
                "note": "PyTorch BEM port loaded locally with transformers; inputs and decisions follow E-VQA's "
                        "evaluation_utils (tested with a random model), the weights are not verified against "
                        "TF-Hub BEM here"}

    def encode(self, candidate: str, reference: str, question: str) -> tuple[list[int], list[int]]:
        """Input ids and segment ids for one triple, truncated to 512 tokens (question first)."""
        tok = self.tokenizer
        segs = [tok.encode(t, add_special_tokens=False) for t in (candidate, reference, question)]
        budget = self.max_len - 4  # CLS + 3 SEP
        for i in (2, 1, 0):  # shorten the question, then the reference, then the candidate
            over = sum(len(x) for x in segs) - budget
            if over > 0:
                segs[i] = segs[i][:max(0, len(segs[i]) - over)]
        ids = [tok.cls_token_id]
        types = [0]
        for k, seg in enumerate(segs):
            ids += seg + [tok.sep_token_id]
            types += [min(k, self.n_types - 1)] * (len(seg) + 1)
        return ids, types

    def probabilities(self, triples: list[tuple[str, str, str]], batch_size: int = 32) -> list[float]:
        torch = self.torch
        out: list[float] = []
        pad = self.tokenizer.pad_token_id or 0
        for s in range(0, len(triples), batch_size):
            enc = [self.encode(*t) for t in triples[s:s + batch_size]]
            n = max(len(i) for i, _ in enc)
            ids = torch.tensor([i + [pad] * (n - len(i)) for i, _ in enc], device=self.device)
            types = torch.tensor([t + [0] * (n - len(t)) for _, t in enc], device=self.device)
            mask = torch.tensor([[1] * len(i) + [0] * (n - len(i)) for i, _ in enc], device=self.device)
            with torch.no_grad():
                logits = self.model(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
            out += torch.softmax(logits.float(), dim=-1)[:, 1].tolist()
        return out

    @staticmethod
    def reference_text(ref: "EVQARef", alternative: str) -> str:
        """The reference segment: the alternative as written; a multi_answer one with `&&` -> `,`."""
        return alternative.replace("&&", ",") if ref.qtype == "multi_answer" else alternative

    def judge_many(self, jobs: list[tuple["EVQARef", str]]) -> list[Verdict]:
        """One batched pass over every (reference alternative, candidate) pair, in this process."""
        triples, owner = [], []
        for j, (ref, cand) in enumerate(jobs):
            for alt in ref.alternatives:
                triples.append((cand, self.reference_text(ref, alt), ref.question))
                owner.append(j)
        best = [0.0] * len(jobs)
        for j, p in zip(owner, self.probabilities(triples)):
            best[j] = max(best[j], p)
        prov = Provenance(backend="bem", model=str(self.model_dir))
        return [Verdict(sample_id=ref.data_id, metric="evqa-bem", value=round(b, 4),
                        label="correct" if b >= self.threshold else "incorrect",
                        rationale=f"BEM P(equivalent) {b:.3f} vs {self.threshold:g}", judge=prov)
                for (ref, _), b in zip(jobs, best)]


class LLMJudgeBackend:
    """EM-failure fallback through the SimpleQA-style LLM judge; 'correct' rescues the item.

    The calls run as a runner job (`kbvqa.evaluate.judge.run_judge`): with `out` the journal and
    its manifest are kept and `resume=True` re-sends only the items that errored or got an
    unusable reply; without `out` the job runs in a temporary directory. `config` is the judge
    stage's config as the job's options hold it (default: `prompt_version`'s); `run_config` is
    added to the manifest's (the options as used)."""

    def __init__(self, client: ChatClient, *, prompt_version: str = PROMPT_VERSION,
                 concurrency: int = JUDGE_CONCURRENCY, out: str | Path | None = None, resume: bool = True, progress: bool = False,
                 config: JudgeConfig | None = None, run_config: dict[str, Any] | None = None):
        self.client = client
        self.config = config if config is not None else JudgeConfig(prompt_version=prompt_version)
        self.prompt_version = self.config.prompt_version
        self.run_config = dict(run_config or {})
        self.concurrency = concurrency
        self.out = Path(out) if out is not None else None
        self.resume = resume
        self.progress = progress
        self.last_run: JudgeRun | None = None
        prov = getattr(client, "provenance", None)
        self.provenance = {k: v for k, v in (prov.model_dump() if prov is not None else {}).items()
                           if k in ("backend", "model", "base_url") and v is not None}
        model = self.provenance.get("model") or self.provenance.get("backend") or "unknown"
        self.name = f"{EM_SCORER}+llm-judge({model})"

    @staticmethod
    def target_text(ref: EVQARef) -> str:
        alts = [a.replace("&&", ", ").strip() for a in ref.alternatives]
        return alts[0] if len(alts) == 1 else "any one of: " + " | ".join(alts)

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": "llm-judge", "provenance": self.provenance}
        if self.last_run is not None:
            d["run"] = self.last_run.run_info()
        return d

    def judge_many(self, jobs: list[tuple[EVQARef, str]]) -> list[Verdict]:
        records = [{"id": ref.data_id, "question": ref.question, "target": self.target_text(ref), "prediction": cand}
                   for ref, cand in jobs]
        self.last_run = run_judge(records, self.client, out=self.out, resume=self.resume,
                                  concurrency=self.concurrency, progress=self.progress,
                                  config=self.config,
                                  run_config={"task": "evqa-equivalence", "scorer": self.name, **self.run_config})
        return [self.last_run.verdicts[ref.data_id] for ref, _ in jobs]


@dataclass
class EVQAResult:
    summary: dict[str, Any]
    items: list[dict[str, Any]]


@dataclass
class ExactMatchPass:
    """The cheap first pass (no model): one prediction per reference id and its exact-match outcome."""

    by_id: dict[str, str | None]
    n_unknown: int
    n_duplicates: int
    em: dict[str, bool]

    def failures(self, refs: dict[str, EVQARef]) -> list[tuple[EVQARef, str]]:
        """(reference, prediction) for every EM failure that has a non-empty prediction: what an
        equivalence backend is asked about (a missing answer is wrong without asking)."""
        return [(ref, self.by_id[did]) for did, ref in refs.items()  # type: ignore[misc]
                if not self.em[did] and self.by_id.get(did) not in (None, "")]


def exact_match_pass(preds: list[PredictionRecord], refs: dict[str, EVQARef]) -> ExactMatchPass:
    """Last prediction per id (unknown ids and duplicates counted), exact match for every reference."""
    by_id, unknown, dup = last_prediction_per_id(preds, refs)
    em = {did: exact_match(ref, by_id[did]) if did in by_id else False for did, ref in refs.items()}
    return ExactMatchPass(by_id, unknown, dup, em)


@METRICS.register("evqa", family="evqa",
                  help="E-VQA accuracy: exact match (set IoU for multi_answer), then an optional BEM / LLM-judge "
                       "/ semantic fallback")
def score_evqa(preds: list[PredictionRecord], refs: dict[str, EVQARef], *,
               backend: Any = None, per_item: bool = False) -> EVQAResult:
    """Accuracy over all references (missing predictions are wrong and counted), by question type.

    Exact match first; `backend.judge_many([(ref, prediction)]) -> [Verdict]` is asked only about
    the EM failures that have a prediction, and a 'correct' verdict rescues the item."""
    em_pass = exact_match_pass(preds, refs)
    verdicts: dict[str, Verdict] = {}
    if backend is not None:
        jobs = em_pass.failures(refs)
        got = list(backend.judge_many(jobs))
        if len(got) != len(jobs):
            raise RuntimeError(f"equivalence backend {backend.name!r} returned {len(got)} verdicts "
                               f"for {len(jobs)} items")
        verdicts = {ref.data_id: v for (ref, _), v in zip(jobs, got)}
    return _merge(refs, em_pass, verdicts, backend, per_item)


def _merge(refs: dict[str, EVQARef], em_pass: ExactMatchPass, verdicts: dict[str, Verdict], backend: Any,
           per_item: bool) -> EVQAResult:
    """EM outcomes and the backend's verdicts into the summary (and the per-item rows)."""
    by_id, em = em_pass.by_id, em_pass.em
    correct = {did: em[did] or (did in verdicts and verdicts[did].label == "correct") for did in refs}
    types: dict[str, list[int]] = {}
    for did, ref in refs.items():
        t = types.setdefault(ref.qtype, [0, 0, 0])
        t[0] += correct[did]
        t[1] += 1
        t[2] += did in by_id
    n = len(refs)
    c_all = sum(correct.values())
    n_pred = len(by_id)
    c_pred = sum(correct[d] for d in by_id)
    n_x2 = sum(v[1] for k, v in types.items() if k != "2_hop")
    c_x2 = sum(v[0] for k, v in types.items() if k != "2_hop")
    pct = lambda c, d: round(100 * c / d, 2) if d else 0.0  # noqa: E731
    summary = {
        "scorer": backend.name if backend is not None else EM_SCORER,
        "accuracy": pct(c_all, n), "n": n, "correct": c_all,
        "n_predicted": n_pred, "n_missing": n - n_pred, "coverage": round(n_pred / n, 4) if n else 0.0,
        "accuracy_on_predicted": pct(c_pred, n_pred),
        "accuracy_excluding_2_hop": pct(c_x2, n_x2), "n_excluding_2_hop": n_x2,
        "by_question_type": {k: {"accuracy": pct(v[0], v[1]), "correct": v[0], "n": v[1], "n_predicted": v[2]}
                             for k, v in sorted(types.items())},
        "n_em_correct": sum(em.values()),
        "n_unknown_ids": em_pass.n_unknown, "n_duplicate_predictions": em_pass.n_duplicates,
        "duplicates": "last prediction per id wins",
        "two_hop": "scored with the same EM rule; also reported separately",
    }
    kind = (backend.describe().get("kind") if hasattr(backend, "describe") else None) if backend is not None else None
    if kind != "bem":  # seed 000's E-VQA metric is BEM: a number from anything else says it stands in
        summary["not_bem"] = {None: "exact match only", "semantic-approx": "exact match + embedding cosine",
                              "llm-judge": "exact match + an LLM judge"}.get(kind, "exact match + another backend") + \
            ", not BEM (seed 000's E-VQA metric: --bem-dir DIR, or study --scorer evqa-bem)"
    if backend is not None:
        labels = [v.label for v in verdicts.values()]
        summary["judge"] = {"name": backend.name, "prompt_version": getattr(backend, "prompt_version", None),
                            **(backend.describe() if hasattr(backend, "describe") else {}),
                            "n_calls": len(verdicts), "n_rescued": sum(1 for x in labels if x == "correct"),
                            "n_invalid": sum(1 for x in labels if x == "invalid"),
                            "n_error": sum(1 for x in labels if x is None)}
    items: list[dict[str, Any]] = []
    if per_item:
        for did, ref in refs.items():
            v = verdicts.get(did)
            row = {"data_id": did, "question_type": ref.qtype, "prediction": by_id.get(did),
                   "correct": correct[did], "em": em[did], "missing": did not in by_id,
                   "scorer": backend.name if v is not None else EM_SCORER}
            if v is not None:
                row["judge_label"] = v.label
                row["judge_rationale"] = v.rationale
                if v.value is not None:
                    row["judge_value"] = v.value
            items.append(row)
    return EVQAResult(summary, items)
