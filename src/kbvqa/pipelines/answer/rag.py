"""Reference MM-RAG pipelines: compose retrieve -> rerank -> answer from the stages.

Presets:

- `echosight` (EchoSight-like): image-to-image retrieval over KB images, section rerank fused with
  the visual score (alpha 0.5, as EchoSight fuses its Q-Former score), answer with the `answerer`
  role (the extractive answerer when no answerer is configured; the prediction's producer says so).
- `iba` (identify-then-rank, IBA-like): the `vision` role names candidate entities, they are resolved
  in the KB (title / FTS), image retrieval results (when an index is given) follow them, sections
  are reranked and the answer generated.
- `extractive`: image retrieval, BM25 section rerank, embedded extractive answerer. No model at all,
  so the demo and tests run offline.

Each prediction line carries `retrieved`, `meta.retrieval` (every retrieval stage's ranking, e.g.
initial and post-rerank), `evidence_used` and `usage` (all model calls of the record summed).

Also here: turning predictions into Recall@K retrieval records, and the augmentation study table
(Recall@K per anchor / intra / inter / blank / double variant, side by side).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping

from kbvqa.pipelines.augment.manifest import VARIANTS, split_variant
from kbvqa.stages.base import Context, Stage

PIPELINES = ("echosight", "iba", "extractive")
Answerer = Literal["auto", "llm", "extractive"]


def build_stages(pipeline: str, *, index: Any = None, encoder: Any = None, image_root: Path | None = None,
                 roles: Mapping[str, Any] | None = None, reranker: Any = "bm25", k: int = 20, articles: int = 5,
                 sections: int = 5, alpha: float | None = None, answerer: Answerer = "auto",
                 identify_candidates: int = 3, text_index: Any = None, rerank_model_dir: Path | None = None,
                 rerank_role: str = "checker") -> list[Stage]:
    """The stage list for a preset. `reranker` is a name (bm25, dense, cross-encoder, llm) or a Reranker."""
    from kbvqa.models.rerank import Reranker, get_reranker
    from kbvqa.stages.extractive import ExtractiveAnswer, ExtractiveConfig
    from kbvqa.stages.generate import GenerateAnswer, GenerateConfig
    from kbvqa.stages.identify import IdentifyConfig, IdentifyEntities
    from kbvqa.stages.rerank import RerankConfig, SectionRerank
    from kbvqa.stages.retrieve import ImageRetrieve, RetrieveConfig

    if pipeline not in PIPELINES:
        raise ValueError(f"unknown pipeline {pipeline!r} (choose from {', '.join(PIPELINES)})")
    roles = roles or {}
    rr = reranker if isinstance(reranker, Reranker) else get_reranker(
        reranker, model_dir=rerank_model_dir, text_index=text_index, role=rerank_role)
    stages: list[Stage] = []
    if index is not None:
        if encoder is None:
            raise ValueError("an image index needs its encoder")
        stages.append(ImageRetrieve(index, encoder, image_root=image_root, config=RetrieveConfig(k=k)))
    elif pipeline != "iba":
        raise ValueError(f"pipeline {pipeline!r} retrieves by image: give an image index")
    if pipeline == "iba":
        if "vision" not in roles:
            raise ValueError("pipeline 'iba' needs the `vision` model role (it names the entity in the image)")
        stages.append(IdentifyEntities(IdentifyConfig(candidates=identify_candidates), image_root=image_root))
    default_alpha = {"echosight": 0.5, "iba": 0.3, "extractive": 0.5}[pipeline]
    stages.append(SectionRerank(rr, RerankConfig(articles=articles, sections=sections,
                                                 alpha=default_alpha if alpha is None else alpha)))
    use_llm = answerer == "llm" or (answerer == "auto" and pipeline != "extractive" and "answerer" in roles)
    if use_llm:
        if "answerer" not in roles:
            raise ValueError("answerer='llm' needs the `answerer` model role (--llm URL --model NAME)")
        stages.append(GenerateAnswer(GenerateConfig(sections=sections), image_root=image_root))
    else:
        stages.append(ExtractiveAnswer(ExtractiveConfig(top_articles=2)))
    return stages


def answer_samples(records: Iterable[dict[str, Any]], stages: list[Stage], *, kb: Any, out: Path,
                   roles: Mapping[str, Any] | None = None, concurrency: int = 4, progress: bool = False,
                   resume: bool = False, run_config: dict[str, Any] | None = None) -> Any:
    """Run the stages over sample dicts; one prediction line per sample (failures as error lines)."""
    from kbvqa.runner import run

    ctx = Context(kb=kb, roles=dict(roles or {}))
    return run(records, stages, ctx, out=Path(out), concurrency=concurrency, resume=resume, progress=progress,
               run_config={"stages": [s.name for s in stages], **(run_config or {})},
               description="answer")


def write_retrieval_records(predictions: Path, out: Path) -> Path:
    """One Recall@K record per (prediction, retrieval stage); failed lines become empty (miss) records."""
    from kbvqa.runner import read_results
    from kbvqa.stages.retrieve import retrieval_records

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for rec in read_results(predictions):
            for r in retrieval_records(rec):
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return out


# -- augmentation study ------------------------------------------------------------------------------


def augmentation_recall_table(records: Iterable[Mapping[str, Any]], references: Mapping[str, Any], *,
                              ks: Iterable[int] = (1, 5, 10, 20), stage: str = "initial",
                              original_as: str = "original") -> list[dict[str, Any]]:
    """Recall@K per augmentation variant, side by side (one row per variant, anchor first).

    `records` are retrieval records ({id, retrieved, stage}); an id's `__anchor/__intra/__inter/
    __blank/__double` suffix names its variant (no suffix = the original sample). `references` maps
    ids to `RetrievalRef` (from `load_retrieval_references`) or to gold url lists; a variant id is
    looked up as itself, then as its base id. Each row: variant, n, R@K..., MRR, n_no_reference, and
    dR@K against the anchor over the base ids both have (paired, so a partial run is comparable).
    """
    from kbvqa.data.urls import dedupe_urls
    from kbvqa.evaluate.retrieval import gold_rank

    ks = sorted(set(int(k) for k in ks))
    ranks: dict[str, dict[str, int | None]] = {}
    no_ref: dict[str, int] = {}
    for rec in records:
        if rec.get("stage", "initial") != stage:
            continue
        rid = str(rec.get("id") or rec.get("data_id") or rec.get("sample_id"))
        base, variant = split_variant(rid)
        variant = variant or original_as
        ref = references.get(rid, references.get(base))
        if ref is None:
            no_ref[variant] = no_ref.get(variant, 0) + 1
            continue
        gold = list(getattr(ref, "gold", ref))
        ranks.setdefault(variant, {})[base] = gold_rank(dedupe_urls(rec.get("retrieved") or []),
                                                        dedupe_urls(gold))
    order = [v for v in (*VARIANTS, original_as) if v in ranks or v in no_ref]
    order += sorted(v for v in ranks if v not in order)

    def recall(rs: Iterable[int | None], k: int) -> float:
        rs = list(rs)
        return sum(1 for r in rs if r is not None and r <= k) / len(rs) if rs else 0.0

    anchor = ranks.get("anchor", {})
    rows = []
    for v in order:
        rs = ranks.get(v, {})
        row: dict[str, Any] = {"variant": v, "n": len(rs)}
        for k in ks:
            row[f"R@{k}"] = round(recall(rs.values(), k), 4)
        row["MRR"] = round(sum(1.0 / r for r in rs.values() if r) / len(rs), 4) if rs else 0.0
        row["n_no_reference"] = no_ref.get(v, 0)
        if v != "anchor" and anchor:
            paired = [b for b in rs if b in anchor]
            row["n_paired"] = len(paired)
            for k in ks:
                row[f"dR@{k}"] = round(recall((rs[b] for b in paired), k) - recall((anchor[b] for b in paired), k), 4)
        rows.append(row)
    return rows


def markdown_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(no rows)"
    cols = list(dict.fromkeys(c for r in rows for c in r))
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join("" if r.get(c) is None else str(r.get(c)) for c in cols) + " |")
    return "\n".join(lines)
