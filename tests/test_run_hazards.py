"""A user's bad day, each in one clear line (issue 34 items 4, 5, 6, 8, 9): side files of two outputs
never shared and no lock left behind; a full disk or an unwritable folder (exit 1, manifest `failed`, no
temporary files, the journal resumable); oversized records ended `error` before any stage; duplicate ids
refused before any record runs; SIGTERM in the CLI exits 143."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import unicodedata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.schema import Sample
from kbvqa.runner import Context, InputError, Stage, read_results, run
from kbvqa.runner.caps import SizeCaps
from kbvqa.runner.job import Job
from kbvqa.runner.lock import lock_path, run_state, side_path
from kbvqa.runner.manifest import manifest_path, read_manifest
from kbvqa.runner.sinks import JsonlJournal
from kbvqa.runner.write_errors import write_failure

URL = "https://en.wikipedia.org/wiki/McLaren_F1"


class Counting(Stage):
    """Counts the records it is given (a stand-in for a stage that would call a model)."""

    name = "counting"

    def __init__(self, pad: int = 0):
        super().__init__()
        self.seen: list[str] = []
        self.pad = pad

    async def run(self, record, ctx):
        self.seen.append(record["id"])
        return {**record, "note": "x" * self.pad} if self.pad else record


def recs(n: int) -> list[dict]:
    return [{"id": f"r{i:03d}", "question": f"q{i}?"} for i in range(n)]


def _audit_inputs(tmp_path: Path, questions: list[str]) -> tuple[Path, Path]:
    wiki = tmp_path / "wiki.json"
    wiki.write_text(json.dumps({URL: {"title": "McLaren F1", "section_titles": ["McLaren F1"],
                                      "section_texts": ["The McLaren F1 is a sports car with a top speed of "
                                                        "386 km/h."], "image_urls": []}}), encoding="utf-8")
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(Sample(id=f"s{i:03d}", question=q, answers=["386 km/h"], entity={"url": URL},
                                             answer_type="Numerical").dump()) + "\n"
                           for i, q in enumerate(questions)), encoding="utf-8")
    return inp, wiki


# --- side files and the lock (item 5) -------------------------------------------------------------

def test_p_jsonl_and_p_json_never_share_a_side_file(tmp_path):
    a, b = tmp_path / "p.jsonl", tmp_path / "p.json"
    assert {side_path(a, s) for s in (".manifest.json", ".retrieval.jsonl", ".cassette", ".lock")}.isdisjoint(
        {side_path(b, s) for s in (".manifest.json", ".retrieval.jsonl", ".cassette", ".lock")})
    assert manifest_path(a).name == "p.manifest.json" and manifest_path(b).name == "p.json.manifest.json"
    Job([Counting()], Context()).run(recs(2), out=a, progress=False)
    Job([Counting()], Context()).run(recs(3), out=b, progress=False)
    ma, mb = (json.loads(manifest_path(o).read_text()) for o in (a, b))
    assert ma["output"] == str(a) and mb["output"] == str(b) and ma["total"] == 2 and mb["total"] == 3
    assert mb["attempts"] == []  # the other output's run is not taken for this one's earlier attempt
    # a clean exit leaves no lock file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json", "p.json.manifest.json", "p.jsonl",
                                                          "p.manifest.json"]


def test_an_old_named_manifest_is_still_read(tmp_path):
    out = tmp_path / "p.json"
    out.write_text('{"id": "a", "status": "ok"}\n', encoding="utf-8")
    (tmp_path / "p.manifest.json").write_text(json.dumps({"output": str(out), "state": "finished"}))
    path, m = read_manifest(out)
    assert path == tmp_path / "p.manifest.json" and m["state"] == "finished"
    # ... but not one that describes another output of that stem
    (tmp_path / "p.manifest.json").write_text(json.dumps({"output": str(tmp_path / "p.jsonl"), "state": "x"}))
    assert read_manifest(out) == (None, {})


def test_run_state_reads_a_dead_writer_as_interrupted(tmp_path):
    out = tmp_path / "o.jsonl"
    proc = subprocess.Popen(["true"])
    proc.wait()  # a pid that has just ended (and been reaped)
    host = socket.gethostname()
    assert run_state({"state": "running", "writer": {"pid": proc.pid, "host": host}}, out) == "interrupted"
    assert run_state({"state": "running"}, out) == "interrupted"  # an older manifest: its lock is free
    assert run_state({"state": "finished"}, out) == "finished" and run_state({}, out) is None
    from kbvqa.runner.lock import OutputLock

    with OutputLock(out):  # held (this process is alive): running
        assert run_state({"state": "running", "writer": {"pid": os.getpid(), "host": host}}, out) == "running"
        assert lock_path(out).exists()
    assert not lock_path(out).exists()


# --- write failures (item 6) ----------------------------------------------------------------------

def test_enospc_in_the_journal_fails_the_run_in_one_line_and_resumes(tmp_path, monkeypatch):
    out = tmp_path / "o.jsonl"
    real = JsonlJournal.write_line
    calls = {"n": 0}

    def full_after_five(self, line):
        calls["n"] += 1
        if calls["n"] > 5:
            raise OSError(errno.ENOSPC, "No space left on device")  # as write() raises it: no file name
        real(self, line)

    monkeypatch.setattr(JsonlJournal, "write_line", full_after_five)
    with pytest.raises(OSError) as err:
        run(recs(20), [Counting()], Context(), out=out, progress=False, concurrency=1)
    line = write_failure(err.value)
    assert line.startswith(f"cannot write {out}: No space left on device") and "\n" not in line
    m = json.loads(manifest_path(out).read_text())
    assert m["state"] == "failed" and m["counts"]["ok"] == 5 and str(out) in m["error"]
    assert not list(tmp_path.glob("*.tmp")) and not lock_path(out).exists()
    monkeypatch.setattr(JsonlJournal, "write_line", real)
    s = run(recs(20), [Counting()], Context(), out=out, progress=False)
    assert s.skipped == 5 and s.ok == 15 and len(list(read_results(out))) == 20


def test_a_failed_compaction_leaves_no_tmp(tmp_path, monkeypatch):
    import kbvqa.runner.sinks as sinks

    out = tmp_path / "o.jsonl"
    real_replace = os.replace

    def no_room(src, dst):
        if str(src).endswith(".compact.tmp"):
            raise OSError(errno.ENOSPC, "No space left on device", str(src))
        real_replace(src, dst)

    monkeypatch.setattr(sinks.os, "replace", no_room)
    with pytest.raises(OSError):
        run(recs(4), [Counting()], Context(), out=out, progress=False)
    assert not list(tmp_path.glob("*.tmp")) and json.loads(manifest_path(out).read_text())["state"] == "failed"


def test_an_unwritable_folder_is_one_line_exit_1(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder anyway; the full-disk test covers the CLI path")
    inp, wiki = _audit_inputs(tmp_path, ["What is its top speed?"])
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        res = CliRunner().invoke(app, ["audit", "run", str(inp), "--kb", str(wiki), "--out", str(ro / "o.jsonl")])
    finally:
        ro.chmod(0o700)
    assert res.exit_code == 1 and "cannot write" in res.output and "Traceback" not in res.output


@pytest.fixture
def tiny_fs(tmp_path):
    """A 512 KiB tmpfs (needs root and mount); skipped, saying why, where it cannot be mounted."""
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root and mount(8); the ENOSPC unit tests cover the logic")
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_filesystem_ends_in_one_line(tiny_fs, tmp_path):
    # 150 records whose audit lines hold ~6 KB each: ~0.9 MB into a 512 KiB filesystem
    inp, wiki = _audit_inputs(tmp_path, [f"What is its top speed? {'detail ' * 700}{i}" for i in range(150)])
    out = tiny_fs / "o.jsonl"
    res = CliRunner().invoke(app, ["audit", "run", str(inp), "--kb", str(wiki), "--out", str(out)])
    assert res.exit_code == 1, res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and str(tiny_fs) in errors[0], res.output
    assert "Traceback" not in res.output
    assert not [p.name for p in tiny_fs.iterdir() if p.name.endswith(".tmp") or p.name.endswith(".lock")]
    done = len(list(read_results(out)))
    assert 0 < done < 150
    m = json.loads(manifest_path(out).read_text())
    # the running manifest kept room for its last word: overwritten in place when no new file fits
    assert m["state"] == "failed" and m["counts"]["ok"] == done and "No space left on device" in m["error"]
    subprocess.run(["mount", "-o", "remount,size=16m", str(tiny_fs)], check=True)
    res = CliRunner().invoke(app, ["audit", "run", str(inp), "--kb", str(wiki), "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    rows = list(read_results(out))
    assert len(rows) == 150 and len({r["id"] for r in rows}) == 150 and all(r["attempts"] == 1 for r in rows)
    assert json.loads(manifest_path(out).read_text())["attempts"][-1]["state"] == "failed"


# --- size caps (item 8) ---------------------------------------------------------------------------

def test_a_50_mb_field_ends_error_before_any_stage(tmp_path):
    big = {"id": "big", "question": "x" * 50_000_000, "answers": ["a"]}
    stage = Counting()
    out = tmp_path / "o.jsonl"
    s = run([recs(1)[0], big, recs(2)[1]], [stage], Context(), out=out, progress=False)
    assert stage.seen == ["r000", "r001"] and s.error == 1 and s.ok == 2
    row = {r["id"]: r for r in read_results(out)}["big"]
    assert row["status"] == "error" and row["stage"] == "input" and "question" not in row and row["answers"] == ["a"]
    assert row["reason"].startswith("InputTooLarge: field 'question' holds 50000000 bytes of text, over the "
                                    "1048576-byte field cap (KBVQA_MAX_FIELD_BYTES)")
    assert out.stat().st_size < 10_000
    assert json.loads(manifest_path(out).read_text())["runner"]["size_caps"]["max_field_bytes"] == 1 << 20


def test_caps_are_configurable_and_count_utf8_bytes(tmp_path, monkeypatch):
    caps = SizeCaps(field_bytes=100, record_bytes=150)
    assert caps.refusal({"id": "a", "q": "é" * 50}) is None  # 100 bytes: at the cap
    reason, kept = caps.refusal({"id": "a", "q": "é" * 51})
    assert "'q' holds 102 bytes" in reason and kept == {"id": "a"}
    reason, kept = caps.refusal({"id": "a", "q": "x" * 80, "meta": {"notes": ["y" * 80]}, "n": 3})
    assert "record holds 160 bytes" in reason and "field" not in reason.split(";")[0] and kept == {"id": "a"}
    monkeypatch.setenv("KBVQA_MAX_FIELD_BYTES", "10")
    stage = Counting()
    s = run([{"id": "a", "q": "short"}, {"id": "b", "q": "much longer than ten"}], [stage], Context(),
            out=tmp_path / "o.jsonl", progress=False)
    assert stage.seen == ["a"] and s.error == 1
    monkeypatch.setenv("KBVQA_MAX_FIELD_BYTES", "0")  # off
    assert SizeCaps.from_env().field_bytes is None
    monkeypatch.setenv("KBVQA_MAX_FIELD_BYTES", "lots")
    with pytest.raises(ValueError, match="KBVQA_MAX_FIELD_BYTES='lots'"):
        SizeCaps.from_env()


def test_the_cli_ends_an_oversized_question_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KBVQA_MAX_FIELD_BYTES", "2000")
    inp, wiki = _audit_inputs(tmp_path, ["What is its top speed?", "y" * 5000])
    out = tmp_path / "o.jsonl"
    res = CliRunner().invoke(app, ["audit", "run", str(inp), "--kb", str(wiki), "--out", str(out)])
    rows = {r["id"]: r for r in read_results(out)}
    assert rows["s001"]["status"] == "error" and "InputTooLarge" in rows["s001"]["reason"], res.output
    assert rows["s000"]["status"] == "ok"


# --- duplicate ids (item 9) -----------------------------------------------------------------------

def test_a_late_duplicate_is_refused_before_any_record_runs(tmp_path):
    questions = ["What is its top speed?"] * 201
    inp, wiki = _audit_inputs(tmp_path, questions)
    lines = inp.read_text(encoding="utf-8").splitlines()
    lines[200] = lines[200].replace('"s200"', '"s003"')
    inp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "o.jsonl"
    res = CliRunner().invoke(app, ["audit", "run", str(inp), "--kb", str(wiki), "--out", str(out)])
    assert res.exit_code == 2, res.output
    assert "duplicate id 's003' at input records #3 and #200" in res.output and "before any record ran" in res.output
    assert not out.exists() and not manifest_path(out).exists()  # nothing ran, nothing written


def test_all_duplicates_named_at_once_and_near_duplicates_warned(tmp_path, caplog):
    data = recs(3) + [{"id": "r001"}, {"id": "r002"}]
    with pytest.raises(InputError, match=r"duplicate ids 'r001' at input records #1 and #3; 'r002' at input "
                                         r"records #2 and #4"):
        run(data, [Counting()], Context(), out=tmp_path / "o.jsonl", progress=False)
    nfc = unicodedata.normalize("NFC", "café")
    nfd = unicodedata.normalize("NFD", "café")
    with caplog.at_level("WARNING", logger="kbvqa.runner"):
        s = run([{"id": nfc}, {"id": nfd}, {"id": " r9"}, {"id": "r9"}], [Counting()], Context(),
                out=tmp_path / "w.jsonl", progress=False)
    assert s.ok == 4  # different records to kbvqa: warned, not merged
    warned = [r.getMessage() for r in caplog.records if "differ only by" in r.getMessage()]
    assert len(warned) == 2 and "' r9'" in warned[1]
    caplog.clear()
    with caplog.at_level("WARNING", logger="kbvqa.runner"):  # a stream: warned as it is pulled
        run(iter([{"id": nfc}, {"id": nfd}]), [Counting()], Context(), out=tmp_path / "g.jsonl", progress=False)
    assert any("differ only by" in r.getMessage() for r in caplog.records)


# --- SIGTERM in the CLI (item 4) ------------------------------------------------------------------

def test_the_cli_ends_sigterm_with_143_and_the_hint(tmp_path, monkeypatch):
    import sys

    import kbvqa.runner
    from kbvqa.runner.interrupt import Terminated

    rr = sys.modules["kbvqa.runner.run"]  # the package's `run` is the function

    out = tmp_path / "o.jsonl"
    out.write_text('{"id": "a", "status": "ok"}\n', encoding="utf-8")

    def stopped(_path):
        rr.INTERRUPTED.append(out)
        raise Terminated("SIGTERM")

    monkeypatch.setattr(kbvqa.runner, "read_results", stopped)
    monkeypatch.setattr(rr, "INTERRUPTED", [])
    res = CliRunner().invoke(app, ["journal", "status", str(out)])
    assert res.exit_code == 143 and f"{out}: interrupted — rerun with --resume to finish" in res.output


# --- a model reply over the documented size (item 8) -----------------------------------------------

def test_a_10_mb_reply_is_refused_not_stored():
    import asyncio
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from fake_llm_server import FakeLLMServer, ok

    from kbvqa.models.client import DEFAULT_MAX_REPLY_BYTES, OpenAIChatClient

    assert DEFAULT_MAX_REPLY_BYTES == 4 << 20  # docs/network.md, "What is capped"
    with FakeLLMServer() as srv:
        srv.push(ok("v" * 10_000_000), ok("fine"))
        client = OpenAIChatClient(srv.base_url, "fake", max_retries=0)

        async def both():
            try:
                return [await client.chat([{"role": "user", "content": "q"}]) for _ in range(2)]
            finally:
                await client.aclose()

        big, small = asyncio.run(both())
    assert big.status == "error" and "max_reply_bytes = 4194304" in big.reason and not big.text
    assert small.status == "ok" and small.text == "fine"


def test_a_run_whose_stages_never_wait_still_stops_at_once(tmp_path):
    """A rules-only stage never awaits: without the runner yielding per record, a Ctrl-C or SIGTERM
    (a cancel of the run's task) would be seen only after the last record."""
    import asyncio

    from kbvqa.runner import run_stages

    class Busy(Stage):
        name = "busy"

        async def run(self, record, ctx):
            sum(range(2000))  # CPU only, no await
            return record

    out = tmp_path / "o.jsonl"

    async def main():
        task = asyncio.create_task(run_stages(recs(2000), [Busy()], Context(), out=out, progress=False))
        for _ in range(50):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    m = json.loads(manifest_path(out).read_text())
    assert m["state"] == "interrupted" and 0 < m["counts"]["ok"] < 500


def test_a_full_disk_under_a_sqlite_side_file_names_it(tmp_path, monkeypatch):
    """The agent's tool cache and cassette are SQLite files the driver writes (runner.outbox): SQLite
    says 'database or disk is full', with no path; the failure names the file."""
    import sqlite3

    from kbvqa.data.kvstore import KVStore
    from kbvqa.data.outbox import EntryWrite
    from kbvqa.runner.outbox import Writer

    def full(self, *a, **k):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(KVStore, "put_now", full)
    db = tmp_path / "o.cassette" / "tools.sqlite"
    writer = Writer()
    try:
        with pytest.raises(OSError) as err:
            writer.apply([EntryWrite(str(db), "entries", "k", "v", "", 0.0)])
    finally:
        writer.close()
    assert err.value.errno == errno.ENOSPC and isinstance(err.value.__cause__, sqlite3.OperationalError)
    assert write_failure(err.value).startswith(f"cannot write {db}: SQLite: database or disk is full")


def test_a_pipeline_lends_its_lock_to_its_job_and_nobody_else(tmp_path):
    """`kbvqa answer` holds the output's lock across the job and the retrieval records it writes after;
    the job inside nests, a second acquisition anywhere else is refused, even in this process."""
    from kbvqa.runner.lock import OutputLock, OutputLocked

    out = tmp_path / "p.jsonl"
    with OutputLock(out, lend=True):
        s = Job([Counting()], Context()).run(recs(2), out=out, progress=False)
        assert s.ok == 2 and lock_path(out).exists()  # the job's release left the pipeline's lock alone
        side_path(out, ".retrieval.jsonl").write_text("", encoding="utf-8")
    assert not lock_path(out).exists()
    with OutputLock(out):
        with pytest.raises(OutputLocked, match="another kbvqa run"):
            Job([Counting()], Context()).run(recs(2), out=out, progress=False)


def test_a_full_disk_overwrites_the_running_manifest_in_place(tmp_path, monkeypatch):
    import builtins

    from kbvqa.runner.manifest import write_manifest

    path = tmp_path / "o.manifest.json"
    write_manifest(path, {"state": "running"}, reserve=4096)
    size = path.stat().st_size
    real_open = builtins.open

    def no_new_files(file, mode="r", *a, **k):
        if str(file).endswith(".tmp") and "w" in mode:
            raise OSError(errno.ENOSPC, "No space left on device", str(file))
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", no_new_files)
    write_manifest(path, {"state": "failed", "counts": {"ok": 3}})
    assert json.loads(path.read_text()) == {"state": "failed", "counts": {"ok": 3}} and path.stat().st_size == size
    with pytest.raises(OSError):  # too big for the room it has: raised, the old manifest left whole
        write_manifest(path, {"state": "failed", "error": "x" * 10_000})
    assert json.loads(path.read_text())["state"] == "failed" and not list(tmp_path.glob("*.tmp"))


def test_an_unreadable_input_is_not_called_a_write_failure(tmp_path, monkeypatch):
    import kbvqa.runner.write_errors as we

    f = tmp_path / "in.jsonl"
    f.write_text("{}\n")
    denied = PermissionError(errno.EACCES, "Permission denied", str(f))
    assert write_failure(denied).startswith(f"cannot write {f}: Permission denied")  # readable: a write
    monkeypatch.setattr(we.os, "access", lambda path, mode: False)
    assert write_failure(denied) is None  # exists, cannot be read: the input's own error, not a write
    assert write_failure(OSError(errno.ENOSPC, "No space left on device", str(f))).startswith("cannot write")


def test_view_export_on_a_full_disk_names_the_export_folder(tmp_path, monkeypatch):
    """write() on a full disk raises ENOSPC without a file name; `view --export` says which folder."""
    from typer.testing import CliRunner

    import kbvqa.report.viewer as viewer
    from kbvqa.cli.app import app

    def full(site, out):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(viewer, "export_site", full)
    (tmp_path / "runs").mkdir()
    res = CliRunner().invoke(app, ["view", str(tmp_path / "runs"), "--export", str(tmp_path / "site")])
    assert res.exit_code == 1, res.output
    assert f"cannot write {tmp_path / 'site'}: No space left on device" in res.output
    assert "Traceback" not in res.output
