"""The construction funnel: for each stage, items in, items kept, items stopped by reason, and the
stage's own counters (URLs, images, drops by reason) summed over the items it kept.

Read from the stage journals, restricted to the ids each stage was given in this run, so a journal
that still holds lines from an earlier, larger run does not inflate the counts. An item stopped
because no model was configured is counted as `needs_model`, apart from real errors.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kbvqa.runner import read_results


def stop_reason(line: Mapping[str, Any]) -> str:
    status = line.get("status")
    if status in ("invalid", "needs_model"):
        return str(status)
    return "needs_model" if str(line.get("reason", "")).startswith("NeedsModel") else "error"


def add_counts(total: dict[str, Any], part: Mapping[str, Any]) -> dict[str, Any]:
    """Sum nested counters in place: ints add, dicts recurse."""
    for k, v in part.items():
        if isinstance(v, Mapping):
            add_counts(total.setdefault(k, {}), v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            total[k] = total.get(k, 0) + v
    return total


def stage_lines(journal: Path, ids: Iterable[str]) -> list[dict[str, Any]]:
    wanted = set(ids)
    if not wanted or not journal.is_file():
        return []
    return [line for line in read_results(journal) if line["id"] in wanted]


def stage_summary(key: str, lines: list[dict[str, Any]], label: str | None = None) -> dict[str, Any]:
    """One stage's funnel row; `key` is where its records keep their counters, `label` its name."""
    ok = [ln for ln in lines if ln.get("status") == "ok"]
    stopped: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for ln in lines:
        if ln.get("status") != "ok":
            why = stop_reason(ln)
            stopped[why] += 1
            examples.setdefault(why, f"{ln['id']}: {ln.get('reason', '')}"[:300])
    units: dict[str, Any] = {}
    for ln in ok:
        add_counts(units, (ln.get("funnel") or {}).get(key) or {})
    return {"stage": label or key, "in": len(lines), "ok": len(ok), "stopped": dict(stopped), "units": units,
            **({"examples": examples} if examples else {})}
