"""Augmentation statistics: what was sampled, what was left out and why.

Why: the paper reports type distribution, side balance and exclusions; a run that silently drops rows
or skews towards one side cannot be compared. These numbers come from the manifest alone.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


def compute(entries: Iterable[dict[str, Any]], *, variants: Iterable[str] = (),
            dropped_types: dict[str, int] | None = None, pool_sizes: dict[str, int] | None = None,
            extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Summarise manifest entries (every input sample, with its status)."""
    entries = list(entries)
    aug = [e for e in entries if e.get("status") in ("ok", "partial", "error")]
    status = Counter(e.get("status") for e in entries)
    exclusions = Counter(e.get("reason") for e in entries if e.get("status") == "excluded")
    types = Counter(e.get("anchor_entity_type") for e in aug)
    per_variant: dict[str, dict[str, int]] = {}
    cols = {"intra": "method1_image_status", "inter": "method2_image_status",
            "blank": "blank_image_status", "double": "double_image_status"}
    for v in variants:
        per_variant[v] = dict(Counter(e.get(cols[v]) for e in aug))
    quotas = {t: {"selected": types.get(t, 0), "available": n} for t, n in sorted((pool_sizes or {}).items())}
    return {
        "inputs": len(entries),
        "augmented_anchors": len(aug),
        "status": dict(status),
        "exclusions": dict(exclusions),
        "dropped_types": dict(sorted((dropped_types or {}).items())),
        "type_distribution": dict(types.most_common()),
        "per_type_quota": quotas,
        "side_balance": dict(Counter(e.get("target_side") for e in aug)),
        "type_source": dict(Counter(e.get("type_source") for e in aug)),
        "question_type": dict(Counter(e.get("anchor_question_type") for e in aug)),
        "intra_basis": dict(Counter(e.get("method1_similarity_basis") for e in aug)),
        "inter_basis": dict(Counter(e.get("method2_similarity_basis") for e in aug)),
        "inter_distractor_types": dict(Counter(e.get("method2_pair_type") for e in aug if e.get("method2_pair_type")).most_common()),
        "made_explicit": sum(1 for e in aug if e.get("anchor_question_made_explicit")),
        "appended_cue": sum(1 for e in aug if " for the " in (e.get("method1_query") or "")
                            and " for the " not in (e.get("anchor_question") or "")),
        "variant_status": per_variant,
        **(extra or {}),
    }


def write(stats: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(stats, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _counter_table(title: str, counts: dict[str, Any]) -> Table:
    t = Table(title=title)
    t.add_column("key")
    t.add_column("n", justify="right")
    for k, v in counts.items():
        t.add_row(str(k), str(v))
    return t


def show(stats: dict[str, Any], console: Console | None = None) -> None:
    """Print the main tables with rich."""
    console = console or Console()
    console.print(f"inputs {stats['inputs']}, augmented anchors {stats['augmented_anchors']}, "
                  f"status {stats['status']}")
    q = Table(title="anchors per type")
    for c in ("type", "selected", "available"):
        q.add_column(c, justify="right" if c != "type" else "left")
    for t, v in stats["per_type_quota"].items():
        q.add_row(t, str(v["selected"]), str(v["available"]))
    console.print(q)
    console.print(_counter_table("side balance", stats["side_balance"]))
    if stats["exclusions"]:
        console.print(_counter_table("exclusions", stats["exclusions"]))
    if stats["dropped_types"]:
        console.print(_counter_table("dropped types (entities)", stats["dropped_types"]))
    vs = Table(title="variant status")
    vs.add_column("variant")
    keys = sorted({k for d in stats["variant_status"].values() for k in d if k})
    for k in keys:
        vs.add_column(k, justify="right")
    for v, d in stats["variant_status"].items():
        vs.add_row(v, *[str(d.get(k, 0)) for k in keys])
    console.print(vs)
