"""NoteVQA-style community data: lossless round trip, format sniffing, statistics, clear errors."""

from __future__ import annotations

import json

import pytest

from kbvqa.data.errors import DataError
from kbvqa.data.formats import detect_format, read_samples, write_samples
from kbvqa.data.stats import dataset_stats

ROWS = [
    {"id": "nv1", "images": ["q1.jpg"], "image_urls": ["https://example.org/q1.jpg"],
     "question": "这是什么蘑菇？能吃吗？", "answer": "鸡油菌，可以食用", "category": "Nature", "intent": "Identification",
     "language": "zh", "reference": {"text": "这是鸡油菌。\n<image>{\"candidate_images\": 1}</image>",
                                     "images": [{"path": "r1.jpg", "source_url": "https://example.org/a",
                                                 "sha256": "ab"}]},
     "source": {"platform": "x", "post_id": "p1"}, "likes": 12},
    {"id": "nv2", "images": [], "question": "Best season to visit?", "answers": ["spring", "autumn"],
     "category": "Travel", "intent": "Advice"},
]


def _write(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_round_trip_is_lossless(tmp_path):
    src = _write(tmp_path / "nv.jsonl", ROWS)
    assert detect_format(src) == "notevqa"
    samples = list(read_samples(src))
    assert samples[0].answers[0].text == "鸡油菌，可以食用" and samples[0].meta["intent"] == "Identification"
    assert samples[0].meta["reference"]["images"][0]["sha256"] == "ab" and samples[0].meta["extra"] == {"likes": 12}
    assert [a.text for a in samples[1].answers] == ["spring", "autumn"]
    out = tmp_path / "back.jsonl"
    write_samples(samples, out, "notevqa")
    assert [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()] == ROWS


def test_stats_count_category_intent_and_references(tmp_path):
    stats = dataset_stats(read_samples(_write(tmp_path / "nv.jsonl", ROWS)))
    assert stats["by_category"] == {"Nature": 1, "Travel": 1}
    assert stats["by_intent"] == {"Advice": 1, "Identification": 1}
    assert stats["interleaved_references"] == 1 and stats["reference_images"] == 1


@pytest.mark.parametrize("row, field", [
    ({"id": "x", "question": "q", "answer": "a", "answers": ["a"], "intent": "i"}, "answers"),
    ({"id": "x", "question": "q", "answers": "a", "intent": "i"}, "answers"),
    ({"id": "x", "question": "q", "answer": "a", "reference": "text only"}, "reference"),
    ({"id": "", "question": "q", "answer": "a", "intent": "i"}, "id"),
])
def test_bad_rows_name_file_row_and_field(tmp_path, row, field):
    src = _write(tmp_path / "bad.jsonl", [ROWS[1], row])
    with pytest.raises(DataError) as err:
        list(read_samples(src, "notevqa"))
    assert err.value.row == 2 and err.value.field == field and str(src) in str(err.value)
