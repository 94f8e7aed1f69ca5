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
