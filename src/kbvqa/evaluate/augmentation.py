"""The augmentation study (seed 000's Table 2): Recall@K per variant, side by side.

The augment pipeline writes samples `<anchor>__anchor|__intra|__inter|__blank|__double`
(kbvqa.data.variants); a retriever ranks KB articles for each; this study puts the variants' Recall@K
and MRR next to each other (K = 1, 3, 5, 10, 20 by default; an item without a record is a miss, as in
`kbvqa score retrieval`), with the change against the anchor paired on the anchors both have, so a
partial run stays comparable. It reads retrieval records (`kbvqa retrieve`, or the answer
pipelines' records); retrieving the augmented samples first is the augment pipeline's
`augmentation_recall` (kbvqa.pipelines.augment.study), since retrieval is a pipeline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from kbvqa.data.urls import dedupe_urls
from kbvqa.data.variants import VARIANTS, split_variant
from kbvqa.evaluate.retrieval import DEFAULT_KS, gold_rank  # K = 1, 3, 5, 10, 20: Table 2, `score retrieval`

__all__ = ["DEFAULT_KS", "augmentation_recall_table", "augmentation_recall_study"]


def augmentation_recall_table(records: Iterable[Mapping[str, Any]], references: Mapping[str, Any], *,
                              ks: Iterable[int] = DEFAULT_KS, stage: str = "initial",
                              original_as: str = "original") -> list[dict[str, Any]]:
    """Recall@K per augmentation variant, side by side (one row per variant, anchor first).

    `records` are retrieval records ({id, retrieved, stage}); an id's `__anchor/__intra/__inter/
    __blank/__double` suffix names its variant (no suffix = the original sample). `references` maps
    ids to `RetrievalRef` (from `load_retrieval_references`) or to gold url lists.

    The denominator is every item expected, as in `kbvqa score retrieval`: a reference id without a
    record for `stage` is a miss at every K (counted in n_missing). Expected items are the
    references' variant ids when they carry suffixes (the augmented samples: `expected_from`
    "references"); references keyed by base id (the original benchmark, which also holds the rows
    the augmentation could not use) expect, in every variant that has records, each anchor that some
    variant has a record for (`expected_from` "records": kbvqa's reconstruction). Records without a
    reference are counted in n_no_reference and left out. Each row: variant, n, R@K..., MRR,
    n_with_record, n_missing, n_no_reference, and dR@K against the anchor over the anchors both
    expect (paired, so a partial run is comparable).
    """
    ks = sorted(set(int(k) for k in ks))
    suffixed = any(split_variant(str(r))[1] is not None for r in references)
    expected: dict[str, set[str]] = {}
    if suffixed:
        for rid in references:
            base, variant = split_variant(str(rid))
            expected.setdefault(variant or original_as, set()).add(base)
    ranks: dict[str, dict[str, int | None]] = {}
    no_ref: dict[str, int] = {}
    for rec in records:
        if rec.get("stage", "initial") != stage:
            continue
        rid = str(rec.get("id") or rec.get("data_id") or rec.get("sample_id"))
        base, variant = split_variant(rid)
        variant = variant or original_as
        ref = references.get(rid) if suffixed else references.get(rid, references.get(base))
        if ref is None:
            no_ref[variant] = no_ref.get(variant, 0) + 1
            continue
        gold = list(getattr(ref, "gold", ref))
        ranks.setdefault(variant, {})[base] = gold_rank(dedupe_urls(rec.get("retrieved") or []),
                                                        dedupe_urls(gold))
    if not suffixed:  # references by base id: an anchor some variant has a record for was augmented
        seen = {b for rs in ranks.values() for b in rs}
        expected = {v: set(seen) for v in ranks}
    order = [v for v in (*VARIANTS, original_as) if v in expected or v in no_ref]
    order += sorted(v for v in expected if v not in order)

    def recall(rs: list[int | None], k: int) -> float:
        return sum(1 for r in rs if r is not None and r <= k) / len(rs) if rs else 0.0

    def ranks_of(v: str, bases: Iterable[str]) -> list[int | None]:
        got = ranks.get(v, {})
        return [got.get(b) for b in bases]  # no record: None, a miss

    anchor = expected.get("anchor", set())
    rows = []
    for v in order:
        exp = sorted(expected.get(v, set()))
        rs = ranks_of(v, exp)
        with_record = sum(1 for b in exp if b in ranks.get(v, {}))
        row: dict[str, Any] = {"variant": v, "n": len(exp)}
        for k in ks:
            row[f"R@{k}"] = round(recall(rs, k), 4)
        row["MRR"] = round(sum(1.0 / r for r in rs if r) / len(rs), 4) if rs else 0.0
        row["n_with_record"], row["n_missing"] = with_record, len(exp) - with_record
        row["n_no_reference"] = no_ref.get(v, 0)
        if v != "anchor" and anchor:
            paired = [b for b in exp if b in anchor]
            row["n_paired"] = len(paired)
            for k in ks:
                row[f"dR@{k}"] = round(recall(ranks_of(v, paired), k) - recall(ranks_of("anchor", paired), k), 4)
        row["expected_from"] = "references" if suffixed else "records"
        rows.append(row)
    return rows


def augmentation_recall_study(records: Sequence[str | Path], references: str | Path, *,
                              ks: Sequence[int] = DEFAULT_KS, stage: str = "initial") -> list[dict[str, Any]]:
    """The study from files: retrieval records (one or more JSONL files, ids with variant suffixes)
    against the gold urls in `references` (kbvqa JSONL, or CSV with wikipedia_url). Returns the rows."""
    from kbvqa.evaluate.io import read_jsonl
    from kbvqa.evaluate.retrieval import load_retrieval_references

    if not records:
        raise ValueError("no retrieval records given")
    refs = load_retrieval_references(references)
    recs = [obj for p in records for _, obj in read_jsonl(p)]
    return augmentation_recall_table(recs, refs, ks=ks, stage=stage)
