"""THE crash test: SIGKILL (or SIGTERM) a run mid-way, resume, and check nothing is lost, duplicated or
re-run; a SIGTERM is handled as Ctrl-C (manifest `interrupted` with counts, exit 143)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kbvqa.runner import read_results

JOB = Path(__file__).with_name("runner_crash_job.py")
N = 300


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def sigkill_then_resume(out: Path, executor: str = "local", *, kill_env: dict | None = None,
                        resume_env: dict | None = None) -> None:
    """Start the job, SIGKILL it once 40 lines are written, resume it in a fresh process and check
    nothing is lost, duplicated or re-run. Shared with the Ray executor's test (`executor="ray"`)."""
    # 300 records x 20 ms / 4 workers is ~1.5 s of work: long enough to kill in the middle.
    proc = subprocess.Popen([sys.executable, str(JOB), str(out), str(N), "0.02", "4", executor],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=kill_env)
    try:
        deadline = time.monotonic() + 30
        while _lines(out) < 40:
            assert proc.poll() is None, f"job ended before it could be killed: {proc.communicate()}"
            assert time.monotonic() < deadline, "job wrote no output in time"
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    done_before = _lines(out)
    assert 40 <= done_before < N, "the kill should land mid-run"
    manifest_file = out.with_name(out.stem + ".manifest.json")
    assert json.loads(manifest_file.read_text())["state"] == "running"  # SIGKILL leaves no chance to finish it

    # Resume in a fresh process, fast this time.
    res = subprocess.run([sys.executable, str(JOB), str(out), str(N), "0", "4", executor], capture_output=True,
                         text=True, timeout=90, env=resume_env)
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    rows = list(read_results(out))
    ids = [r["id"] for r in rows]
    assert ids == [f"q{i:04d}" for i in range(N)]  # each exactly once, in input order
    assert len(out.read_text().splitlines()) == N  # compacted file, not just last-wins reading
    assert all(r["status"] == "ok" and r["answer"] == f"a{r['n']}" for r in rows)
    # Done-before-kill records were skipped, not re-run; in-flight ones were never written, so every
    # record has exactly one attempt.
    # A complete last line that only lacked its newline counts as done (+1).
    assert done_before <= summary["skipped"] <= done_before + 1
    assert summary["skipped"] + summary["ok"] == N and summary["error"] == summary["invalid"] == 0
    assert all(r["attempts"] == 1 for r in rows)
    manifest = json.loads(manifest_file.read_text())
    assert manifest["state"] == "finished"
    # the killed run is on record as interrupted, with what it had started
    assert [a["state"] for a in manifest["attempts"]] == ["interrupted"] and manifest["attempts"][0]["started"]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_sigkill_then_resume(tmp_path):
    sigkill_then_resume(tmp_path / "crash.jsonl")


def _start_and_wait(out: Path, lines: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(JOB), str(out), str(N), "0.02", "4"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while _lines(out) < lines:
        assert proc.poll() is None, f"job ended before the signal: {proc.communicate()}"
        assert time.monotonic() < deadline, "job wrote no output in time"
        time.sleep(0.005)
    return proc


def _journal_state(out: Path) -> str:
    from typer.testing import CliRunner

    from kbvqa.cli.app import app

    res = CliRunner().invoke(app, ["journal", "status", str(out), "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)["state"]


@pytest.mark.skipif(not hasattr(signal, "SIGTERM"), reason="needs SIGTERM")
def test_sigterm_is_an_interruption_and_resumes_exactly_once(tmp_path):
    out = tmp_path / "term.jsonl"
    manifest_file = tmp_path / "term.manifest.json"
    proc = _start_and_wait(out, 40)
    try:
        assert _journal_state(out) == "running"  # alive and holding its lock
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err
    assert "interrupted — rerun with --resume to finish" in err and "Traceback" not in err
    done = _lines(out)
    m = json.loads(manifest_file.read_text())
    assert m["state"] == "interrupted" and m["counts"]["ok"] == done and 40 <= done < N
    assert "SIGTERM" in m["error"] and m["writer"]["pid"] == proc.pid
    assert not (tmp_path / "term.lock").exists()  # the lock went with the run
    assert _journal_state(out) == "interrupted"

    res = subprocess.run([sys.executable, str(JOB), str(out), str(N), "0", "4"], capture_output=True, text=True,
                         timeout=90)
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["skipped"] == done and summary["ok"] == N - done
    rows = list(read_results(out))
    assert [r["id"] for r in rows] == [f"q{i:04d}" for i in range(N)] and all(r["attempts"] == 1 for r in rows)
    m = json.loads(manifest_file.read_text())
    assert m["state"] == "finished" and [a["state"] for a in m["attempts"]] == ["interrupted"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["term.jsonl", "term.manifest.json"]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_journal_status_calls_a_killed_run_interrupted(tmp_path):
    """SIGKILL leaves the manifest `running` (nothing can run in a killed process); readers see that its
    writer is gone and say interrupted."""
    out = tmp_path / "kill.jsonl"
    proc = _start_and_wait(out, 20)
    proc.kill()
    proc.communicate()
    assert json.loads((tmp_path / "kill.manifest.json").read_text())["state"] == "running"
    assert _journal_state(out) == "interrupted"
