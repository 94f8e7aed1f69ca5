"""Augmentation statistics: what was sampled, what was left out and why.

Why: the paper reports type distribution, side balance and exclusions; a run that silently drops rows
or skews towards one side cannot be compared. These numbers come from the manifest alone. (The
command line shows them as tables: kbvqa.report.summaries.augment_stats_tables.)
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any



def compute(entries: Iterable[dict[str, Any]], *, variants: Iterable[str] = (),
            dropped_types: dict[str, int] | None = None, pool_sizes: dict[str, int] | None = None,
            extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Summarise manifest entries (every input sample, with its status)."""
    entries = list(entries)
    aug = [e for e in entries if e.get("status") in ("ok", "partial", "error")]
    status = Counter(e.get("status") for e in entries)
    exclusions = Counter(e.get("reason") for e in entries if e.get("status") == "excluded")
    # why composites failed (an anchor ended error or partial), so a total failure can say why
    failures = Counter(str(e.get("reason") or "no reason recorded") for e in entries
                       if e.get("status") in ("error", "partial"))
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
        "failure_reasons": dict(failures.most_common(20)),
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
