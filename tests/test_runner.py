"""The local runner: statuses, resume, bounded concurrency, streaming, manifest, Parquet, input errors."""

from __future__ import annotations

import asyncio
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from kbvqa.data.schema import Provenance, Usage
from kbvqa.runner import (InputError, compact_journal, read_parquet, read_results, redact, run, run_stages)
from kbvqa.runner.sinks import JsonlJournal, scan_journal
from kbvqa.runner.stage import Context, Invalid, Stage, StageConfig


def recs(n: int, prefix: str = "r") -> list[dict[str, Any]]:
    return [{"id": f"{prefix}{i}", "n": i, "meta": {"k": i % 3}} for i in range(n)]


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


class Double(Stage):
    name = "double"
    version = "2"

    async def run(self, record, ctx):
        record["doubled"] = record["n"] * 2
        return record


class Picky(Stage):
    """n % 5 == 1 -> error, n % 5 == 2 -> invalid, else ok."""

    name = "picky"

    async def run(self, record, ctx):
        record["touched"] = True  # must not leak into failed rows
        if record["n"] % 5 == 1:
            raise RuntimeError(f"boom {record['n']}")
        if record["n"] % 5 == 2:
            raise Invalid("reply was not JSON")
        return record


class Flaky(Stage):
    """Fails the first time it sees each odd record, succeeds after."""

    name = "flaky"

    def __init__(self, config=None):
        super().__init__(config)
        self.seen: set[str] = set()

    async def run(self, record, ctx):
        if record["n"] % 2 and record["id"] not in self.seen:
            self.seen.add(record["id"])
            raise ConnectionError("server said 503")
        return record


def ctx() -> Context:
    return Context()


def test_all_statuses_none_dropped(tmp_path):
    out = tmp_path / "res.jsonl"
    s = run(recs(20), [Double(), Picky()], ctx(), out=out, progress=False, concurrency=3)
    rows = list(read_results(out))
    assert [r["id"] for r in rows] == [f"r{i}" for i in range(20)]  # compacted into input order
    by = {r["id"]: r for r in rows}
    assert (s.total, s.ok, s.error, s.invalid, s.skipped) == (20, 12, 4, 4, 0)
    assert by["r1"]["status"] == "error" and by["r1"]["reason"] == "RuntimeError: boom 1"
    assert by["r1"]["stage"] == "picky"
    assert "doubled" not in by["r1"] and "touched" not in by["r1"]  # the input record, not a half-run one
    assert by["r2"]["status"] == "invalid" and by["r2"]["reason"] == "reply was not JSON"
    assert by["r0"] == {"id": "r0", "n": 0, "meta": {"k": 0}, "doubled": 0, "touched": True,
                        "status": "ok", "reason": "", "attempts": 1, "stage": ""}
    assert all(r["attempts"] == 1 for r in rows)
    assert s.output_counts == {"ok": 12, "error": 4, "invalid": 4}


def test_resume_reruns_failures_and_counts_attempts(tmp_path):
    out = tmp_path / "res.jsonl"
    stage = Flaky()
    s1 = run(recs(10), [stage], ctx(), out=out, progress=False)
    assert (s1.ok, s1.error) == (5, 5)
    s2 = run(recs(10), [stage], ctx(), out=out, progress=False)
    assert (s2.ok, s2.error, s2.skipped, s2.total) == (5, 0, 5, 10)
    rows = {r["id"]: r for r in read_results(out)}
    assert len(out.read_text().splitlines()) == 10  # compacted: one line per id
    assert all(r["status"] == "ok" for r in rows.values())
    assert [rows[f"r{i}"]["attempts"] for i in range(10)] == [1, 2] * 5
    # A third run skips everything and keeps attempts.
    s3 = run(recs(10), [stage], ctx(), out=out, progress=False)
    assert (s3.skipped, s3.ok) == (10, 0)
    assert [r["attempts"] for r in read_results(out)] == [1, 2] * 5


def test_resume_false_moves_output_aside(tmp_path):
    out = tmp_path / "res.jsonl"
    run(recs(3), [Double()], ctx(), out=out, progress=False)
    s = run(recs(3), [Double()], ctx(), out=out, progress=False, resume=False)
    assert s.skipped == 0 and s.ok == 3
    assert s.previous_output is not None and s.previous_output.exists()
    assert len(lines(s.previous_output)) == 3
    assert json.loads(s.manifest.read_text())["previous_output"] == str(s.previous_output)


def test_resume_keeps_ids_not_in_this_input(tmp_path):
    out = tmp_path / "res.jsonl"
    run(recs(6), [Double()], ctx(), out=out, progress=False)
    s = run(recs(6), [Double()], ctx(), out=out, progress=False, limit=2)
    assert (s.total, s.skipped) == (2, 2)
    assert [r["id"] for r in read_results(out)] == [f"r{i}" for i in range(6)]


def test_limit_takes_first_n(tmp_path):
    out = tmp_path / "res.jsonl"
    s = run(iter(recs(50)), [Double()], ctx(), out=out, progress=False, limit=7)
    assert s.total == 7
    assert [r["id"] for r in read_results(out)] == [f"r{i}" for i in range(7)]


class Gauge(Stage):
    name = "gauge"

    def __init__(self):
        super().__init__()
        self.now = 0
        self.peak = 0

    async def run(self, record, ctx):
        self.now += 1
        self.peak = max(self.peak, self.now)
        await asyncio.sleep(0.002)
        self.now -= 1
        return record


def test_concurrency_bound(tmp_path):
    g = Gauge()
    s = run(recs(60), [g], ctx(), out=tmp_path / "o.jsonl", progress=False, concurrency=4)
    assert s.ok == 60
    assert g.peak == 4  # reached, never exceeded


def test_streaming_pulls_lazily(tmp_path):
    out = tmp_path / "o.jsonl"
    concurrency, k = 3, 6  # the brief allows ~2x concurrency ahead
    pulled = 0

    def finished() -> int:
        return len(out.read_text().splitlines()) if out.exists() else 0

    def gen():
        nonlocal pulled
        for i in range(100):
            assert pulled - finished() <= k, f"input pulled {pulled} while only {finished()} finished"
            pulled += 1
            yield {"id": f"g{i}", "n": i}

    class Slow(Stage):
        async def run(self, record, ctx):
            await asyncio.sleep(0.001)
            return record

    s = run(gen(), [Slow()], ctx(), out=out, progress=False, concurrency=concurrency, fsync_every=1000)
    assert s.ok == 100 and pulled == 100


def test_async_iterable_input(tmp_path):
    async def agen():
        for i in range(12):
            await asyncio.sleep(0)
            yield {"id": f"a{i}", "n": i}

    s = run(agen(), [Double()], ctx(), out=tmp_path / "o.jsonl", progress=False, concurrency=4)
    assert s.ok == 12
    assert [r["doubled"] for r in read_results(tmp_path / "o.jsonl")] == [2 * i for i in range(12)]


class Billed(Stage):
    name = "billed"
    version = "3"

    class Cfg(StageConfig):
        temperature: float = 0.0
        api_key: str = "sk-stage-secret"

    config_model = Cfg

    def prompt_versions(self):
        return {"verify": "verify-v1: Is the answer supported?"}

    async def run(self, record, ctx):
        ctx.add_usage(Usage(prompt_tokens=10, completion_tokens=2, cost=0.001, calls=1))
        return record


class FakeClient:
    api_key = "sk-never-in-manifest"

    def __init__(self, model):
        self.provenance = Provenance(backend="openai", model=model, base_url="http://user:pw@localhost:8000/v1")


def test_manifest_contents_and_redaction(tmp_path):
    out = tmp_path / "audit.jsonl"
    c = Context(roles={"judge": FakeClient("qwen3"), "verifier": [FakeClient("a"), FakeClient("b")]})
    cfg = {"model": "qwen3", "api_key": "sk-123", "max_tokens": 512,
           "nested": {"HF_TOKEN": "hf_x", "list": [{"password": "p", "ok": 1}], "Secret": ["a"]},
           "endpoint": "http://h/v1?api_key=zzz&x=1"}
    s = run(recs(5), [Billed()], c, out=out, progress=False, run_config=cfg, description="smoke")
    assert s.manifest == tmp_path / "audit.manifest.json"
    m = json.loads(s.manifest.read_text())
    text = s.manifest.read_text()
    for secret in ("sk-123", "hf_x", '"p"', "sk-stage-secret", "sk-never-in-manifest", "zzz", "user:pw"):
        assert secret not in text
    rc = m["run_config"]
    assert rc["model"] == "qwen3" and rc["max_tokens"] == 512  # counts are not secrets
    assert rc["api_key"] == rc["nested"]["HF_TOKEN"] == rc["nested"]["Secret"] == "***redacted***"
    assert rc["nested"]["list"] == [{"password": "***redacted***", "ok": 1}]
    assert "x=1" in rc["endpoint"]
    assert m["state"] == "finished" and m["description"] == "smoke"
    assert m["counts"] == {"ok": 5, "error": 0, "invalid": 0, "needs_model": 0} and m["skipped"] == 0 and m["total"] == 5
    assert m["usage"]["calls"] == 5 and m["usage"]["prompt_tokens"] == 50
    assert math.isclose(m["usage"]["cost"], 0.005)
    assert s.usage.completion_tokens == 10 and c.usage.calls == 5
    st = m["stages"][0]
    assert st["name"] == "billed" and st["version"] == "3"
    assert st["config"]["api_key"] == "***redacted***" and st["config"]["temperature"] == 0.0
    import hashlib
    assert st["prompt_hashes"] == {"verify": hashlib.sha256(b"verify-v1: Is the answer supported?").hexdigest()}
    assert m["roles"]["judge"] == {"backend": "openai", "model": "qwen3", "base_url": "http://localhost:8000/v1"}
    assert [r["model"] for r in m["roles"]["verifier"]] == ["a", "b"]
    for k in ("kbvqa_version", "git", "python", "platform", "started", "finished", "wall_seconds"):
        assert m[k] is not None, k
    assert set(m["git"]) == {"commit", "dirty", "source"}


def test_manifest_names_kbvqa_s_commit_wherever_it_runs(tmp_path, monkeypatch):
    """The commit is kbvqa's own, not that of the folder the command ran in (here: a user's
    project repository with its own history)."""
    import subprocess

    from kbvqa.runner.manifest import git_info

    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run(["git", "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-q", "--allow-empty", "-m", "x"],
                   cwd=project, check=True)
    theirs = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True).stdout.strip()
    monkeypatch.chdir(project)
    s = run(recs(2), [Double()], ctx(), out=project / "o.jsonl", progress=False)
    got = json.loads(s.manifest.read_text())["git"]
    assert got["commit"] != theirs and got == git_info()
    assert got["source"] in ("checkout", "pip-vcs", "release")
    # a package folder inside a repository that does not track it (a venv in the user's project)
    fake_pkg = project / ".venv" / "kbvqa"
    fake_pkg.mkdir(parents=True)
    (fake_pkg / "__init__.py").write_text("")
    assert git_info(fake_pkg)["source"] != "checkout" and git_info(fake_pkg)["commit"] != theirs


def test_redact_is_a_copy():
    cfg = {"token": "t", "inner": {"api_key": "k"}}
    red = redact(cfg)
    assert cfg == {"token": "t", "inner": {"api_key": "k"}}
    assert red == {"token": "***redacted***", "inner": {"api_key": "***redacted***"}}
    # a keyword list is a setting (a curation filter's), not a credential; a key with "keyword" in it still is
    assert redact({"block_keywords": ["spam"], "keyword_api_key": "k"}) == {
        "block_keywords": ["spam"], "keyword_api_key": "***redacted***"}


def test_truncated_last_line_tolerated_and_repaired(tmp_path):
    out = tmp_path / "o.jsonl"
    run(recs(4), [Double()], ctx(), out=out, progress=False)
    with open(out, "a") as f:
        f.write('{"id": "r9", "n": 9, "sta')  # a crash mid-write
    assert [r["id"] for r in read_results(out)] == ["r0", "r1", "r2", "r3"]
    s = run(recs(6), [Double()], ctx(), out=out, progress=False)
    assert (s.skipped, s.ok) == (4, 2)
    rows = lines(out)  # every line is valid JSON again
    assert [r["id"] for r in rows] == [f"r{i}" for i in range(6)]


def test_corrupt_middle_line_raises(tmp_path):
    out = tmp_path / "o.jsonl"
    out.write_text('{"id":"a","status":"ok"}\nnot json\n{"id":"b","status":"ok"}\n')
    with pytest.raises(ValueError, match=r"o.jsonl:2: corrupt"):
        list(read_results(out))


def test_complete_but_unterminated_line_is_kept(tmp_path):
    out = tmp_path / "o.jsonl"
    out.write_text('{"id":"a","status":"ok","attempts":1}\n{"id":"b","status":"ok","attempts":1}')
    JsonlJournal.repair_tail(out)
    assert out.read_text().endswith("}\n")
    assert [r["id"] for r in read_results(out)] == ["a", "b"]


def test_compaction_last_line_wins(tmp_path):
    out = tmp_path / "o.jsonl"
    out.write_text("\n".join(json.dumps(x) for x in [
        {"id": "b", "status": "error", "attempts": 1}, {"id": "a", "status": "ok", "attempts": 1},
        {"id": "b", "status": "ok", "attempts": 2}, {"id": "c", "status": "ok", "attempts": 1}]) + "\n")
    assert compact_journal(out, ["a", "b"]) == 3
    assert [(r["id"], r["attempts"]) for r in lines(out)] == [("a", 1), ("b", 2), ("c", 1)]
    assert not list(tmp_path.glob("*.tmp"))


class Nested(Stage):
    async def run(self, record, ctx):
        record["answers"] = [{"text": "x", "value": 1.5}, "y"]
        record["score"] = 0.25 * record["n"]
        record["flag"] = record["n"] % 2 == 0
        record["maybe"] = None if record["n"] % 3 else "three"
        if record["n"] == 4:
            record["only_here"] = {"deep": [1, {"z": None}]}
        if record["n"] == 1:
            raise ValueError("bad")
        return record


def test_parquet_equals_jsonl(tmp_path):
    out = tmp_path / "o.jsonl"
    s = run(recs(9), [Nested()], ctx(), out=out, progress=False, fmt="parquet")
    assert s.parquet == tmp_path / "o.parquet" and s.parquet.exists()
    jrows = list(read_results(out))
    prows = list(read_parquet(s.parquet))
    assert prows == jrows
    assert any("only_here" in r for r in prows) and not all("only_here" in r for r in prows)
    import pyarrow.parquet as pq
    schema = pq.read_schema(s.parquet)
    assert str(schema.field("n").type) == "int64" and str(schema.field("status").type) == "string"
    assert str(schema.field("attempts").type) == "int64"
    assert json.loads(schema.metadata[b"kbvqa.json_columns"]) == ["meta", "answers", "score", "flag", "maybe",
                                                                   "only_here"]


def test_duplicate_id_in_list_raises_before_running(tmp_path):
    out = tmp_path / "o.jsonl"
    data = recs(5) + [{"id": "r2", "n": 99}]
    with pytest.raises(InputError, match=r"duplicate id 'r2' at input records #2 and #5"):
        run(data, [Double()], ctx(), out=out, progress=False)
    assert not out.exists()


def test_duplicate_id_in_generator_stops_and_keeps_finished(tmp_path):
    out = tmp_path / "o.jsonl"

    def gen():
        yield from recs(5)
        yield {"id": "r0", "n": 0}
        yield from recs(3, prefix="late")

    with pytest.raises(InputError, match="duplicate id 'r0'"):
        run(gen(), [Double()], ctx(), out=out, progress=False, concurrency=2)
    assert sorted(r["id"] for r in read_results(out)) == [f"r{i}" for i in range(5)]
    m = json.loads((tmp_path / "o.manifest.json").read_text())
    assert m["state"] == "failed" and "duplicate id 'r0'" in m["error"] and m["counts"]["ok"] == 5


@pytest.mark.parametrize("bad, msg", [({"n": 1}, "#2 \\(0-based\\) has no 'id'"),
                                      ({"id": 7}, "#2 \\(0-based\\) has id 7"),
                                      ("nope", "#2 \\(0-based\\) is a str")])
def test_bad_record_names_position(tmp_path, bad, msg):
    with pytest.raises(InputError, match=msg):
        run(recs(2) + [bad], [Double()], ctx(), out=tmp_path / "o.jsonl", progress=False)


def test_stage_contract_violations_are_errors(tmp_path):
    class ReturnsNone(Stage):
        name = "none"

        async def run(self, record, ctx):
            return None

    class Renames(Stage):
        name = "renames"

        async def run(self, record, ctx):
            return {**record, "id": "other"}

    class NotJson(Stage):
        name = "notjson"

        async def run(self, record, ctx):
            return {**record, "x": float("nan")}

    for stage, reason in [(ReturnsNone(), "TypeError: stage 'none' returned NoneType"),
                          (Renames(), "ValueError: stage 'renames' changed the record id"),
                          (NotJson(), "ValueError: record is not JSON-serialisable")]:
        out = tmp_path / f"{stage.name}.jsonl"
        s = run(recs(2), [stage], ctx(), out=out, progress=False)
        rows = list(read_results(out))
        assert s.error == 2 and all(r["reason"].startswith(reason) for r in rows), rows
        assert [r["id"] for r in rows] == ["r0", "r1"]


def test_runner_fields_in_input_are_replaced(tmp_path):
    seen = []

    class Peek(Stage):
        async def run(self, record, ctx):
            seen.append(set(record))
            return record

    data = [{"id": "x", "n": 1, "status": "error", "reason": "old", "attempts": 7, "stage": "s"}]
    run(data, [Peek()], ctx(), out=tmp_path / "o.jsonl", progress=False)
    assert seen == [{"id", "n"}]
    assert list(read_results(tmp_path / "o.jsonl"))[0]["attempts"] == 1


def test_cancellation_writes_no_errors_and_resumes(tmp_path):
    out = tmp_path / "o.jsonl"

    class Slow(Stage):
        async def run(self, record, ctx):
            await asyncio.sleep(0.01)
            return record

    async def main():
        task = asyncio.create_task(run_stages(recs(200), [Slow()], ctx(), out=out, progress=False,
                                              concurrency=4, fsync_every=1))
        while not out.exists() or len(out.read_text().splitlines()) < 10:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    done = lines(out)
    assert 10 <= len(done) < 200 and all(r["status"] == "ok" for r in done)
    m = json.loads((tmp_path / "o.manifest.json").read_text())
    assert m["state"] == "interrupted" and m["counts"]["ok"] == len(done)
    s = run(recs(200), [Slow()], ctx(), out=out, progress=False, concurrency=16)
    assert s.skipped == len(done) and s.ok == 200 - len(done)
    rows = list(read_results(out))
    assert len(rows) == 200 and all(r["attempts"] == 1 for r in rows)


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="unknown executor 'nope'") as err:
        run(recs(1), [Double()], ctx(), out=tmp_path / "o.jsonl", executor="nope")
    assert "local" in str(err.value) and "ray" in str(err.value)  # names the executors there are
    assert not (tmp_path / "o.jsonl").exists()
    with pytest.raises(ValueError, match="fmt"):
        run(recs(1), [Double()], ctx(), out=tmp_path / "o.jsonl", fmt="csv")
    with pytest.raises(ValueError, match="journal"):
        run(recs(1), [Double()], ctx(), out=tmp_path / "o.parquet", fmt="parquet")


def test_ray_executor_without_ray_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the kbvqa[ray] extra were not installed
    with pytest.raises(ImportError, match=r"pip install 'kbvqa\[ray\]'"):
        run(recs(1), [Double()], ctx(), out=tmp_path / "o.jsonl", executor="ray")
    assert not (tmp_path / "o.jsonl").exists()  # refused before any file is touched


def test_context_add_usage():
    c = Context()
    c.add_usage({"prompt_tokens": 3, "calls": 1})
    c.add_usage(Usage(cost=0.5, calls=1))
    c.add_usage(None)
    assert (c.usage.prompt_tokens, c.usage.calls, c.usage.cost) == (3, 2, 0.5)
    with pytest.raises(Exception):
        c.add_usage({"tokens": 1})  # a typo fails loudly


def test_journal_scan_ignores_blank_lines(tmp_path):
    p = tmp_path / "o.jsonl"
    p.write_text('{"id":"a","status":"error","attempts":2}\n\n')
    index, order = scan_journal(p)
    assert order == ["a"] and index["a"].attempts == 2 and index["a"].status == "error"


def test_resume_over_corrupt_journal_raises_and_leaves_it(tmp_path):
    out = tmp_path / "o.jsonl"
    text = '{"id":"r0","status":"ok","attempts":1}\ngarbage\n{"id":"r1","status":"ok","attempts":1}\n'
    out.write_text(text)
    with pytest.raises(ValueError, match="corrupt JSONL line"):
        run(recs(3), [Double()], ctx(), out=out, progress=False)
    assert out.read_text() == text


def test_corrupt_journal_line_is_refused_with_the_way_out_and_repair_moves_it_aside(tmp_path):
    from kbvqa.runner.sinks import JournalError, repair_journal

    out = tmp_path / "o.jsonl"
    run(recs(4), [Double()], ctx(), out=out, progress=False)
    lines = out.read_text().splitlines()
    out.write_text("\n".join([lines[0], "{not json", lines[1], '["no id"]', *lines[2:]]) + "\n")
    with pytest.raises(JournalError) as err:
        run(recs(6), [Double()], ctx(), out=out, progress=False)
    assert err.value.line == 2 and "kbvqa journal repair" in str(err.value)
    moved, aside = repair_journal(out)
    assert moved == 2 and aside is not None and aside.read_text().count("\n") == 2
    s = run(recs(6), [Double()], ctx(), out=out, progress=False)
    assert s.skipped == 4 and s.ok == 2 and len(list(read_results(out))) == 6
    assert repair_journal(out) == (0, None)


def test_journal_commands(tmp_path):
    from typer.testing import CliRunner

    from kbvqa.cli.app import app

    out = tmp_path / "o.jsonl"
    run(recs(5), [Picky()], ctx(), out=out, progress=False)
    res = CliRunner().invoke(app, ["journal", "status", str(out), "--json"])
    obj = json.loads(res.stdout)
    assert res.exit_code == 0 and obj["records"] == 5 and obj["state"] == "finished" and sum(obj["by_status"].values()) == 5
    out.write_text(out.read_text().replace('"id":"r1"', 'oops', 1))
    res = CliRunner().invoke(app, ["journal", "status", str(out)])
    assert res.exit_code == 2 and "kbvqa journal repair" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(app, ["journal", "repair", str(out)])
    assert res.exit_code == 0 and "moved 1 corrupt line" in res.output


class Stalls(Stage):
    """Record n == 1 hangs (a model call that never returns); the rest pass."""

    name = "stalls"

    async def run(self, record, ctx):
        if record["n"] == 1:
            await asyncio.sleep(30)
        return record


def test_record_deadline_ends_a_stuck_record_and_the_rest_run(tmp_path):
    from kbvqa.runner.stage import set_record_deadline

    out = tmp_path / "o.jsonl"
    summary = run(recs(4), [Double(), Stalls()], Context(), out=out, progress=False, record_deadline=0.3)
    assert summary.ok == 3 and summary.error == 1
    stuck = next(x for x in lines(out) if x["id"] == "r1")
    assert stuck["status"] == "error" and stuck["reason"].startswith("RecordDeadline:")
    assert "0.3 s" in stuck["reason"] and stuck["stage"] == "stalls" and "doubled" not in stuck
    assert json.loads(summary.manifest.read_text())["runner"]["record_deadline"] == 0.3
    # the process default (`kbvqa --record-deadline`) applies to a job that names none
    set_record_deadline(0.2)
    try:
        s2 = run(recs(2, "q"), [Stalls()], Context(), out=tmp_path / "p.jsonl", progress=False)
    finally:
        set_record_deadline(None)
    assert s2.ok == 1 and s2.error == 1
    with pytest.raises(ValueError):
        set_record_deadline(0)


def test_manifest_records_each_role_s_limits(tmp_path):
    """Concurrency, timeouts, retries and the cache a run was made under are in its manifest."""
    from kbvqa.models.cache import ResponseCache
    from kbvqa.models.client import OpenAIChatClient

    client = OpenAIChatClient("http://127.0.0.1:9/v1", "m", concurrency=5, timeout=12, connect_timeout=3,
                              deadline=40, max_retries=2, cache=ResponseCache(tmp_path / "c.sqlite"))
    s = run(recs(1), [Double()], Context(roles={"judge": client}), out=tmp_path / "o.jsonl", progress=False)
    judge = json.loads(s.manifest.read_text())["roles"]["judge"]
    assert judge["limits"] == {"concurrency": 5, "read_timeout": 12.0, "connect_timeout": 3.0, "deadline": 40.0,
                               "max_retries": 2, "structured_output": "auto", "temperature": 0.0} | \
        ({"max_tokens": client.max_tokens} if client.max_tokens is not None else {})
    assert judge["cache"] == str(tmp_path / "c.sqlite") and judge["model"] == "m"
    timing = json.loads(s.manifest.read_text())["timing"]  # wall time and summed model time, named apart
    assert timing["wall_seconds"] >= 0 and timing["model_seconds_summed"] == 0 and timing["mean_seconds_per_call"] is None
