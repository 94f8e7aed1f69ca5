"""The augmentation manifest and the augmented samples.

Why the ARA columns: tools written for the authors' release (`infoseek_challenging_queries_*.csv`)
should read our output unchanged, so the CSV has exactly their 39 columns in their order, one row per
augmented anchor (written by `kbvqa.data.ara.write_ara_augmented`, which reproduces the release's
bytes). What the release has no column for (Blank/Double composites, per-anchor status, exclusions,
the explicit anchor question) goes into the JSONL manifest, which holds every input sample with a
status, and the same 39 keys first.

Augmented samples are kbvqa Samples with ids `<anchor>__anchor|__intra|__inter|__blank|__double`,
each carrying the anchor's answers; `anchor_id` (kbvqa.data.variants, re-exported here) maps a
prediction id back for scoring.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kbvqa.data.ara import write_ara_augmented
from kbvqa.data.jsonl import write_jsonl
from kbvqa.data.schema import Sample
from kbvqa.data.variants import VARIANTS, anchor_id, split_variant

ARA_COLUMNS: tuple[str, ...] = (
    "anchor_data_id", "anchor_entity", "anchor_wikipedia_url", "anchor_entity_type", "anchor_question",
    "anchor_answer", "anchor_question_type", "target_side",
    "method1_pair_entity", "method1_pair_data_id", "method1_pair_wikipedia_url", "method1_pair_type",
    "method1_similarity_basis", "method1_composite_layout", "method1_query", "method1_expected_answer",
    "method2_pair_entity", "method2_pair_data_id", "method2_pair_wikipedia_url", "method2_pair_type",
    "method2_similarity_basis", "method2_composite_layout", "method2_query", "method2_query_with_position",
    "method2_query_without_position", "method2_expected_answer", "distractor_entity",
    "distractor_wikipedia_url", "anchor_image_id", "anchor_image_path", "method1_pair_image_id",
    "method1_pair_image_path", "method2_pair_image_id", "method2_pair_image_path",
    "method1_composite_image_path", "method2_composite_image_path", "method1_image_status",
    "method2_image_status", "image_error")
# JSONL-only keys, after the ARA ones.
EXTRA_COLUMNS: tuple[str, ...] = (
    "status", "reason", "index", "type_source", "anchor_question_explicit", "anchor_question_made_explicit",
    "method1_similarity", "method1_query_errors", "method2_query_errors", "with_position",
    "blank_composite_image_path", "blank_image_status", "blank_query",
    "double_composite_image_path", "double_image_status", "double_query", "errors")

__all__ = ["ARA_COLUMNS", "EXTRA_COLUMNS", "VARIANTS", "anchor_id", "ara_row", "split_variant", "variant_samples",
           "write_csv", "write_manifest_jsonl"]


def ara_row(entry: dict[str, Any]) -> dict[str, str]:
    """The 39 ARA cells of a manifest entry, as strings in release order."""
    return {c: "" if entry.get(c) is None else str(entry[c]) for c in ARA_COLUMNS}


def write_csv(entries: Iterable[dict[str, Any]], path: str | Path) -> int:
    """The ARA-shaped CSV: augmented anchors only (excluded/not-sampled inputs live in the JSONL).
    Rows without a `status` (e.g. read from a released file) are written as they are."""
    rows = [ara_row(e) for e in entries if e.get("status", "ok") in ("ok", "partial", "error")]
    if not rows:  # still write the header so readers see the columns
        Path(path).write_bytes((",".join(ARA_COLUMNS) + "\r\n").encode())
        return 0
    return write_ara_augmented(rows, path)


def write_manifest_jsonl(entries: Iterable[dict[str, Any]], path: str | Path) -> int:
    """The manifest as JSONL: the ARA columns first, in their order, then kbvqa's own fields."""
    return write_jsonl(path, ({**{c: e.get(c) for c in ARA_COLUMNS}, **{k: v for k, v in e.items() if k not in ARA_COLUMNS}}
                              for e in entries))


def variant_samples(entry: dict[str, Any], anchor: Sample, variants: Iterable[str]) -> list[Sample]:
    """kbvqa Samples for one augmented anchor: `__anchor` plus each requested variant whose composite
    was saved. Answers, types and entity are the anchor's, so scoring needs no mapping table."""
    spec = {
        "intra": ("method1_query", "method1_composite_image_path", "method1_image_status"),
        "inter": ("method2_query", "method2_composite_image_path", "method2_image_status"),
        "blank": ("blank_query", "blank_composite_image_path", "blank_image_status"),
        "double": ("double_query", "double_composite_image_path", "double_image_status"),
    }
    base_meta = {"anchor_data_id": anchor.id, "target_side": entry.get("target_side"),
                 "anchor_entity_type": entry.get("anchor_entity_type")}
    out = [anchor.model_copy(update={"id": f"{anchor.id}__anchor",
                                     "meta": {**anchor.meta, "augmented": {"variant": "anchor", **base_meta}}},
                             deep=True)]
    for v in variants:
        qcol, icol, scol = spec[v]
        if entry.get(scol) != "saved":
            continue
        extra: dict[str, Any] = {"variant": v, **base_meta}
        if v in ("intra", "blank"):
            extra.update(pair_data_id=entry.get("method1_pair_data_id"),
                         similarity_basis=entry.get("method1_similarity_basis"))
        elif v == "inter":
            extra.update(pair_data_id=entry.get("method2_pair_data_id"),
                         similarity_basis=entry.get("method2_similarity_basis"),
                         with_position=entry.get("with_position", False))
        out.append(anchor.model_copy(update={
            "id": f"{anchor.id}__{v}", "question": entry[qcol], "images": [entry[icol]],
            "meta": {**anchor.meta, "augmented": extra}}, deep=True))
    return out
