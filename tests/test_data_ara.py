"""ARA release files: byte-exact round trips of the five CSVs and the augmented samples."""

from pathlib import Path

import pytest

from kbvqa.data.ara import (ara_variant, augmented_samples, read_ara_augmented, write_ara_augmented)
from kbvqa.data.errors import DataError
from kbvqa.data.formats import detect_format, read_samples, write_samples
from kbvqa.data.schema import Answer

ARA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ara"
GT = ["infoseek_unfixed_subset.csv", "infoseek_fixed.csv", "evqa_unfixed_test_with_id.csv", "evqa_fixed.csv"]
AUG = ARA / "augmented" / "infoseek_challenging_queries_seed3185.csv"


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"ARA data not present: {path}")
    return path


@pytest.mark.parametrize("name", GT)
def test_ground_truth_round_trip_byte_exact(name, tmp_path):
    src = _need(ARA / "ground_truth" / name)
    assert detect_format(src) == "ara"
    samples = list(read_samples(src, "ara"))
    assert len(samples) > 0 and len({s.id for s in samples}) == len(samples)
    out = tmp_path / name
    assert write_samples(samples, out, "ara") == len(samples)
    assert out.read_bytes() == src.read_bytes()
    mid, out2 = tmp_path / "mid.jsonl", tmp_path / ("2" + name)
    write_samples(samples, mid, "kbvqa")
    write_samples(read_samples(mid), out2, "ara")
    assert out2.read_bytes() == src.read_bytes()


def test_variants():
    gt = _need(ARA / "ground_truth")
    assert ara_variant(gt / "infoseek_fixed.csv") == "infoseek_fixed"
    assert ara_variant(gt / "infoseek_unfixed_subset.csv") == "infoseek_unfixed"
    assert ara_variant(gt / "evqa_fixed.csv") == "evqa_fixed"
    assert ara_variant(gt / "evqa_unfixed_test_with_id.csv") == "evqa_unfixed"
    assert ara_variant(_need(AUG)) == "augmented"


def test_infoseek_rows_and_placeholders():
    src = _need(ARA / "ground_truth" / "infoseek_unfixed_subset.csv")
    samples = list(read_samples(src, "ara"))
    assert all(s.dataset == "infoseek" and s.evidence == [] and s.split is None for s in samples)
    assert {s.answer_type for s in samples} == {"String", "Numerical", "Time"}
    assert all(s.answer_type == s.question_type for s in samples)
    fixed = list(read_samples(_need(ARA / "ground_truth" / "infoseek_fixed.csv"), "ara"))
    assert all(s.dataset == "infoseek" for s in fixed)
    assert sum(1 for s in fixed if s.evidence) >= len(fixed) - 5
    assert {s.meta["final_check_tag"] for s in fixed} <= {"OK", "Needs_revision", "Not_answerable"}


def test_evqa_multipart_answers_from_ara():
    src = _need(ARA / "ground_truth" / "evqa_fixed.csv")
    samples = list(read_samples(src, "ara"))
    multi = [a for s in samples for a in s.answers if a.is_multipart]
    assert multi and all("&&".join(a.parts) == a.text for a in multi)
    assert all(s.meta.get("question_before_review") is not None for s in samples)


def test_augmented_rows_lossless(tmp_path):
    src = _need(AUG)
    rows = list(read_ara_augmented(src))
    assert list(rows[0])[:3] == ["anchor_data_id", "anchor_entity", "anchor_wikipedia_url"]
    out = tmp_path / "aug.csv"
    assert write_ara_augmented(rows, out) == len(rows)
    assert out.read_bytes() == src.read_bytes()


def test_augmented_samples():
    src = _need(AUG)
    row = next(read_ara_augmented(src))
    anchor, intra, inter = list(augmented_samples(src))[:3]
    aid = row["anchor_data_id"]
    assert (anchor.id, intra.id, inter.id) == (f"{aid}__anchor", f"{aid}__intra", f"{aid}__inter")
    assert anchor.question == row["anchor_question"] and anchor.images == [row["anchor_image_path"]]
    assert intra.question == row["method1_query"] and intra.images == [row["method1_composite_image_path"]]
    assert intra.answers == [Answer(text=row["method1_expected_answer"])]
    assert inter.question == row["method2_query_without_position"]
    assert inter.images == [row["method2_composite_image_path"]]
    assert anchor.entity.url == row["anchor_wikipedia_url"] == inter.entity.url
    assert inter.answer_type == row["anchor_question_type"]
    assert intra.meta["augmented"]["pair_data_id"] == row["method1_pair_data_id"]
    assert inter.meta["augmented"]["pair_data_id"] == row["method2_pair_data_id"]
    assert inter.meta["augmented"]["target_side"] == row["target_side"]
    with_pos = list(read_samples(src, "ara", with_position=True))
    assert with_pos[2].question == row["method2_query_with_position"]
    assert len(with_pos) == 3 * sum(1 for _ in read_ara_augmented(src))


def test_augmented_samples_cannot_be_written_as_ara(tmp_path):
    src = _need(AUG)
    with pytest.raises(DataError, match="write_ara_augmented"):
        write_samples(list(augmented_samples(src))[:3], tmp_path / "x.csv", "ara")


def test_augmented_bad_qtype(tmp_path):
    cols = ["anchor_data_id", "anchor_entity", "anchor_wikipedia_url", "anchor_question", "anchor_answer",
            "anchor_question_type", "anchor_image_path", "method1_query", "method1_expected_answer",
            "method1_composite_image_path", "method2_query_with_position", "method2_query_without_position",
            "method2_expected_answer", "method2_composite_image_path"]
    good = ["a1", "E", "u", "Q?", "A", "String", "i.jpg", "Q1?", "A", "c1.jpg", "Q2 left?", "Q2?", "A", "c2.jpg"]
    bad = ["a2"] + good[1:5] + ["Colour"] + good[6:]
    p = tmp_path / "aug.csv"
    write_ara_augmented([dict(zip(cols, good)), dict(zip(cols, bad))], p)
    assert detect_format(p) == "ara"
    with pytest.raises(DataError) as ei:
        list(read_samples(p))
    assert (ei.value.row, ei.value.field) == (3, "anchor_question_type")


def test_augmented_conversion_says_why_rows_become_three_samples(tmp_path):
    from typer.testing import CliRunner

    from kbvqa.cli.app import app

    res = CliRunner().invoke(app, ["data", "convert", str(_need(AUG)), str(tmp_path / "a.jsonl"), "--from", "ara",
                                   "--to", "kbvqa"])
    assert res.exit_code == 0, res.output
    assert "wrote 2514 sample(s)" in res.output and "note: each row of an ARA augmented CSV gives 3 samples" in res.output
