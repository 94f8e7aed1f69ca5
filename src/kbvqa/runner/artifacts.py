"""Side files of a run (full agent observations, the images an answer embeds, ...): what a stage may
write, without opening files.

A stage gets the store as the ctx resource `artifacts` and calls `put(record_id, name, text)` or
`put_file(record_id, name, source)`; the store writes `<run folder>/<record id>/<name>` atomically and
returns the path relative to the output's folder, which the record keeps — so a run's outputs are
self-contained and their folder is the image root that scoring them needs. Ids and names are sanitised, so a record id can never point a write
outside the folder. It pickles as its folder (a Ray actor writes to the same place).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
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

    def _target(self, record_id: str, name: str) -> tuple[Path, Path]:
        folder = self.root / _safe(record_id)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / _safe(name)
        return path, path.with_name(f".{path.name}.{os.getpid()}.tmp")

    def put(self, record_id: str, name: str, text: str) -> str:
        path, tmp = self._target(record_id, name)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        return str(path.relative_to(self.root.parent))

    def put_file(self, record_id: str, name: str, source: str | Path) -> str:
        """A copy of `source` (a hard link where the file system allows), named `name` made safe
        with its image suffix kept (viewers and servers go by it)."""
        stem, dot, ext = name.rpartition(".")
        if dot and stem and re.fullmatch(r"[A-Za-z0-9]{1,8}", ext):
            name = f"{_safe(stem)}.{ext.lower()}"
        path, tmp = self._target(record_id, name)
        tmp.unlink(missing_ok=True)
        try:
            os.link(source, tmp)
        except OSError:  # another file system, or links not allowed
            shutil.copyfile(source, tmp)
        os.replace(tmp, path)
        return str(path.relative_to(self.root.parent))

    @classmethod
    def beside(cls, out: str | Path) -> "ArtifactStore":
        """The store for a run whose output is `out`: `<out stem>.artifacts/`."""
        out = Path(out)
        return cls(out.with_name(out.stem + ".artifacts"))
