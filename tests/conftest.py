"""Shared pytest setup: property tests run derandomized under CI so a red build is reproducible;
locally they explore fresh examples every run."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")
