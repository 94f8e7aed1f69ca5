"""What every model-driven funnel shares (curation, kbvqa.pipelines.curate; reference construction,
kbvqa.pipelines.reference): the stage settings' strictness, a stage's counters and where a record
keeps them, the stop reasons, and the per-stage rows read back from the journals. Both families import
this module and never each other; the one model call every stage makes is kbvqa.stages.ask (`ask`,
`gather_all`, `needs_model`), one layer down so that stages outside the pipelines share it.

A funnel is a chain of runner jobs, one journal per stage. Every item a stage is given ends in one
of: kept (`ok`), dropped (`ok` with the stage's own reason: curation's `drop`), or stopped — no model
for the stage's role (`needs_model`), a failed call (`error`), an unusable reply (`invalid`); a stopped
item is retried on `--resume`. The rows count each of those for the ids the stage was given in this
run, so a journal that still holds lines from an earlier, larger run does not inflate them.

A new model-driven stage needs one config (a `FunnelStageConfig` subclass naming its role), one
prompt, one reply model and one `ask`; its counters go through `counts` and `stage_record`
(docs/architecture.md, "Model-driven funnels").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kbvqa.runner import read_results
from kbvqa.runner.stage import StageConfig

#: how many characters of a stop's reason a funnel row keeps as its example
EXAMPLE_CHARS = 300


class FunnelStageConfig(StageConfig):
    """A funnel stage's `[<pipeline>.<stage>]` table: a misspelt key is an error, never ignored
    (StageConfig's extra="forbid")."""


def counts(**values: int | Mapping[str, int]) -> dict[str, Any]:
    """A stage's counters for the funnel: plain ints, or {reason: n} maps with zero entries removed."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        out[k] = {r: n for r, n in Counter(v).items() if n} if isinstance(v, Mapping) else int(v)
    return out


def stage_record(record: dict[str, Any], stage: str, payload: dict[str, Any], tally: dict[str, Any]) -> dict[str, Any]:
    """The record with this stage's output under its name and its counters under `funnel.<stage>`."""
    funnel = {**(record.get("funnel") or {}), stage: tally}
    return {**record, stage: payload, "funnel": funnel}


def stop_reason(line: Mapping[str, Any]) -> str:
    """Why a journal line that is not `ok` stopped: `needs_model`, `invalid` or `error`."""
    status = line.get("status")
    if status in ("invalid", "needs_model"):
        return str(status)
    return "needs_model" if str(line.get("reason", "")).startswith("NeedsModel") else "error"


def count_stop(line: Mapping[str, Any], stopped: Counter[str], examples: dict[str, str]) -> str:
    """Count a stopped line under its reason, keeping the first one's id and reason as the example."""
    why = stop_reason(line)
    stopped[why] += 1
    examples.setdefault(why, f"{line.get('id')}: {line.get('reason', '')}"[:EXAMPLE_CHARS])
    return why


def add_counts(total: dict[str, Any], part: Mapping[str, Any]) -> dict[str, Any]:
    """Sum nested counters in place: ints add, dicts recurse."""
    for k, v in part.items():
        if isinstance(v, Mapping):
            add_counts(total.setdefault(k, {}), v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            total[k] = total.get(k, 0) + v
    return total


def stage_lines(journal: Path, ids: Iterable[str]) -> list[dict[str, Any]]:
    """The journal's lines for `ids` (this run's items), in journal order."""
    wanted = set(ids)
    if not wanted or not journal.is_file():
        return []
    return [line for line in read_results(journal) if line["id"] in wanted]


def stage_summary(key: str, lines: list[dict[str, Any]], label: str | None = None) -> dict[str, Any]:
    """One stage's funnel row: in, ok, stopped by reason, and the stage's counters (`funnel.<key>` of
    each record) summed over the items it kept; `label` names the row (default `key`)."""
    ok = [ln for ln in lines if ln.get("status") == "ok"]
    stopped: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for ln in lines:
        if ln.get("status") != "ok":
            count_stop(ln, stopped, examples)
    units: dict[str, Any] = {}
    for ln in ok:
        add_counts(units, (ln.get("funnel") or {}).get(key) or {})
    return {"stage": label or key, "in": len(lines), "ok": len(ok), "stopped": dict(stopped), "units": units,
            **({"examples": examples} if examples else {})}
