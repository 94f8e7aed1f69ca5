"""Ray on a real cluster: two nodes (Ray's own `ray.cluster_utils.Cluster`, started from another
working directory), the commands run as a user types them — relative paths, the response cache on —
and every result identical to the local executor's: the agent (artifacts, cassette), `score judge`
and `reference build`. Every side file comes back to the driver's --out, nothing appears in any
actor's private folder, the Ray-recorded cassette replays exactly on the local executor, and a
multi-stage command starts Ray once."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the Ray executor tests need Ray (pip install 'kbvqa[ray]')")

from typer.testing import CliRunner  # noqa: E402

from kbvqa.cli.app import app  # noqa: E402
from kbvqa.data.formats import read_samples  # noqa: E402
from kbvqa.runner import read_results  # noqa: E402
from kbvqa.runner.executor import set_default_executor  # noqa: E402
from kbvqa.runner.ray import LOCAL_ENV, shutdown_session  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply, ok  # noqa: E402
from test_agent import _stable, answer, call, tag  # noqa: E402

pytestmark = pytest.mark.timeout(400)
runner = CliRunner()

SCRIPTS = {
    "good": [call("image_search", goal="who is this"), call("search", query=["Eileen Collins birthplace"]),
             call("text_to_image_search", query="Eileen Collins"),
             answer("She was born in Elmira.\n" + tag("Eileen Collins", 1))],
    "tool error": [call("visit", url=["https://example.org/nowhere"], goal="birthplace"),
                   answer("I could not read the page; Elmira, I believe.")],
    "long observation": [call("search", query=["Eileen Collins"]), answer("Elmira.")],
}


@pytest.fixture(scope="module")
def two_nodes(ray_nodes):
    """The session's two-node cluster (conftest.ray_nodes), connected for this module; yields the
    folder the nodes were started from."""
    cluster, started_in = ray_nodes
    saved = {k: os.environ.get(k) for k in LOCAL_ENV}
    os.environ.update(LOCAL_ENV)
    here = os.getcwd()
    os.chdir(started_in)  # the driver connects from there too, as it did when the module started the nodes
    try:
        ray.init(address=cluster.address, log_to_driver=False)
    finally:
        os.chdir(here)
    try:
        yield started_in
    finally:
        shutdown_session()
        ray.shutdown()
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


@pytest.fixture
def local_default():
    yield
    set_default_executor("local")  # `--executor ray` sets the process default: restore it for other tests


def _question(req: dict) -> str:
    m = next(m for m in req["messages"] if m["role"] == "user")
    return m["content"] if isinstance(m["content"], str) else m["content"][0]["text"]


def handler(req: dict) -> Reply:
    first = req["messages"][0]["content"]
    if isinstance(first, str) and "Answer to grade:" in first:  # the judge
        graded = first.split("Answer to grade:")[1].split("\n")[0]
        label = "correct" if "Elmira" in graded else "incorrect"
        return ok(json.dumps({"label": label, "rationale": "scripted"}), prompt_tokens=30, completion_tokens=5)
    script = SCRIPTS[_question(req)]
    turn = sum(1 for m in req["messages"] if m["role"] == "assistant")
    return Reply(content=script[min(turn, len(script) - 1)], prompt_tokens=50, completion_tokens=10)


def _cli(*args: str, code: int = 0) -> str:
    res = runner.invoke(app, list(args))
    assert res.exit_code == code, res.output
    return res.stdout


def _files(folder: Path) -> dict[str, bytes]:
    """Every file a run left, by relative path (SQLite files and their WAL side files compared apart)."""
    skip = (".lock", "-wal", "-shm", ".sqlite", ".manifest.json")
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.endswith(skip)}


def _rows(path: Path, table: str) -> dict[str, str]:
    with sqlite3.connect(path) as db:
        return dict(db.execute(f"SELECT key, value FROM {table}").fetchall())


def _clean(line: dict) -> dict:
    """A journal line without what differs between any two runs (timings, usage, cache flags) and with
    the one input that differs by design (the reference build reads ray/ or local/agent.jsonl) renamed."""
    return _stable(json.loads(json.dumps(line).replace('"ray/agent.jsonl"', '"local/agent.jsonl"')))


def _executor(manifest: Path) -> dict:
    return json.loads(manifest.read_text())["runner"]["executor"]


def test_agent_judge_and_reference_build_on_two_nodes_match_local(bench_copy, two_nodes, tmp_path, monkeypatch,
                                                                  local_default):
    b = bench_copy(tmp_path / "bench")
    base = [s.dump() for s in read_samples(b.samples, "kbvqa")][0]
    (b.root / "episodes.jsonl").write_text("".join(json.dumps({**base, "id": f"e{i}", "question": q}) + "\n"
                                                   for i, q in enumerate(SCRIPTS)), encoding="utf-8")
    # [executor.ray] with a secret in the runtime environment: one actor per node, the secret never recorded
    (tmp_path / "kbvqa.toml").write_text('[executor.ray]\nactors = 2\nnum_cpus_per_actor = 1\n'
                                         '[executor.ray.init.runtime_env.env_vars]\nTOKEN = "sk-never-recorded"\n',
                                         encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # relative paths, as a user types them
    _cli("index", "images", "--kb", "bench/kb.sqlite", "--images", "bench", "--out", "idx/images")
    common = ["--kb", "bench/kb.sqlite", "--kb-images", "bench"]
    agent = ["answer", "--pipeline", "agent", "--samples", "bench/episodes.jsonl", "--index", "idx/images",
             "--today", "2026-12-01", *common]
    with FakeLLMServer(handler=handler) as srv:
        llm = ["--llm", srv.base_url, "--model", "fake-agent"]
        for name, flags in (("local", []), ("ray", ["--executor", "ray", "--ray-config", "kbvqa.toml"])):
            monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / name / "cache.sqlite"))  # the response cache is on
            _cli(*flags, *agent, *llm, "--out", f"{name}/agent.jsonl")
            _cli(*flags, "score", "judge", "-p", f"{name}/agent.jsonl", "-r", "bench/episodes.jsonl",
                 "--judge-base-url", srv.base_url, "--judge-model", "fake-judge", "--json")
            _cli(*flags, "reference", "build", "--samples", "bench/episodes.jsonl", "--trajectories",
                 f"{name}/agent.jsonl", "--out", f"{name}/refs", *common, code=3)  # offline: stops at the VLM
    local, remote = tmp_path / "local", tmp_path / "ray"

    # the same records, whichever executor ran them
    for journal in ("agent.jsonl", "agent.judge.jsonl", "refs/urls.jsonl", "refs/harvest.jsonl",
                    "refs/candidates.jsonl"):
        assert [_clean(r) for r in read_results(remote / journal)] == \
            [_clean(r) for r in read_results(local / journal)], journal
    lines = {r["id"]: r for r in read_results(remote / "agent.jsonl")}
    assert lines["e0"]["images"][0].startswith("agent.artifacts/")  # an embedded KB image: an artifact
    assert any(r["status"] == "ok" for r in read_results(remote / "refs/harvest.jsonl"))

    # every side file came home to the driver's --out: artifacts, harvested images, cassettes, caches
    files = _files(remote)
    assert files.keys() == _files(local).keys()
    assert [k for k in files if "agent.artifacts/" in k] and [k for k in files if k.startswith("refs/images/")]
    for key in files:
        if "artifacts/" in key or "images/" in key:
            assert files[key] == _files(local)[key], key
    for db, table in (("agent.cassette/tools.sqlite", "tool_results"), ("agent.cassette/models.sqlite",
                                                                        "chat_responses")):
        got, want = _rows(remote / db, table), _rows(local / db, table)
        assert got.keys() == want.keys() and got, db
    assert _rows(remote / "agent.cassette/tools.sqlite", "tool_results") == \
        _rows(local / "agent.cassette/tools.sqlite", "tool_results")
    assert _rows(remote / "cache.sqlite", "chat_responses").keys() == _rows(local / "cache.sqlite",
                                                                           "chat_responses").keys()

    # two nodes ran it; nothing appeared in an actor's folder or where the cluster was started
    ex = _executor(remote / "agent.manifest.json")
    assert ex["nodes"] == 2 and ex["actor_nodes"] == 2 and ex["actors"] == 2 and ex["worker_files"] == []
    assert str((tmp_path / "bench/kb.sqlite").resolve()) in ex["node_inputs"]
    assert str((tmp_path / "bench").resolve()) in ex["node_inputs"]  # --kb-images: needed on every node
    assert "sk-never-recorded" not in (remote / "agent.manifest.json").read_text() and "TOKEN" in json.dumps(ex)
    assert not any(two_nodes.iterdir())
    for stage in ("urls", "harvest"):  # one Ray session and one actor pool for the whole command
        ex = _executor(remote / "refs" / f"{stage}.manifest.json")
        assert ex["session"] == "reused" and ex["startup_seconds"] == 0 and ex["worker_files"] == []
    written = json.loads((remote / "agent.manifest.json").read_text())["runner"]["side_writes"]
    assert written == json.loads((local / "agent.manifest.json").read_text())["runner"]["side_writes"]
    assert written["files"] > 0 and written["entries"] > 0  # the driver wrote them, not the actors

    # the cassette Ray recorded replays exactly on the local executor, with no server
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "replay-cache.sqlite"))
    _cli(*agent, "--tools", "replay", "--cassette", "ray/agent.cassette", "--out", "replay/agent.jsonl")
    replayed = {r["id"]: r for r in read_results(tmp_path / "replay/agent.jsonl")}
    assert {k: _stable(v) for k, v in replayed.items()} == {k: _stable(v) for k, v in lines.items()}


def test_relative_paths_from_another_working_directory(bench_copy, two_nodes, tmp_path, monkeypatch,
                                                       local_default):
    """The driver runs from a folder of its own with ../ paths; the nodes were started elsewhere and
    the actors work in private folders: only absolute paths can reach them."""
    b = bench_copy(tmp_path / "bench")
    base = [s.dump() for s in read_samples(b.samples, "kbvqa")][0]
    (b.root / "one.jsonl").write_text(json.dumps({**base, "id": "e0", "question": "good"}) + "\n", encoding="utf-8")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    _cli("index", "images", "--kb", "../bench/kb.sqlite", "--images", "../bench", "--out", "idx")
    with FakeLLMServer(handler=handler) as srv:
        out = json.loads(_cli("--executor", "ray", "--ray-actors", "2", "answer", "--pipeline", "agent", "--samples",
                              "../bench/one.jsonl", "--kb", "../bench/kb.sqlite", "--index", "idx", "--kb-images",
                              "../bench", "--today", "2026-12-01", "--llm", srv.base_url, "--model", "fake-agent",
                              "--out", "out/agent.jsonl", "--json").strip().splitlines()[-1])
    assert out["ok"] == 1
    (line,) = read_results(tmp_path / "work/out/agent.jsonl")
    # the image search found the KB's pictures (a relative --kb-images read on a worker would find none)
    assert [t.get("status") for t in line["trajectory"][:3]] == ["ok", "ok", "ok"]
    assert line["meta"]["provenance"]["valid"] == 1
    assert (tmp_path / "work/out" / line["images"][0]).is_file()
    assert _executor(tmp_path / "work/out/agent.manifest.json")["worker_files"] == []
