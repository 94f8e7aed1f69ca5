"""ablation prompts (seed 001)."""

from __future__ import annotations
