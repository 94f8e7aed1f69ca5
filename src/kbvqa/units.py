"""The unit rule every table kbvqa shows follows (docs/reference.md, "Units"), in the one place every layer reads it.

Accuracies, recalls and rates are percentages shown with two decimals, and the column (or the row's
figure, in a long table) names the unit with PCT. The exceptions, stated once here: MRR and agreement
coefficients (kappa, alpha) stay in [0, 1]; IVR-12 scores stay on their 1-5 scale; counts, words and
hops are what they are. Every float is shown with two decimals whatever its unit. A base module (like
registry and progress): the score pipelines build their tables with it, and report.tables checks it.
"""

from __future__ import annotations

from typing import Any

PCT = "(%)"


def percent(v: Any, *, fraction: bool) -> Any:
    """`v` as a percentage rounded to two decimals (`fraction`: it is in [0, 1]); None/non-numbers as they are."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return v
    return round(100.0 * v if fraction else float(v), 2)
