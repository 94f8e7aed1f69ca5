"""Augmentation study table: Recall@K per anchor / intra / inter / blank / double variant."""

from __future__ import annotations

import pytest

from kbvqa.data.variants import split_variant
from kbvqa.evaluate.augmentation import augmentation_recall_table
from kbvqa.evaluate.retrieval import RetrievalRef
from kbvqa.report.summaries import recall_by_variant_table
from kbvqa.report.tables import to_markdown


def markdown_table(rows):
    """The study table as `kbvqa study augmentation-recall` writes it (the one markdown writer),
    without the caption line."""
    return to_markdown(recall_by_variant_table(rows), caption=False).rstrip("\n")

G = "https://en.wikipedia.org/wiki/"


def _records():
    recs = []
    for i in range(4):
        gold = f"{G}E{i}"
        recs.append({"id": f"q{i}__anchor", "retrieved": [gold, f"{G}X"], "stage": "initial"})
        # intra-category distractor pushes gold to rank 2 for half of the samples
        recs.append({"id": f"q{i}__intra", "retrieved": ([f"{G}X", gold] if i % 2 else [gold]), "stage": "initial"})
        # inter-category: always found, but the url spelling differs (canonicalised before matching)
        recs.append({"id": f"q{i}__inter", "retrieved": [gold.replace("https", "http") + "/"], "stage": "initial"})
        recs.append({"id": f"q{i}__blank", "retrieved": [gold], "stage": "initial"})
    recs.append({"id": "q0__double", "retrieved": [], "stage": "initial"})  # a failed retrieval: a miss
    recs.append({"id": "q0__double", "retrieved": [f"{G}E0"], "stage": "post"})  # other stage: ignored
    recs.append({"id": "unknown__anchor", "retrieved": [f"{G}E0"], "stage": "initial"})
    recs.append({"id": "q1", "retrieved": [f"{G}E1"], "stage": "initial"})
    return recs


def test_split_variant():
    assert split_variant("q1__intra") == ("q1", "intra")
    assert split_variant("a__b__double") == ("a__b", "double")
    assert split_variant("q1__other") == ("q1__other", None)
    assert split_variant("plain") == ("plain", None)


def test_table_rows_side_by_side():
    refs = {f"q{i}": RetrievalRef(f"q{i}", [f"{G}E{i}"], [], None, i) for i in range(4)}
    rows = augmentation_recall_table(_records(), refs, ks=(1, 2))
    by = {r["variant"]: r for r in rows}
    assert [r["variant"] for r in rows] == ["anchor", "intra", "inter", "blank", "double", "original"]
    assert by["anchor"]["n"] == 4 and by["anchor"]["R@1"] == 1.0 and by["anchor"]["n_no_reference"] == 1
    assert by["intra"]["R@1"] == 0.5 and by["intra"]["R@2"] == 1.0 and by["intra"]["dR@1"] == -0.5
    assert by["intra"]["MRR"] == pytest.approx(0.75)
    assert by["inter"]["R@1"] == 1.0
    # every anchor some variant has a record for is expected in every variant: without a record, a miss
    assert by["double"] == {"variant": "double", "n": 4, "n_with_record": 1, "n_missing": 3, "R@1": 0.0, "R@2": 0.0,
                            "MRR": 0.0, "n_no_reference": 0, "n_paired": 4, "dR@1": -1.0, "dR@2": -1.0,
                            "expected_from": "records"}
    assert by["original"]["n"] == 4 and by["original"]["n_missing"] == 3 and by["original"]["R@1"] == 0.25
    md = markdown_table(rows)
    # tables show percentages (the rows keep fractions)
    assert md.splitlines()[0].startswith(r"| variant | n | R@1 \(%\) | R@2 \(%\) |") and "| intra | 4 | 50.00 |" in md
    # references may also be plain url lists, and the post stage can be tabulated on its own
    post = augmentation_recall_table(_records(), {"q0": [f"{G}E0"]}, ks=(1,), stage="post")
    assert post == [{"variant": "double", "n": 1, "n_with_record": 1, "n_missing": 0, "R@1": 1.0, "MRR": 1.0,
                     "n_no_reference": 0, "expected_from": "records"}]
    assert markdown_table([]) == "(no rows)"
