"""One writer per output: while a run holds its lock (`p.jsonl` -> `p.lock`), a second run on the same
output is refused at once, naming the holder, whatever the executor; the lock goes with its holder, even
a killed one, and a clean exit removes its file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.runner import Context, Stage, StageConfig
from kbvqa.runner.job import Job
from kbvqa.runner.lock import OutputLock, OutputLocked

HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from kbvqa.runner.lock import OutputLock
    OutputLock(Path(sys.argv[1])).acquire()
    print("held", flush=True)
    time.sleep(60)
""")


class Echo(Stage):
    name = "echo"
    version = "1"
    config_model = StageConfig

    async def run(self, record, ctx):
        return {**record, "seen": True}


@pytest.fixture
def holder(tmp_path):
    """Another process holding the lock of tmp_path/out.jsonl."""
    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    yield out, proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_a_second_run_on_the_same_output_is_refused(holder, executor):
    if executor == "ray":
        pytest.importorskip("ray")
    out, proc = holder
    out.write_text('{"id": "a", "status": "ok"}\n', encoding="utf-8")
    with pytest.raises(OutputLocked, match=rf"pid {proc.pid} on .*choose another --out"):
        Job([Echo()], Context()).run([{"id": "a"}, {"id": "b"}], out=out, progress=False, executor=executor,
                                     resume=False)
    # nothing was touched: not moved aside, not appended, no manifest
    assert out.read_text(encoding="utf-8") == '{"id": "a", "status": "ok"}\n'
    assert sorted(p.name for p in out.parent.iterdir()) == ["out.jsonl", "out.lock"]


def test_the_lock_dies_with_its_holder_and_is_reused(holder):
    out, proc = holder
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    s = Job([Echo()], Context()).run([{"id": "a"}], out=out, progress=False)
    assert s.ok == 1
    with OutputLock(out):  # released at the end of the run: the next one may take it
        pass


def test_the_cli_refuses_with_exit_2(holder, tmp_path):
    out, proc = holder
    refs = tmp_path / "refs.jsonl"
    refs.write_text('{"id": "a", "question": "q?", "answers": ["x"]}\n', encoding="utf-8")
    preds = tmp_path / "preds.jsonl"
    preds.write_text('{"sample_id": "a", "answer": "x"}\n', encoding="utf-8")
    res = CliRunner().invoke(app, ["score", "judge", "-p", str(preds), "-r", str(refs), "--out", str(out),
                                   "--judge-base-url", "http://127.0.0.1:9/v1", "--judge-model", "m"])
    assert res.exit_code == 2, res.output
    assert f"pid {proc.pid}" in res.output and "another kbvqa run" in res.output
