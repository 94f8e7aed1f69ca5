"""Generic JSONL / CSV / Parquet tables with a column mapping."""

import csv
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kbvqa.data.errors import DataError, SkipReport
from kbvqa.data.formats import detect_format, read_samples, write_samples
from kbvqa.data.generic import parse_mapping
from kbvqa.data.schema import Sample

MAPPING = {"id": "qid", "question": "q", "answers": "gold", "images": "image", "entity_url": "wiki"}
RECORDS = [
    {"qid": 7, "q": "What is this?", "gold": ["a cat", "cat"], "image": ["x.jpg"], "wiki": "https://w/Cat",
     "source": "forum", "score": 0.5},
    {"qid": "q8", "q": "Where?", "gold": "Paris|Lyon", "image": "y.jpg|z.jpg", "wiki": None, "source": "web",
     "score": 1},
]


def test_jsonl_round_trip(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    assert detect_format(p) == "jsonl"
    s1, s2 = read_samples(p, "jsonl", mapping=MAPPING)
    assert s1.id == "7" and s1.answer_texts == ["a cat", "cat"] and s1.images == ["x.jpg"]
    assert s1.entity.url == "https://w/Cat" and s1.meta["source"] == "forum" and s1.meta["score"] == 0.5
    assert s2.answer_texts == ["Paris", "Lyon"] and s2.images == ["y.jpg", "z.jpg"] and s2.entity is None
    out = tmp_path / "o.jsonl"
    write_samples(read_samples(p, "jsonl", mapping=MAPPING), out, "jsonl")
    assert [json.dumps(json.loads(x)) for x in out.read_text().splitlines()] == [json.dumps(r) for r in RECORDS]


def test_csv_round_trip_and_separator(tmp_path):
    p = tmp_path / "t.csv"
    with open(p, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["qid", "q", "gold", "note"])
        w.writerow(["1", "Q one?", "a;b", "n1"])
        w.writerow(["2", "Q two?", "c", ""])
    assert detect_format(p) == "csv"
    m = {"id": "qid", "question": "q", "answers": "gold"}
    s = list(read_samples(p, "csv", mapping=m, sep=";"))
    assert s[0].answer_texts == ["a", "b"] and s[0].meta["note"] == "n1"
    out = tmp_path / "o.csv"
    write_samples(s, out, "csv", sep=";")
    assert out.read_bytes() == p.read_bytes()


def test_parquet_round_trip_batches(tmp_path):
    rows = [{"qid": f"id{i}", "q": f"Q{i}?", "gold": [f"a{i}", f"b{i}"], "extra": i} for i in range(25)]
    p = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(rows), p)
    m = {"id": "qid", "question": "q", "answers": "gold"}
    samples = list(read_samples(p, mapping=m, batch_size=7))
    assert len(samples) == 25 and samples[24].answer_texts == ["a24", "b24"] and samples[3].meta["extra"] == 3
    out = tmp_path / "o.parquet"
    assert write_samples(samples, out, "parquet", batch_size=10) == 25
    assert pq.read_table(out).to_pylist() == rows


def test_from_samples_without_source(tmp_path):
    s = Sample(id="a", question="Q?", answers=["x", "y"], images=["i.png"], split="val", meta={"k": 1})
    out = tmp_path / "o.jsonl"
    write_samples([s], out, "jsonl", mapping={"id": "qid", "question": "q", "answers": "gold"})
    rec = json.loads(out.read_text())
    # a partial mapping: unmapped fields use same-named columns, meta keys follow
    assert rec == {"qid": "a", "q": "Q?", "gold": ["x", "y"], "images": ["i.png"], "split": "val", "k": 1}
    (back,) = read_samples(out, "jsonl", mapping={"id": "qid", "question": "q", "answers": "gold"})
    assert back.split == "val" and back.images == ["i.png"] and back.meta["k"] == 1


def test_parquet_flattens_structured_answers_to_text(tmp_path):
    from kbvqa.data.schema import Answer
    s = Sample(id="a", question="Q?", answers=[Answer(text="x&&y", parts=["x", "y"]), Answer(text="z")])
    out = tmp_path / "o.parquet"
    write_samples([s], out, "parquet")
    assert pq.read_table(out).to_pylist()[0]["answers"] == ["x&&y", "z"]


def test_errors(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps({"qid": "1", "q": ""}) + "\n" + json.dumps({"qid": "2", "q": "ok?", "t": "Date"}) + "\n"
                 + json.dumps({"qid": "3", "q": "fine?"}) + "\n")
    m = {"id": "qid", "question": "q", "answer_type": "t"}
    with pytest.raises(DataError) as ei:
        list(read_samples(p, "jsonl", mapping=m))
    assert (ei.value.row, ei.value.field) == (1, "q")
    report = SkipReport()
    got = list(read_samples(p, "jsonl", mapping=m, skip_invalid=True, report=report))
    assert [s.id for s in got] == ["3"] and report.count == 2 and report.skipped[1][0] == 2
    assert "field 't'" in report.skipped[1][1]


def test_parse_mapping():
    assert parse_mapping("id=qid, question=q") == {"id": "qid", "question": "q"}
    with pytest.raises(ValueError):
        parse_mapping("bogus=x")
    with pytest.raises(ValueError):
        parse_mapping("id")
