"""`kbvqa view` shows why an agent episode ended: the forced-answer badge and facet, the forced turn, and
each harness notice on the step whose request carried it — from a real (baseline) run under a 2-turn
budget, not a hand-written line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the viewer needs the `view` extra (starlette, uvicorn, jinja2)")

from kbvqa.data.formats import read_samples  # noqa: E402
from kbvqa.kb.store import KBStore  # noqa: E402
from kbvqa.models.image_encoders import HistogramEncoder  # noqa: E402
from kbvqa.pipelines.answer import build_answer_job  # noqa: E402
from kbvqa.pipelines.index import build_image_index  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_viewer import client_for  # noqa: E402


def test_forced_answers_and_notices_are_shown(bench_copy, tmp_path):
    b = bench_copy(tmp_path / "bench")
    kb = KBStore(b.kb)
    enc = HistogramEncoder()
    index, _ = build_image_index(kb, b.root, enc)
    samples = [s.dump() for s in read_samples(b.samples, "kbvqa")][:1]
    job = build_answer_job("agent", kb=kb, index=index, encoder=enc, image_root=b.root, kb_images=b.root,
                           max_turns=2)
    job.run(samples, out=tmp_path / "runs" / "agent.jsonl", progress=False, run_config={"samples": str(b.samples)})
    kb.close()
    c = client_for(tmp_path / "runs")
    rid = samples[0]["id"]
    assert "forced answer" in c.get("/o/agent/").text  # the list's badge and facet
    page = c.get(f"/o/agent/r/{rid}").text
    assert "forced answer" in page and "forced turn (tools closed)" in page
    assert "harness: budget_warning" in page and "harness: forced_answer" in page
    assert "The tools are now closed" in page  # the notice's own text, as the model read it
