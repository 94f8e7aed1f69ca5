"""Shared pytest setup: property tests run derandomized under CI so a red build is reproducible;
locally they explore fresh examples every run."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")

# The response cache is on by default in the user cache folder: tests never touch it (each test that
# exercises the cache names its own file); a test that counts server requests gets every request.
os.environ["KBVQA_CACHE"] = "off"
