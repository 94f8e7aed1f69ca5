"""Augmentation (seed 000 §5): multi-entity composites with minimally rewritten questions.

Each anchor gets an intra-category distractor (same type, different entity; the question gains a
spatial cue), an inter-category distractor (different type and family; the question is unchanged),
and the layout controls Blank (an empty panel) and Double (the anchor twice). Entry points:
`augment_file` / `augment_samples` (run.py), `anchor_id` (kbvqa.data.variants) for scoring, and the
study `augmentation_recall` (study.py). Type tagging is the `augment-entity-type` stage (types.py).
"""

from kbvqa.pipelines.augment.manifest import ARA_COLUMNS, VARIANTS, anchor_id
from kbvqa.pipelines.augment.run import ALL_VARIANTS, AugmentConfig, augment_file, augment_samples
from kbvqa.pipelines.augment.types import TypeVocabulary

__all__ = ["ALL_VARIANTS", "ARA_COLUMNS", "AugmentConfig", "TypeVocabulary", "VARIANTS", "anchor_id",
           "augment_file", "augment_samples"]
