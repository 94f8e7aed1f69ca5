"""The driver owns writes (kbvqa.data.outbox), without Ray: a record's side writes are collected and
applied by the driver before its line; a record reads its own pending writes; a worker process never
creates a store's file; the Ray flags and [executor.ray] are checked; without Ray every command
says so in one line and exits 2."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data import outbox
from kbvqa.data.kvstore import KVStore
from kbvqa.runner import read_results, run
from kbvqa.runner.artifacts import ArtifactStore
from kbvqa.runner.config import load_ray_settings
from kbvqa.runner.executor import WorkersLost, set_default_executor
from kbvqa.runner.stage import Context, Stage, run_record

runner = CliRunner()


class Writes(Stage):
    """Writes an artifact and a KV entry, then reads both back inside the same record."""

    name = "writes"

    async def run(self, record, ctx):
        art: ArtifactStore = ctx.resource("artifacts")
        kv: KVStore = ctx.resource("kv")
        rel = art.put(record["id"], "note.txt", f"note {record['id']}")
        kv.put(record["id"], json.dumps(record["n"]), label="n")
        record["artifact"] = rel
        record["read_back"] = json.loads(kv.get(record["id"]))
        record["file_back"] = outbox.readable(art.root.parent / rel).read_text()
        return record


def test_side_writes_are_applied_by_the_driver_before_the_line(tmp_path):
    out = tmp_path / "run" / "o.jsonl"
    ctx = Context(resources={"artifacts": ArtifactStore.beside(out), "kv": KVStore(tmp_path / "run" / "kv.sqlite")})
    s = run([{"id": f"r{i}", "n": i} for i in range(3)], [Writes()], ctx, out=out, progress=False)
    assert s.ok == 3
    rows = {r["id"]: r for r in read_results(out)}
    assert rows["r1"]["read_back"] == 1 and rows["r1"]["file_back"] == "note r1"  # read its own pending writes
    assert (out.parent / rows["r2"]["artifact"]).read_text() == "note r2"
    assert dict(KVStore(tmp_path / "run" / "kv.sqlite").items()) == {"r0": "0", "r1": "1", "r2": "2"}
    assert json.loads((tmp_path / "run" / "o.manifest.json").read_text())["runner"]["side_writes"] == {
        "files": 3, "entries": 3}


def test_a_record_collects_its_writes_for_the_caller(tmp_path):
    ctx = Context(resources={"artifacts": ArtifactStore(tmp_path / "a"), "kv": KVStore(tmp_path / "kv.sqlite")})
    writes: list = []
    line, status = asyncio.run(run_record({"id": "x", "n": 7}, [Writes()], ctx, 1, writes=writes))
    assert status == "ok" and json.loads(line)["read_back"] == 7
    assert not (tmp_path / "a").exists() and len(KVStore(tmp_path / "kv.sqlite")) == 0  # nothing written yet
    assert {type(w).__name__ for w in writes} == {"FileWrite", "EntryWrite"}
    assert all(Path(getattr(w, "target", getattr(w, "path", ""))).is_absolute() for w in writes)


def test_a_worker_never_creates_a_store_and_never_writes_outside_a_record(tmp_path, monkeypatch):
    monkeypatch.setitem(outbox._WORKER, "on", True)
    missing = tmp_path / "cassette" / "tools.sqlite"
    store = KVStore(missing, table="tool_results")
    assert store.get("k") is None and len(store) == 0 and store.labels() == {}
    assert not missing.parent.exists()  # no folder, no empty database for a later replay to mistake
    with pytest.raises(RuntimeError, match="never writes"):
        store.put("k", "v")
    with pytest.raises(RuntimeError, match="never writes"):
        ArtifactStore(tmp_path / "art").put("r", "x.txt", "text")
    # a store the driver created is read (read-only) once it exists
    monkeypatch.setitem(outbox._WORKER, "on", False)
    KVStore(missing, table="tool_results").put("k", "v")
    monkeypatch.setitem(outbox._WORKER, "on", True)
    assert store.get("k") == "v" and KVStore(missing, table="stops").get("x") is None  # no such table: empty


def test_read_only_store_is_a_node_input_and_refuses_writes(tmp_path):
    ro = KVStore(tmp_path / "none.sqlite", read_only=True)
    assert ro.get("a") is None and not (tmp_path / "none.sqlite").exists()
    assert ro.node_inputs() == {str((tmp_path / "none.sqlite").resolve()): "read-only store [entries]"}
    with pytest.raises(PermissionError):
        ro.put("a", "b")


@pytest.fixture
def local_default():
    yield
    set_default_executor("local")  # a CLI call sets the process default: leave it as other tests expect


def test_ray_missing_is_one_line_and_exit_2_from_every_command(tmp_path, monkeypatch, local_default):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as if it were not installed
    for args in (["--executor", "ray", "audit", "run", "x.jsonl"], ["--executor", "ray", "score", "judge", "-p", "p"],
                 ["--executor", "ray", "answer", "--samples", "s"]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, res.output
        assert res.stderr.strip().count("\n") == 0 and "not installed" in res.stderr and "Traceback" not in res.output
    monkeypatch.setenv("KBVQA_EXECUTOR", "ray")  # the environment accepts the Ray flags too
    res = runner.invoke(app, ["--ray-actors", "2", "score", "judge", "-p", "p"])
    assert res.exit_code == 2 and "not installed" in res.stderr


def test_ray_flags_need_ray_and_are_checked(tmp_path, monkeypatch, local_default):
    monkeypatch.delenv("KBVQA_EXECUTOR", raising=False)
    res = runner.invoke(app, ["--ray-actors", "2", "score", "judge", "-p", "p"])
    assert res.exit_code == 2 and "need --executor ray" in res.output
    if not _has_ray():
        return
    res = runner.invoke(app, ["--executor", "ray", "--ray-init", "[1]", "score", "judge", "-p", "p"])
    assert res.exit_code == 2 and "JSON object" in res.output
    toml = tmp_path / "kbvqa.toml"
    toml.write_text("[executor.ray]\nactors = 0\n", encoding="utf-8")
    res = runner.invoke(app, ["--executor", "ray", "--ray-config", str(toml), "score", "judge", "-p", "p"])
    assert res.exit_code == 2 and "executor.ray.actors" in res.output


def _has_ray() -> bool:
    import importlib.util

    return importlib.util.find_spec("ray") is not None


def test_executor_table_and_init_options_without_secrets(tmp_path):
    toml = tmp_path / "kbvqa.toml"
    toml.write_text('[executor.ray]\nactors = 3\nnum_cpus_per_actor = 1\n'
                    '[executor.ray.init]\nnamespace = "kbvqa"\n'
                    '[executor.ray.init.runtime_env.env_vars]\nOPENAI_API_KEY = "sk-secret-123"\n', encoding="utf-8")
    opts = load_ray_settings(toml).executor_options()
    assert opts == {"actors": 3, "num_cpus_per_actor": 1.0, "init_kwargs": {
        "namespace": "kbvqa", "runtime_env": {"env_vars": {"OPENAI_API_KEY": "sk-secret-123"}}}}
    if not _has_ray():
        return
    from kbvqa.runner.ray import describe_init

    shown = json.dumps(describe_init(opts["init_kwargs"]))
    assert "sk-secret-123" not in shown and "OPENAI_API_KEY" in shown and "kbvqa" in shown


def test_an_executor_failure_exits_with_its_code():
    from kbvqa.cli.common import fail
    import typer

    with pytest.raises(typer.Exit) as exc:
        fail(WorkersLost("lost"))
    assert exc.value.exit_code == 5


def test_a_record_mode_jsonl_cassette_is_appended_by_the_driver(tmp_path, monkeypatch):
    """`replay_mode = "record"` cassettes (models.replay) append through the outbox: inside a record the line
    comes back to the driver; a worker never appends to its own node's file."""
    from kbvqa.data.schema import Provenance
    from kbvqa.models.replay import ReplayClient
    from kbvqa.models.result import ChatResult
    from kbvqa.runner.outbox import Writer

    class Inner:
        provenance = Provenance(backend="openai", model="m")

        async def chat(self, messages, **kw):
            return ChatResult(status="ok", text="Paris", provenance=self.provenance)

    cassette = tmp_path / "rec.jsonl"
    client = ReplayClient(cassette, mode="record", inner=Inner())

    async def one():
        with outbox.collecting() as box:
            res = await client.chat([{"role": "user", "content": "capital of France?"}])
            return res, list(box.writes)

    monkeypatch.setitem(outbox._WORKER, "on", True)  # as on a Ray actor
    res, writes = asyncio.run(one())
    assert res.text == "Paris" and not cassette.exists()  # nothing written on the worker's node
    assert [type(w).__name__ for w in writes] == ["LineAppend"] and writes[0].target == str(cassette)
    monkeypatch.setitem(outbox._WORKER, "on", False)
    Writer().apply(writes)  # the driver
    (line,) = cassette.read_text(encoding="utf-8").splitlines()
    assert json.loads(line)["response"]["text"] == "Paris"
    replayed = ReplayClient(cassette)
    again = asyncio.run(replayed.chat([{"role": "user", "content": "capital of France?"}]))
    assert again.status == "ok" and again.text == "Paris"
