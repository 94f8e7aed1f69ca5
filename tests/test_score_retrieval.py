"""Recall@K / MRR over de-duplicated url rankings, per stage; answer-in-retrieved-text recall."""

from __future__ import annotations

import json

import pytest

from kbvqa.evaluate.retrieval import (answer_in_text_recall, gold_rank, load_retrieval_records,
                                      load_retrieval_references, retrieval_metrics)

W = "https://en.wikipedia.org/wiki/"


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture()
def refs(tmp_path):
    rows = [
        {"id": "q1", "question": "?", "answers": ["Gustave Eiffel"], "entity": {"url": W + "Eiffel_Tower"}},
        {"id": "q2", "question": "?", "answers": ["oak"], "entity": {"url": "http://en.wikipedia.org/wiki/Oak"}},
        {"id": "q3", "question": "?", "answers": ["1889"], "entity": {"url": W + "Big_Ben"}},
        {"id": "q4", "question": "?", "answers": ["x"], "entity": {"url": W + "Louvre"}},
    ]
    return load_retrieval_references(_jsonl(tmp_path / "ref.jsonl", rows))


def test_recall_and_mrr_with_duplicate_urls(tmp_path, refs):
    recs = [
        # http/https and trailing-slash duplicates collapse: Eiffel_Tower is rank 2 after de-dup, not 4
        {"id": "q1", "stage": "initial", "retrieved": [W + "Paris", "http://en.wikipedia.org/wiki/Paris",
                                                       W + "Paris/", W + "Eiffel_Tower"]},
        {"id": "q2", "stage": "initial", "retrieved": [W + "Oak"]},
        {"id": "q3", "stage": "initial", "retrieved": [W + "A", W + "B", W + "C", W + "D", W + "E", W + "Big_Ben"]},
        # q4 has no initial record -> a miss, counted
        {"id": "q1", "stage": "post", "retrieved": [W + "Eiffel_Tower"]},
        {"id": "zz", "stage": "post", "retrieved": [W + "Eiffel_Tower"]},
    ]
    records, dup = load_retrieval_records(_jsonl(tmp_path / "rec.jsonl", recs))
    assert dup == 0
    assert records["initial"]["q1"][:2] == [W + "Paris", W + "Eiffel_Tower"]
    m = retrieval_metrics(records, refs, ks=[1, 3, 5, 10])
    ini = m["stages"]["initial"]
    assert ini["recall"] == {"@1": 0.25, "@3": 0.5, "@5": 0.5, "@10": 0.75}
    assert ini["mrr"] == pytest.approx((1 / 2 + 1 + 1 / 6) / 4)
    assert ini["n_missing"] == 1 and ini["n_with_record"] == 3
    post = m["stages"]["post"]
    assert post["recall"]["@1"] == 0.25 and post["n_missing"] == 3 and post["n_unknown_ids"] == 1


def test_two_hop_policies():
    ranking = [W + "A", W + "B", W + "C"]
    assert gold_rank(ranking, [W + "C", W + "A"], "any") == 1
    assert gold_rank(ranking, [W + "C", W + "A"], "all") == 3
    assert gold_rank(ranking, [W + "C", W + "Z"], "all") is None
    with pytest.raises(ValueError):
        gold_rank(ranking, [W + "A"], "most")  # type: ignore[arg-type]


def test_csv_references_two_hop(tmp_path):
    p = tmp_path / "evqa.csv"
    p.write_text("data_id,answer,question_type,wikipedia_url\n"
                 f"h1,Eiffel,2_hop,{W}Eiffel_Tower|{W}Gustave_Eiffel\n", encoding="utf-8")
    refs = load_retrieval_references(p)
    assert refs["h1"].gold == [W + "Eiffel_Tower", W + "Gustave_Eiffel"]
    records = {"initial": {"h1": [W + "Eiffel_Tower", W + "X"]}}
    assert retrieval_metrics(records, refs, ks=[2], two_hop="any")["stages"]["initial"]["recall"]["@2"] == 1.0
    assert retrieval_metrics(records, refs, ks=[2], two_hop="all")["stages"]["initial"]["recall"]["@2"] == 0.0


def test_answer_in_text_recall(refs):
    texts = {
        W + "Paris": "Paris is the capital of France.",
        W + "Eiffel_Tower": "The tower was designed by the company of Gustave Eiffel.",
        W + "Oak": "Cloaks are not trees.",  # 'oak' only inside 'cloaks': not word-bounded
    }
    records = {"q1": [W + "Paris", W + "Eiffel_Tower"], "q2": [W + "Oak"], "q3": [W + "Missing"]}
    r = answer_in_text_recall(records, refs, texts.get, ks=[1, 2])
    assert r["recall"] == {"@1": 0.0, "@2": 0.25}
    assert r["n_urls_without_text"] == 1 and r["n"] == 4


def test_composite_recall_at_k_has_k3_and_counts_a_missing_record_as_a_miss(tmp_path):
    """Issue 37: Table 2's K = 1, 3, 5, 10, 20 by default; a variant the references expect but no record
    holds is a miss (as `score retrieval` counts it), never left out of the denominator."""
    from typer.testing import CliRunner

    from kbvqa.cli.study import app as study_app
    from kbvqa.evaluate.augmentation import augmentation_recall_table

    refs = [{"id": f"a{i}__{v}", "question": "?", "answers": ["x"], "entity": {"url": W + f"E{i}"}}
            for i in range(4) for v in ("anchor", "intra")]
    ref_path = _jsonl(tmp_path / "samples.jsonl", refs)
    recs = [{"id": f"a{i}__anchor", "retrieved": [W + "X", W + "Y", W + f"E{i}"], "stage": "initial"} for i in range(4)]
    recs += [{"id": "a0__intra", "retrieved": [W + "E0"], "stage": "initial"},  # a1..a3 intra: no record
             {"id": "stray__intra", "retrieved": [W + "E0"], "stage": "initial"}]
    rec_path = _jsonl(tmp_path / "records.jsonl", recs)
    rows = {r["variant"]: r for r in augmentation_recall_table(recs, load_retrieval_references(ref_path))}
    a, b = rows["anchor"], rows["intra"]
    assert [k for k in a if k.startswith("R@")] == ["R@1", "R@3", "R@5", "R@10", "R@20"]
    assert (a["R@1"], a["R@3"], a["n"], a["n_missing"]) == (0.0, 1.0, 4, 0)
    assert (b["n"], b["n_with_record"], b["n_missing"], b["R@1"], b["R@20"]) == (4, 1, 3, 0.25, 0.25)
    assert (b["dR@1"], b["dR@3"], b["n_no_reference"]) == (0.25, -0.75, 1)
    r = CliRunner().invoke(study_app, ["augmentation-recall", "--records", str(rec_path), "--references",
                                       str(ref_path), "--json"])
    assert r.exit_code == 0, r.output
    got = {x["variant"]: x for x in json.loads(r.output)}
    assert got["intra"]["R@3"] == 0.25 and got["intra"]["n_missing"] == 3
