"""Progress bars know their totals: streamed sample files are counted before a job starts (N/M and
an ETA, not N/?), and augment's composites advance a bar of their own."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest
from PIL import Image

import kbvqa.progress
from kbvqa.data import formats
from kbvqa.data.formats import SampleRecords, read_samples
from kbvqa.kb.base import InMemoryKB
from kbvqa.pipelines.audit import audit_file

runner_run = importlib.import_module("kbvqa.runner.run")  # the module (kbvqa.runner.run is also a function)


class Recorder:
    """Stands in for ProgressBar and remembers what it was told."""

    made: list["Recorder"] = []

    def __init__(self, total, description, enabled=True):
        self.total, self.description, self.done = total, description, 0
        Recorder.made.append(self)

    def advance(self, n=1, note=None):
        self.done += n

    def update(self, **kw):
        if kw.get("completed") is not None:
            self.done = kw["completed"]

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


@pytest.fixture
def recorder(monkeypatch):
    Recorder.made = []
    monkeypatch.setattr(runner_run, "ProgressBar", Recorder)
    monkeypatch.setattr(kbvqa.progress, "ProgressBar", Recorder)
    return Recorder


def _samples(path, n):
    path.write_text("".join(json.dumps({"id": f"s{i}", "question": f"What is {i}?", "answers": [str(i)],
                                        "images": []}) + "\n" for i in range(n)), encoding="utf-8")
    return path


def test_sample_records_count_first_and_stream_the_same_dumps(tmp_path, monkeypatch):
    p = _samples(tmp_path / "s.jsonl", 7)
    recs = SampleRecords(p)
    assert len(recs) == 7
    assert list(recs) == [s.dump() for s in read_samples(p)]
    assert runner_run._known_total(recs, None) == 7 and runner_run._known_total(recs, 3) == 3
    monkeypatch.setattr(formats, "COUNT_LIMIT_BYTES", 10)  # a file too big to pre-count: unknown, not wrong
    big = SampleRecords(p)
    with pytest.raises(TypeError):
        len(big)
    assert runner_run._known_total(big, None) is None and len(list(big)) == 7


def test_audit_run_progress_has_its_total(tmp_path, recorder):
    p = _samples(tmp_path / "s.jsonl", 5)
    audit_file(p, InMemoryKB([]), tmp_path / "out.jsonl", progress=True)
    (bar,) = [b for b in recorder.made if b.total is not None]
    assert bar.total == 5 and bar.done == 5


def test_composites_advance_their_own_bar(tmp_path, recorder):
    from kbvqa.pipelines.augment import composite as comp

    paths = []
    for i in range(3):
        paths.append(tmp_path / f"{i}.jpg")
        Image.fromarray(np.full((40, 60, 3), 60 * i, np.uint8)).save(paths[-1])
    style = comp.Style(height=32)
    tasks = [comp.Task(images={"a": str(paths[i]), "b": str(paths[(i + 1) % 3])},
                       jobs=(comp.Job(str(tmp_path / f"o{i}r.jpg"), ("a", "b")),
                             comp.Job(str(tmp_path / f"o{i}g.jpg"), ("a", "blank:b"))), style=style)
             for i in range(3)]
    for workers in (1, 2):
        Recorder.made = []
        results = comp.run_tasks(tasks, workers, progress=True)
        assert [r.status for res in results for r in res] == ["saved"] * 6
        (bar,) = Recorder.made
        assert (bar.description, bar.total, bar.done) == ("composites", 6, 6)
