"""kbvqa JSONL (incl. runner output lines), DataError formatting, and dataset_stats numbers."""

import json

import pytest

from kbvqa.data.errors import DataError, SkipReport
from kbvqa.data.formats import read_samples, write_samples
from kbvqa.data.schema import Answer, Entity, Evidence, Sample
from kbvqa.data.stats import dataset_stats
from kbvqa.report.summaries import dataset_stats_table


def test_data_error_str():
    e = DataError("empty answer", file="file.csv", row=12, field="answer")
    assert str(e) == "file.csv, row 12, field 'answer': empty answer"
    assert (e.file, e.row, e.field, e.message) == ("file.csv", 12, "answer", "empty answer")
    assert str(DataError("boom")) == "boom"


def test_kbvqa_round_trip_and_runner_lines(tmp_path):
    s = Sample(id="a", question="Q?", answers=[Answer(text="1 && 2", parts=["1 ", " 2"])], split="val")
    p = tmp_path / "s.jsonl"
    assert write_samples([s], p, "kbvqa") == 1
    line = json.loads(p.read_text())
    runner = dict(line, id="b", status="error", reason="timeout", attempts=2)
    p.write_text(json.dumps(line) + "\n\n" + json.dumps(runner) + "\n")
    a, b = read_samples(p, "kbvqa")
    assert a == s
    assert b.meta["run"] == {"status": "error", "reason": "timeout", "attempts": 2}


def test_kbvqa_validation_error_names_field(tmp_path):
    p = tmp_path / "s.jsonl"
    good = {"id": "a", "question": "Q?"}
    p.write_text("\n".join(json.dumps(x) for x in [good, {"id": "b"},
                                                  {"id": "c", "question": "Q", "answer_type": "Date"}]) + "\n")
    with pytest.raises(DataError) as ei:
        list(read_samples(p, "kbvqa"))
    assert (ei.value.row, ei.value.field) == (2, "question")
    report = SkipReport()
    assert [s.id for s in read_samples(p, "kbvqa", skip_invalid=True, report=report)] == ["a"]
    assert [r for r, _ in report.skipped] == [2, 3] and "answer_type" in report.skipped[1][1]


def _tiny():
    return [
        Sample(id="1", question="q", answers=["Paris", "paris"], images=["i"], question_type="templated",
               split="test", dataset="landmarks", entity=Entity(url="https://w/P"),
               evidence=[Evidence(text="Paris is ...")]),
        Sample(id="2", question="q", answers=[Answer(text="red&&blue", parts=["red", "blue"])],
               question_type="multi_answer", split="test", dataset="inaturalist"),
        Sample(id="3", question="q", answers=[Answer(text="12 metres", value=12, range=(10, 14))],
               images=["j"], question_type="Numerical", answer_type="Numerical", dataset="infoseek",
               entity=Entity(title="no url")),
        Sample(id="4", question="q", question_type="templated", split="val", dataset="landmarks", images=["k"]),
    ]


def test_stats_numbers():
    st = dataset_stats(_tiny())
    assert st["total"] == 4
    assert st["by_question_type"] == {"templated": 2, "multi_answer": 1, "Numerical": 1}
    assert st["by_answer_type"] == {"(none)": 3, "Numerical": 1}
    assert st["by_split"] == {"test": 2, "(none)": 1, "val": 1}
    assert st["by_dataset"] == {"landmarks": 2, "inaturalist": 1, "infoseek": 1}
    # canonical answers: "Paris" (1 word, 5 chars), "red&&blue" (1, 9), "12 metres" (2, 9)
    assert st["answer_words"] == {"mean": 1.333, "median": 1.0, "max": 2}
    assert st["answer_chars"] == {"mean": 7.667, "median": 9.0, "max": 9}
    assert st["multipart"] == 1 and st["numeric_with_range"] == 1
    assert st["missing"] == {"answers": 1, "entity_url": 3, "images": 1, "evidence": 3}
    assert len(dataset_stats_table(st).rows) > 10


def test_stats_empty():
    st = dataset_stats([])
    assert st["total"] == 0 and st["answer_words"]["max"] == 0
