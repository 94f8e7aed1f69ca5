"""E-VQA CSV adapter: answer/part splitting, 2-hop entities, evidence, lossless rewrite, errors."""

import csv

import pytest

from kbvqa.data.errors import DataError, SkipReport
from kbvqa.data.evqa import OFFICIAL_COLUMNS
from kbvqa.data.formats import detect_format, read_samples, write_samples
from kbvqa.data.schema import Answer

ROWS = [
    # question, answer, dataset_image_ids, dataset_name, dataset_category_id, question_type, wikipedia_url,
    # wikipedia_title, evidence, evidence_section_id, evidence_section_title, split, question_original, used
    ["What colour are its eggs?", "white|pale blue ", "img1|img2", "inaturalist", "42", "templated",
     "https://en.wikipedia.org/wiki/Robin", "Robin", "The eggs are white.", "2", "Breeding", "test",
     "What colour are its eggs?", "True"],
    ["What does it eat?", "insects && seeds|seeds&&insects", "img3", "inaturalist", "43", "multi_answer",
     "https://en.wikipedia.org/wiki/Finch", "Finch", "", "", "", "test", "What does it eat?", "False"],
    ["Who designed the building in the city where this is?", "Gustave Eiffel", "img4", "landmarks", "7",
     "2_hop", "https://en.wikipedia.org/wiki/A|https://en.wikipedia.org/wiki/B", "A|B",
     "Designed by Eiffel, \"the engineer\".|Another line", "0|3", "Intro|History", "val",
     "Who designed it?\nSecond line", "False"],
    ["How tall is it?", "300", "", "landmarks", "8", "automatic", "https://en.wikipedia.org/wiki/C", "C",
     "It is 300 m tall.|and so on", "1", "Description|Description", "train", "", "True"],
]


def _write(path, header, rows, lineterminator="\r\n"):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator=lineterminator)
        w.writerow(header)
        w.writerows(rows)
    return path


@pytest.fixture
def evqa_csv(tmp_path):
    return _write(tmp_path / "test.csv", OFFICIAL_COLUMNS, ROWS, lineterminator="\n")


def test_mapping(evqa_csv):
    assert detect_format(evqa_csv) == "evqa"
    s0, s1, s2, s3 = read_samples(evqa_csv, "evqa")
    assert [s.id for s in (s0, s1, s2, s3)] == ["E-VQA_0", "E-VQA_1", "E-VQA_2", "E-VQA_3"]
    assert s0.answers == [Answer(text="white"), Answer(text="pale blue ")]
    assert s0.images == ["img1", "img2"] and s0.dataset == "inaturalist" and s0.split == "test"
    assert s0.evidence[0].text == "The eggs are white." and s0.evidence[0].section_id == "2"
    assert s0.evidence[0].section_title == "Breeding"
    assert s0.meta["dataset_category_id"] == "42" and s0.meta["wikipedia_url_used_in_train"] == "True"
    assert s0.answer_type is None and s0.question_type == "templated"
    a = s1.answers[0]
    assert a.text == "insects && seeds" and a.parts == ["insects ", " seeds"] and a.is_multipart
    assert "&&".join(a.parts) == a.text
    assert s1.evidence == []
    assert s2.entity.url.endswith("/A") and s2.entity.title == "A"
    assert [(e.url.rsplit("/", 1)[1], e.title) for e in s2.related_entities] == [("B", "B")]
    assert [(e.section_id, e.section_title) for e in s2.evidence] == [("0", "Intro"), ("3", "History")]
    assert s3.images == []


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_rewrite_is_byte_identical_line_endings_kept(tmp_path, eol):
    src = _write(tmp_path / "in.csv", OFFICIAL_COLUMNS, ROWS, lineterminator=eol)
    out = tmp_path / "out.csv"
    assert write_samples(read_samples(src, "evqa"), out, "evqa") == 4
    assert out.read_bytes() == src.read_bytes()  # LF stays LF, CRLF stays CRLF
    # and through the kbvqa JSONL intermediate
    mid, out2 = tmp_path / "mid.jsonl", tmp_path / "out2.csv"
    write_samples(read_samples(src, "evqa"), mid, "kbvqa")
    write_samples(read_samples(mid, "kbvqa"), out2, "evqa")
    assert out2.read_bytes() == src.read_bytes()


def test_samples_without_a_source_file_are_written_with_crlf(evqa_csv, tmp_path):
    from kbvqa.data.schema import Sample
    out = tmp_path / "o.csv"
    write_samples([Sample(id="q1", question="Q?", answers=["a"])], out, "evqa")
    assert out.read_bytes().count(b"\r\n") == 2  # the csv module's default, as before


def test_edits_are_written_and_untouched_groups_kept(evqa_csv, tmp_path):
    samples = list(read_samples(evqa_csv, "evqa"))
    samples[3].answers = [Answer(text="300 m")]
    samples[3].evidence = samples[3].evidence[:1]
    out = tmp_path / "out.csv"
    write_samples(samples, out, "evqa")
    with open(out, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert rows[3]["answer"] == "300 m"
    assert rows[3]["evidence"] == "It is 300 m tall." and rows[3]["evidence_section_id"] == "1"
    assert rows[2]["evidence"] == ROWS[2][8]


def test_data_id_column_is_the_id(tmp_path):
    p = _write(tmp_path / "x.csv", ["data_id", *OFFICIAL_COLUMNS], [["E-VQA_17", *ROWS[0]]])
    (s,) = read_samples(p, "evqa")
    assert s.id == "E-VQA_17"


def test_errors_name_row_and_field(tmp_path):
    bad = [ROWS[0], [""] + ROWS[1][1:], ROWS[2][:1] + ["  "] + ROWS[2][2:], ROWS[3][:5]]
    p = _write(tmp_path / "bad.csv", OFFICIAL_COLUMNS, bad)
    it = read_samples(p, "evqa")
    next(it)
    with pytest.raises(DataError) as ei:
        next(it)
    assert str(ei.value) == f"{p}, row 3, field 'question': missing question"
    report = SkipReport()
    got = list(read_samples(p, "evqa", skip_invalid=True, report=report))
    assert len(got) == 1 and report.count == 3
    assert [r for r, _ in report.skipped] == [3, 4, 5]
    assert "field 'answer': empty answer" in report.skipped[1][1]
    assert "expected 14 cells, found 5" in report.skipped[2][1]


def test_missing_column(tmp_path):
    cols = [c for c in OFFICIAL_COLUMNS if c != "answer"]
    p = _write(tmp_path / "x.csv", cols, [[c for c, h in zip(ROWS[0], OFFICIAL_COLUMNS) if h != "answer"]])
    with pytest.raises(DataError) as ei:
        list(read_samples(p, "evqa"))
    assert ei.value.row == 1 and ei.value.field == "answer"


def test_other_format_to_evqa_keeps_ids(tmp_path):
    from kbvqa.data.schema import Sample
    s = Sample(id="q1", question="Q?", answers=["a", "b"], images=["i"], question_type="templated",
               meta={"note": "x"})
    out = tmp_path / "o.csv"
    write_samples([s], out, "evqa")
    (back,) = read_samples(out, "evqa")
    assert back.id == "q1" and back.answer_texts == ["a", "b"] and back.meta["note"] == "x"
