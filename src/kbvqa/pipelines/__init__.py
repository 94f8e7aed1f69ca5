"""Pipelines compose stages into jobs (audit, augment, answer, evaluate)."""
