"""Shared pytest setup: property tests run derandomized under CI so a red build is reproducible;
locally they explore fresh examples every run."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")

# The response cache is on by default in the user cache folder: tests never touch it (each test that
# exercises the cache names its own file); a test that counts server requests gets every request.
os.environ["KBVQA_CACHE"] = "off"


# One offline `kbvqa demo` run per session, copied for each module that needs its outputs (a demo run
# takes ~13 s on 2 cores; six modules used to make their own). Copies, so a module may edit its own;
# test_demo reads the source itself, to check the relative --out run `make demo` does.
import dataclasses  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def demo_source(tmp_path_factory):
    """(folder, DemoResult) of the session's demo, run as `make demo` runs it: from its own folder with a
    relative --out (`results/demo`), so the result's paths are relative to `folder`. Read it, never write
    into it: every module's copy comes from it."""
    from kbvqa.demo.run import run_demo

    base = tmp_path_factory.mktemp("demo-source")
    old = os.getcwd()
    os.chdir(base)
    try:
        res = run_demo(Path("results/demo"))
    finally:
        os.chdir(old)
    return base, res


@pytest.fixture(scope="session")
def demo_copy(demo_source):
    """`demo_copy(dest)`: a copy of the session's demo outputs at `dest` (returns (dest, DemoResult), the
    result's paths made absolute: the source's)."""
    base, res = demo_source
    res = dataclasses.replace(res, out=base / res.out, report=base / res.report, manifest=base / res.manifest)

    def make(dest):
        shutil.copytree(res.out, dest, symlinks=True)
        return dest, res

    return make


# One `build_bench` per session (~1.7 s on 2 cores: it decodes and re-encodes every photograph; 25
# modules used to build their own). A copy per caller, so a module may write into its bench folder.
@pytest.fixture(scope="session")
def bench_source(tmp_path_factory):
    """The session's demo bench (kbvqa.demo.bench.build_bench). Read it, never write into it."""
    from kbvqa.demo.bench import build_bench

    return build_bench(tmp_path_factory.mktemp("bench-source") / "bench")


@pytest.fixture(scope="session")
def bench_copy(bench_source):
    """`bench_copy(dest)`: the session's bench copied to `dest`, as `build_bench(dest)` would return it
    (every path in the DemoBench under `dest`)."""
    src = bench_source.root

    def make(dest):
        dest = Path(dest)
        shutil.copytree(src, dest, dirs_exist_ok=True)  # a mktemp folder may already exist
        moved = {url: dest / p.relative_to(src) for url, p in bench_source.kb_images.items()}
        return dataclasses.replace(bench_source, root=dest, samples=dest / bench_source.samples.relative_to(src),
                                   kb=dest / bench_source.kb.relative_to(src), kb_images=moved,
                                   flaws=dict(bench_source.flaws))

    return make


# One Ray cluster per session (starting one costs ~5 s on 2 cores; test_ray_cluster and test_runner_ray
# used to start their own). Each module connects to it and disconnects when done, so the modules run
# between them see no Ray session in this process.
@pytest.fixture(scope="session")
def ray_nodes(tmp_path_factory):
    """(Cluster, the folder it was started from): a head and a worker node of one CPU each, started
    from a folder of their own (not the driver's)."""
    ray = pytest.importorskip("ray", reason="the Ray executor tests need Ray (pip install 'kbvqa[ray]')")
    from ray.cluster_utils import Cluster

    from kbvqa.runner.ray import LOCAL_ENV

    mb = 2**20
    started_in = tmp_path_factory.mktemp("cluster-cwd")
    with pytest.MonkeyPatch.context() as mp:  # environment and folder as the nodes start, restored after
        for k, v in LOCAL_ENV.items():
            mp.setenv(k, v)  # read by the node processes as they start
        mp.chdir(started_in)
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 80 * mb,
                                                                 "include_dashboard": False})
        cluster.add_node(num_cpus=1, object_store_memory=80 * mb)
        cluster.wait_for_nodes()
    try:
        yield cluster, started_in
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
