"""The Ray executor (placeholder until it is built): registered so `--executor ray` is a known name."""

from __future__ import annotations

from typing import Any

from kbvqa.runner.executor import EXECUTORS


@EXECUTORS.register("ray", help="Ray actors, locally or on a cluster (the kbvqa[ray] extra)")
class RayExecutor:
    name = "ray"

    def __init__(self, **options: Any):
        raise NotImplementedError("the Ray executor is not built yet")
