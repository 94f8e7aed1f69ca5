"""ivr12 prompts (seed 001)."""

from __future__ import annotations
