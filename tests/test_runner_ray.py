"""The Ray executor: same output and manifest as the local executor, driver-crash resume, usage totals.

One local cluster (2 CPUs) serves the module. Stages defined here are pickled by value
(`register_pickle_by_value`), since the actors cannot import a test module."""

from __future__ import annotations

import json
import os
import sys
import threading

import pytest

ray = pytest.importorskip("ray")

from fake_llm_server import FakeLLMServer, ok  # noqa: E402
from test_runner_crash import sigkill_then_resume  # noqa: E402
from kbvqa.models.client import OpenAIChatClient  # noqa: E402
from kbvqa.runner import read_results, run  # noqa: E402
from kbvqa.runner.ray import LOCAL_ENV, RayExecutor, split_concurrency  # noqa: E402
from kbvqa.runner.stage import Context, Invalid, Stage  # noqa: E402

pytestmark = pytest.mark.timeout(120)

N = 40
#: Manifest fields that differ between any two runs (times, paths) or name the executor.
VOLATILE = ("started", "finished", "wall_seconds", "output", "timing")  # timing: wall clock, never equal


@pytest.fixture(scope="module")
def cluster(ray_nodes):
    """The session's cluster (conftest.ray_nodes: two nodes, 2 CPUs in all), connected for this module;
    yields its address for driver subprocesses."""
    saved = {k: os.environ.get(k) for k in LOCAL_ENV}
    os.environ.update(LOCAL_ENV)
    info = ray.init(address=ray_nodes[0].address, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        yield info.address_info["address"]
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        ray.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def server():
    with FakeLLMServer(default=ok("Paris", prompt_tokens=10, completion_tokens=5)) as srv:
        yield srv


class Ask(Stage):
    """One model call per record: n % 5 == 1 fails before the call (error), n % 5 == 2 after it (invalid)."""

    name = "ask"

    async def run(self, record, ctx):
        record["touched"] = True  # must not leak into failed rows
        if record["n"] % 5 == 1:
            raise RuntimeError(f"boom {record['n']}")
        res = await ctx.role("answerer").chat([{"role": "user", "content": f"question {record['n']}"}])
        ctx.add_usage(res.usage)
        if record["n"] % 5 == 2:
            raise Invalid("reply was not JSON")
        record["answer"] = res.text
        return record


def _stable(manifest: dict) -> dict:
    m = {k: v for k, v in manifest.items() if k not in VOLATILE}
    m["runner"] = {k: v for k, v in m["runner"].items() if k != "executor"}
    m["usage"] = {k: v for k, v in m["usage"].items() if k != "seconds"}
    return m


def test_ray_matches_local_output_manifest_and_usage(cluster, server, tmp_path):
    ctx = Context(roles={"answerer": OpenAIChatClient(server.base_url, "fake", concurrency=4)})
    records = [{"id": f"r{i:02d}", "n": i, "meta": {"k": i % 3}} for i in range(N)]
    summaries, manifests, outputs = {}, {}, {}
    for name in ("local", "ray"):
        out = tmp_path / name / "res.jsonl"
        opts = {"executor_options": {"actors": 2}} if name == "ray" else {}
        before = ctx.usage.model_copy()
        summaries[name] = run(records, [Ask()], ctx, out=out, progress=False, concurrency=4, executor=name, **opts)
        if name == "ray":
            assert ctx.usage == before  # the stages ran in the actors: the totals below came back from them
        manifests[name] = json.loads(summaries[name].manifest.read_text())
        outputs[name] = out.read_text().splitlines()

    assert outputs["ray"] == outputs["local"]  # compacted, in input order, byte for byte
    rows = {r["id"]: r for r in read_results(tmp_path / "ray" / "res.jsonl")}
    assert rows["r01"]["status"] == "error" and rows["r01"]["reason"] == "RuntimeError: boom 1"
    assert rows["r02"]["status"] == "invalid" and "touched" not in rows["r02"]
    assert rows["r00"]["answer"] == "Paris" and rows["r00"]["attempts"] == 1
    assert _stable(manifests["ray"]) == _stable(manifests["local"])
    assert manifests["ray"]["counts"] == {"ok": 24, "error": 8, "invalid": 8, "needs_model": 0}
    executor = manifests["ray"]["runner"]["executor"]
    assert executor["name"] == "ray" and executor["actors"] == 2 and executor["ray"] == ray.__version__

    calls = N - N // 5  # every record but the n % 5 == 1 ones called the model once
    usage = manifests["ray"]["usage"]
    assert (usage["calls"], usage["prompt_tokens"], usage["completion_tokens"]) == (calls, 10 * calls, 5 * calls)
    assert usage["seconds"] > 0 and summaries["ray"].usage.calls == calls

    # A rerun with nothing left to do starts nothing: nothing is shipped (this Context would not pickle).
    done = [r for r in records if rows[r["id"]]["status"] == "ok"]
    again = run(done, [Ask()], Context(resources={"lock": threading.Lock()}), out=tmp_path / "ray" / "res.jsonl",
                progress=False, executor="ray")
    assert (again.skipped, again.ok) == (len(done), 0)


def test_sigkill_driver_then_resume_on_ray(cluster, tmp_path):
    """The killed driver is attached to the running cluster (its actors die with it); the resume
    starts and stops a local cluster of its own."""
    attached = {**os.environ, "RAY_ADDRESS": cluster}
    own = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    sigkill_then_resume(tmp_path / "crash.jsonl", "ray", kill_env=attached, resume_env=own)


class DieOnce(Stage):
    """Kills its worker process the first time it sees record 3 (a lost node, an OOM kill)."""

    name = "die-once"

    def __init__(self, marker: str):
        super().__init__()
        self.marker = marker

    async def run(self, record, ctx):
        if record["n"] == 3 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        record["seen"] = True
        return record


def test_killed_actor_is_restarted_and_its_batch_retried(cluster, tmp_path):
    marker = tmp_path / "died"
    s = run([{"id": f"r{i}", "n": i} for i in range(12)], [DieOnce(str(marker))], Context(),
            out=tmp_path / "o.jsonl", progress=False, concurrency=4, executor="ray",
            executor_options={"actors": 2})
    assert marker.exists() and (s.ok, s.error) == (12, 0)
    assert all(r["seen"] and r["attempts"] == 1 for r in read_results(tmp_path / "o.jsonl"))


def test_unpicklable_context_fails_before_any_record(cluster, tmp_path):
    ctx = Context(resources={"lock": threading.Lock()})
    with pytest.raises(TypeError, match="must pickle"):
        run([{"id": "r0", "n": 0}], [Ask()], ctx, out=tmp_path / "o.jsonl", progress=False, executor="ray")
    manifest = json.loads((tmp_path / "o.manifest.json").read_text())
    assert manifest["state"] == "failed" and manifest["counts"] == {"ok": 0, "error": 0, "invalid": 0, "needs_model": 0}


def test_options_are_checked_and_split():
    assert split_concurrency(7, 3) == [3, 2, 2]
    assert split_concurrency(2, 5) == [1, 1]  # never an actor with nothing to do
    with pytest.raises(ValueError, match="actors"):
        RayExecutor(actors=0)
    with pytest.raises(ValueError, match="calls_per_actor"):
        RayExecutor(calls_per_actor=0)


class DieUntilHealed(Stage):
    """Kills its worker on record 3 every time until `healed` exists: more deaths than restarts."""

    name = "die-until-healed"

    def __init__(self, healed: str):
        super().__init__()
        self.healed = healed

    async def run(self, record, ctx):
        if record["n"] == 3 and not os.path.exists(self.healed):
            os._exit(1)
        record["seen"] = True
        return record


def test_actors_lost_beyond_restarts_fail_clearly_and_resume_finishes(cluster, tmp_path):
    from kbvqa.runner.executor import WorkersLost

    out, healed = tmp_path / "lost.jsonl", tmp_path / "healed"
    records = [{"id": f"r{i}", "n": i} for i in range(8)]
    opts = {"executor": "ray", "executor_options": {"actors": 1}, "concurrency": 2, "progress": False}
    with pytest.raises(WorkersLost, match="--resume") as exc:
        run(records, [DieUntilHealed(str(healed))], Context(), out=out, **opts)
    assert exc.value.exit_code == 5
    manifest = json.loads((tmp_path / "lost.manifest.json").read_text())
    assert manifest["state"] == "failed" and "WorkersLost" in manifest["error"]
    healed.touch()
    s = run(records, [DieUntilHealed(str(healed))], Context(), out=out, **opts)
    rows = list(read_results(out))
    assert s.ok + s.skipped == 8 and [r["id"] for r in rows] == [r["id"] for r in records]
    assert all(r["status"] == "ok" and r["seen"] for r in rows)


class Declares:
    """A resource naming a read-only input the nodes do not have."""

    def __init__(self, path: str):
        self.path = path

    def node_inputs(self):
        return {self.path: "a test input"}


def test_an_input_missing_on_a_node_stops_the_run_before_any_record(cluster, tmp_path):
    from kbvqa.runner.executor import NodeInputMissing

    gone = str(tmp_path / "not-on-this-node.sqlite")
    with pytest.raises(NodeInputMissing, match="not-on-this-node.sqlite") as exc:
        run([{"id": "r0", "n": 0}], [Ask()], Context(resources={"x": Declares(gone)}), out=tmp_path / "o.jsonl",
            progress=False, executor="ray", executor_options={"actors": 1})
    assert exc.value.exit_code == 2 and "same absolute path on every node" in str(exc.value)
    manifest = json.loads((tmp_path / "o.manifest.json").read_text())
    assert manifest["state"] == "failed" and manifest["counts"]["ok"] == 0
    assert manifest["runner"]["executor"]["node_inputs"] == {gone: "a test input"}
