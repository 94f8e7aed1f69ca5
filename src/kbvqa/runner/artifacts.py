"""Side files of a run (full agent observations, ...): what a stage may write, without opening files.

A stage gets the store as the ctx resource `artifacts` and calls `put(record_id, name, text)`; the
store writes `<run folder>/<record id>/<name>` atomically and returns the path relative to the run
folder, which the record keeps. Ids and names are sanitised, so a record id can never point a write
outside the folder. It pickles as its folder (a Ray actor writes to the same place).
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _safe(part: str) -> str:
    s = _UNSAFE.sub("_", part).strip("._") or "_"
    if len(s) > 80 or s != part:  # a changed or long name gets a hash so two ids never collide
        s = f"{s[:60]}-{hashlib.sha256(part.encode('utf-8')).hexdigest()[:10]}"
    return s


class ArtifactStore:
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()

    def put(self, record_id: str, name: str, text: str) -> str:
        folder = self.root / _safe(record_id)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / _safe(name)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        return str(path.relative_to(self.root.parent))

    @classmethod
    def beside(cls, out: str | Path) -> "ArtifactStore":
        """The store for a run whose output is `out`: `<out stem>.artifacts/`."""
        out = Path(out)
        return cls(out.with_name(out.stem + ".artifacts"))
