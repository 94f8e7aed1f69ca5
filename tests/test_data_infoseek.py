"""InfoSeek JSONL adapter: mapping, lossless write-back, qtype file, error messages."""

import json

import pytest

from kbvqa.data.errors import DataError, SkipReport
from kbvqa.data.formats import detect_format, read_samples, write_samples
from kbvqa.data.infoseek import normalise_answer_type

ROWS = [
    {"data_id": "infoseek_val_00000001", "image_id": "oven_001", "question": "What country is this building in?",
     "answer": ["Serbia"], "answer_eval": ["Serbia", "Republic of Serbia"], "data_split": "val_unseen_question",
     "entity_id": "Q123"},
    {"data_id": "infoseek_val_00000002", "image_id": "oven_002", "question": "How tall is this tower?",
     "answer": ["324 metre"], "answer_eval": [{"wikidata": 324.0, "range": [291.6, 356.4]}],
     "data_split": "val_unseen_entity", "extra_key": {"nested": [1, 2]}},
    # numeric dict on its own, int wikidata, different key order
    {"question": "How many floors?", "data_id": "infoseek_val_00000003", "image_id": "oven_003",
     "answer": ["27"], "answer_eval": {"wikidata": 27, "range": [24, 30]}, "data_split": "val_unseen_entity"},
    {"data_id": "infoseek_val_00000004", "image_id": "oven_004", "question": "When was it opened?",
     "answer": ["1986"], "answer_eval": ["1986", "18 November 1986"], "data_split": "val_unseen_question"},
]
QTYPES = [{"data_id": "infoseek_val_00000001", "question_type": "String"},
          {"data_id": "infoseek_val_00000002", "question_type": "numerical"},
          {"data_id": "infoseek_val_00000003", "question_type": "Numerical"},
          {"data_id": "infoseek_val_00000004", "question_type": "TIME"}]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def files(tmp_path):
    return _jsonl(tmp_path / "val.jsonl", ROWS), _jsonl(tmp_path / "qtype.jsonl", QTYPES)


def test_mapping(files):
    data, qt = files
    s1, s2, s3, s4 = read_samples(data, "infoseek", qtypes=qt)
    assert s1.id == "infoseek_val_00000001" and s1.images == ["oven_001"]
    assert s1.answer_texts == ["Serbia", "Republic of Serbia"]
    assert s1.entity.wikidata_id == "Q123" and s1.split == "val_unseen_question" and s1.dataset == "infoseek"
    assert (s1.question_type, s1.answer_type) == ("String", "String")
    assert (s2.question_type, s2.answer_type) == ("numerical", "Numerical")
    a = s2.answers[0]
    assert a.text == "324 metre" and a.value == 324.0 and a.range == (291.6, 356.4)
    assert s2.meta["extra_key"] == {"nested": [1, 2]}
    assert s3.answers[0].range == (24.0, 30.0) and s3.answers[0].value == 27.0
    assert s4.answer_type == "Time"


def test_round_trip_identical_objects_and_key_order(files, tmp_path):
    data, qt = files
    assert detect_format(data) == "infoseek"
    out, qout = tmp_path / "out.jsonl", tmp_path / "qout.jsonl"
    n = write_samples(read_samples(data, "infoseek", qtypes=qt), out, "infoseek", qtypes_out=qout)
    assert n == 4
    got = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert got == ROWS
    assert [list(g) for g in got] == [list(r) for r in ROWS]
    # exact value types survive too (int 27 stays int, the bare dict stays a dict)
    assert [json.dumps(g) for g in got] == [json.dumps(r) for r in ROWS]
    assert [json.loads(line) for line in qout.read_text().splitlines()] == QTYPES


def test_round_trip_through_kbvqa_jsonl(files, tmp_path):
    data, qt = files
    mid, out = tmp_path / "mid.jsonl", tmp_path / "out.jsonl"
    write_samples(read_samples(data, "infoseek", qtypes=qt), mid, "kbvqa")
    assert detect_format(mid) == "kbvqa"
    write_samples(read_samples(mid), out, "infoseek")
    assert [json.dumps(json.loads(x)) for x in out.read_text().splitlines()] == [json.dumps(r) for r in ROWS]


def test_edited_answers_are_written(files, tmp_path):
    data, qt = files
    samples = list(read_samples(data, "infoseek", qtypes=qt))
    samples[2].answers[0] = samples[2].answers[0].model_copy(update={"range": (25.0, 29.0)})
    samples[0].answers = samples[0].answers[:1]
    out = tmp_path / "out.jsonl"
    write_samples(samples, out, "infoseek")
    got = [json.loads(x) for x in out.read_text().splitlines()]
    assert got[2]["answer_eval"] == [{"wikidata": 27.0, "range": [25.0, 29.0]}]
    assert got[0]["answer_eval"] == ["Serbia"] and got[0]["answer"] == ["Serbia"]
    assert got[1] == ROWS[1]


def test_no_qtype_file_infers_numerical(files):
    data, _ = files
    s = list(read_samples(data, "infoseek"))
    assert s[1].answer_type == "Numerical" and s[1].question_type is None
    assert s[0].answer_type is None


def test_bad_json_line_names_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps(ROWS[0]) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(DataError) as ei:
        list(read_samples(p, "infoseek"))
    assert ei.value.row == 2 and str(p) in str(ei.value) and "invalid JSON" in str(ei.value)


def test_missing_question(tmp_path):
    row = dict(ROWS[0])
    del row["question"]
    p = _jsonl(tmp_path / "v.jsonl", [ROWS[3], row])
    with pytest.raises(DataError) as ei:
        list(read_samples(p, "infoseek"))
    assert (ei.value.row, ei.value.field) == (2, "question")
    assert str(ei.value).endswith("row 2, field 'question': missing question")


def test_numeric_range_low_above_high(tmp_path):
    row = dict(ROWS[1], answer_eval=[{"wikidata": 5.0, "range": [9.0, 1.0]}])
    p = _jsonl(tmp_path / "v.jsonl", [row])
    with pytest.raises(DataError) as ei:
        list(read_samples(p, "infoseek"))
    assert ei.value.field == "answer_eval" and ei.value.row == 1 and "low > high" in ei.value.message


def test_unknown_qtype_names_qtype_file_row(files, tmp_path):
    data, _ = files
    qt = _jsonl(tmp_path / "q.jsonl", QTYPES[:2] + [{"data_id": "infoseek_val_00000003", "question_type": "Date"}]
                + QTYPES[3:])
    with pytest.raises(DataError) as ei:
        list(read_samples(data, "infoseek", qtypes=qt))
    assert ei.value.file == str(qt) and ei.value.row == 3 and ei.value.field == "question_type"
    assert "unknown question type 'Date'" in str(ei.value)
    report = SkipReport()
    got = list(read_samples(data, "infoseek", qtypes=qt, skip_invalid=True, report=report))
    assert [s.id[-1] for s in got] == ["1", "2", "4"] and report.count == 1


def test_id_missing_from_qtype_file(files, tmp_path):
    data, _ = files
    qt = _jsonl(tmp_path / "q.jsonl", QTYPES[:3])
    with pytest.raises(DataError) as ei:
        list(read_samples(data, "infoseek", qtypes=qt))
    assert ei.value.row == 4 and ei.value.field == "question_type"


def test_skip_invalid_counts_rows(tmp_path):
    p = tmp_path / "v.jsonl"
    bad_range = dict(ROWS[1], answer_eval=[{"wikidata": 5.0, "range": [9.0, 1.0]}])
    p.write_text("\n".join([json.dumps(ROWS[0]), "oops", json.dumps(bad_range), json.dumps(ROWS[3])]) + "\n")
    report = SkipReport()
    got = list(read_samples(p, "infoseek", skip_invalid=True, report=report))
    assert len(got) == 2 and report.count == 2
    assert [r for r, _ in report.skipped] == [2, 3]


def test_normalise_answer_type():
    assert normalise_answer_type(" numerical ") == "Numerical"
    with pytest.raises(ValueError):
        normalise_answer_type("date")
