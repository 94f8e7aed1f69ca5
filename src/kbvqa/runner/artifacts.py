"""Side files of a run (full agent observations, the images an answer embeds, ...): what a stage may
write, without opening files.

A stage gets the store as the ctx resource `artifacts` and calls `put(record_id, name, text)` or
`put_file(record_id, name, source)`; the store writes `<run folder>/<record id>/<name>` atomically and
returns the path relative to the output's folder, which the record keeps — so a run's outputs are
self-contained and their folder is the image root that scoring them needs. Ids and names are
sanitised, so a record id can never point a write outside the folder. The store writes nothing itself
inside a record: the file goes to the record's outbox (kbvqa.data.outbox) and the driver writes it,
atomically, before the record's line; so a Ray actor on another node sends its artifacts home.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from kbvqa.data.outbox import write_file
from kbvqa.runner.lock import side_path

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _safe(part: str) -> str:
    s = _UNSAFE.sub("_", part).strip("._") or "_"
    if len(s) > 80 or s != part:  # a changed or long name gets a hash so two ids never collide
        s = f"{s[:60]}-{hashlib.sha256(part.encode('utf-8')).hexdigest()[:10]}"
    return s


class ArtifactStore:
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()

    def _target(self, record_id: str, name: str) -> Path:
        return self.root / _safe(record_id) / _safe(name)

    def put(self, record_id: str, name: str, text: str) -> str:
        path = self._target(record_id, name)
        write_file(path, text.encode("utf-8"))
        return str(path.relative_to(self.root.parent))

    def put_file(self, record_id: str, name: str, source: str | Path) -> str:
        """A copy of `source` (a hard link where the file system allows, when the driver writes it),
        named `name` made safe with its image suffix kept (viewers and servers go by it)."""
        stem, dot, ext = name.rpartition(".")
        if dot and stem and re.fullmatch(r"[A-Za-z0-9]{1,8}", ext):
            name = f"{_safe(stem)}.{ext.lower()}"
        path = self._target(record_id, name)
        write_file(path, source=Path(source).resolve())
        return str(path.relative_to(self.root.parent))

    @classmethod
    def beside(cls, out: str | Path) -> "ArtifactStore":
        """The store for a run whose output is `out`: `<out>.artifacts/` (runner.lock.side_path)."""
        return cls(side_path(Path(out), ".artifacts"))
