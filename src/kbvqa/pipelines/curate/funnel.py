"""The curation funnel: for every stage, posts in, kept, dropped by reason and stopped by reason,
read back from the stage journals (restricted to this run's posts) — and the drop and stop lines.

Every post read ends in exactly one place: an item, a line of `dropped.jsonl` (the stage, the reason
and the detail), or a line of `stopped.jsonl` (a stage that could not decide: `needs_model`, `error`
or `invalid`; `--resume` tries those again). `accounted` in funnel.json checks that sum.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbvqa.data.jsonl import read_jsonl
from kbvqa.pipelines.funnel import stop_reason
from kbvqa.runner.stage import RUNNER_FIELDS


@dataclass
class StageTally:
    stage: str
    step: int
    disabled: bool = False
    n_in: int = 0
    kept: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    stopped: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "step": self.step, "in": self.n_in, "kept": self.kept,
                "dropped": dict(self.dropped.most_common()), "stopped": dict(self.stopped.most_common()),
                **({"disabled": True} if self.disabled else {}), **({"examples": self.examples} if self.examples else {})}


def clean(line: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in line.items() if k not in RUNNER_FIELDS}


def read_stage(journal: Path, wanted: set[str], tally: StageTally, drops: list[dict[str, Any]] | None,
               stops: list[dict[str, Any]]) -> set[str]:
    """Count one stage's journal lines for `wanted` ids; append drop and stop lines; return the kept ids."""
    kept: set[str] = set()
    if not journal.is_file():
        return kept
    for _, line in read_jsonl(journal):
        rid = line.get("id")
        if rid not in wanted:
            continue
        tally.n_in += 1
        if line.get("status") != "ok":
            why = stop_reason(line)
            tally.stopped[why] += 1
            tally.examples.setdefault(why, f"{rid}: {line.get('reason', '')}"[:300])
            stops.append({"id": rid, "stage": tally.stage, "step": tally.step, "status": line.get("status"),
                          "stop": why, "reason": line.get("reason", "")})
            continue
        drop = line.get("drop")
        if drop:
            tally.dropped[drop["reason"]] += 1
            if drops is not None:
                drops.append({"id": rid, "row": line.get("row"), "step": tally.step, **drop})
            continue
        if (line.get("curate") or {}).get(tally.stage, {}).get("disabled"):
            tally.disabled = True
        tally.kept += 1
        kept.add(rid)
    return kept


def passing(journal: Path, ids: set[str]) -> Iterator[dict[str, Any]]:
    """The records of `ids` as the stage wrote them (input order), runner fields removed: the next
    stage's input, streamed from disk."""
    if not ids or not journal.is_file():
        return
    for _, line in read_jsonl(journal):
        if line.get("id") in ids:
            yield clean(line)


def table_rows(intake: dict[str, Any], stages: Iterable[dict[str, Any]], output: dict[str, Any]) -> list[dict[str, Any]]:
    """The funnel as flat rows (step, stage, in, kept, dropped by reason, stopped by reason) for a table."""
    def fmt(c: dict[str, int]) -> str:
        return "; ".join(f"{k} {v}" for k, v in c.items() if v) or "-"

    rows = [{"step": 0, "stage": "intake", "in": intake["read"], "kept": intake["posts"],
             "dropped": fmt({"bad_row": intake["skipped_rows"], "duplicate_id": intake["duplicate_id"]}),
             "stopped": "-"}]
    for s in stages:
        rows.append({"step": s["step"], "stage": s["stage"] + (" (disabled)" if s.get("disabled") else ""),
                     "in": s["in"], "kept": s["kept"], "dropped": fmt(s["dropped"]), "stopped": fmt(s["stopped"])})
    rows.append({"step": 4, "stage": "items", "in": rows[-1]["kept"], "kept": output["items"],
                 "dropped": fmt(output.get("drops") or {}), "stopped": "-"})
    return rows
