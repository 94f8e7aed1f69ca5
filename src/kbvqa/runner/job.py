"""A Job: a stage list and the context it runs in — what every pipeline builds and the CLI runs.

Pipelines return Jobs, so a new per-record job (the agent, a judge, a rubric, a curation funnel)
gets resume, a manifest, progress and either executor by running through `Job.run`, never through
a loop of its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kbvqa.runner.lock import OutputLock
from kbvqa.runner.run import RunSummary, run
from kbvqa.runner.stage import Context, Stage


@dataclass
class Job:
    stages: list[Stage]
    ctx: Context = field(default_factory=Context)
    description: str = ""
    run_config: dict[str, Any] = field(default_factory=dict)
    #: resources that depend on where the output goes (an artifact folder, a cassette beside it)
    output_resources: Callable[[Path], dict[str, Any]] | None = None

    @property
    def stage_names(self) -> list[str]:
        return [s.name for s in self.stages]

    def run(self, records: Iterable[dict] | AsyncIterable[dict], *, out: Path, close: bool = True,
            run_config: dict[str, Any] | None = None, **options: Any) -> RunSummary:
        """Run every record (see `kbvqa.runner.run_stages` for the options). The context's HTTP
        pools are closed at the end unless `close=False` (a caller that runs the job again)."""
        options.setdefault("description", self.description)
        cfg = {"stages": self.stage_names, **self.run_config, **(run_config or {})}
        with OutputLock(Path(out)):  # before the output's side files (a cassette) are touched
            if self.output_resources is not None:
                self.ctx.resources.update(self.output_resources(Path(out).absolute()))  # side files: absolute
            return run(records, self.stages, self.ctx, out=Path(out), close=close, run_config=cfg, lock=False,
                       **options)
