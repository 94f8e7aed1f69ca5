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
# takes ~13 s on 2 cores; five modules used to make their own). Copies, so a module may edit its own.
import shutil  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def _demo_source(tmp_path_factory):
    from kbvqa.demo.run import run_demo

    out = tmp_path_factory.mktemp("demo-source") / "demo"
    res = run_demo(out)
    return out, res


@pytest.fixture(scope="session")
def demo_copy(_demo_source):
    """`demo_copy(dest)`: a copy of the session's demo outputs at `dest` (returns (dest, RunResult))."""
    source, res = _demo_source

    def make(dest):
        shutil.copytree(source, dest, symlinks=True)
        return dest, res

    return make
