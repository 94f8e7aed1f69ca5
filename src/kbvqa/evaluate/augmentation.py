"""The augmentation study (seed 000's Table 2): Recall@K per variant, side by side.

The augment pipeline writes samples `<anchor>__anchor|__intra|__inter|__blank|__double`
(kbvqa.data.variants); a retriever ranks KB articles for each; this study puts the variants' Recall@K
and MRR next to each other, with the change against the anchor paired on the anchors both have, so
a partial run stays comparable. It reads retrieval records (`kbvqa retrieve`, or the answer
pipelines' records); retrieving the augmented samples first is the augment pipeline's
`augmentation_recall` (kbvqa.pipelines.augment.study), since retrieval is a pipeline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from kbvqa.data.urls import dedupe_urls
from kbvqa.data.variants import VARIANTS, split_variant

__all__ = ["augmentation_recall_table", "augmentation_recall_study"]


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


def augmentation_recall_study(records: Sequence[str | Path], references: str | Path, *,
                              ks: Sequence[int] = (1, 5, 10, 20), stage: str = "initial") -> list[dict[str, Any]]:
    """The study from files: retrieval records (one or more JSONL files, ids with variant suffixes)
    against the gold urls in `references` (kbvqa JSONL, or CSV with wikipedia_url). Returns the rows."""
    from kbvqa.evaluate.io import read_jsonl
    from kbvqa.evaluate.retrieval import load_retrieval_references

    if not records:
        raise ValueError("no retrieval records given")
    refs = load_retrieval_references(references)
    recs = [obj for p in records for _, obj in read_jsonl(p)]
    return augmentation_recall_table(recs, refs, ks=ks, stage=stage)
