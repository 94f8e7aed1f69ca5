"""Augmentation (seed 000 §5): multi-entity composites with minimally rewritten questions.

Each anchor gets an intra-category distractor (same type, different entity; the question gains a
spatial cue), an inter-category distractor (different type and family; the question is unchanged),
and the layout controls Blank (an empty panel) and Double (the anchor twice). Entry points:
`augment_file` / `augment_samples` (run.py) with their settings in `AugmentOptions` (options.py),
`anchor_id` (kbvqa.data.variants) for scoring, and the study `augmentation_recall` (study.py). Type
tagging is the `augment-entity-type` stage (types.py).

The names are imported on first use: the command line reads `kbvqa.pipelines.augment.options` for its
--help, which must not load Pillow and the compositing code with it.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"ARA_COLUMNS": "manifest", "VARIANTS": "manifest", "anchor_id": "manifest",
          "ALL_VARIANTS": "options", "AugmentOptions": "options",
          "augment_file": "run", "augment_samples": "run", "TypeVocabulary": "types"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
