"""Augmentation stages: entity-type tagging (`augment-entity-type`), run by the augment pipeline."""
