"""Which image files the viewer may serve, and under which URL: the run folders and the configured
image roots only, through the project's resolver (`kbvqa.data.images.resolve_image`).

A record names an image as a relative path (`images/x.jpg`, relative to its samples file, the KB
or the output's folder), a bare dataset id, or an absolute path (augmented samples, agent tool
results). `ImageLinks.link` turns such a reference into `img/<root number>/<path inside that root>`
when the file lies inside an allowed root, or says why it will not be shown. `ImageLinks.serve`
checks a requested URL path again from scratch: absolute paths, `..` (also as `%2e%2e`, which the
resolver decodes) and symlinks that leave the root are refused, whatever a page linked to.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from kbvqa.data.images import ImageRefError, resolve_image

#: What is served, by the file's first bytes (not its name: kbvqa's content-addressed artifacts
#: carry suffixes like `.jpg-<hash>`, and a file named `.jpg` may hold anything).
_MAGIC = ((b"\xff\xd8\xff", "image/jpeg"), (b"\x89PNG\r\n\x1a\n", "image/png"), (b"GIF87a", "image/gif"),
          (b"GIF89a", "image/gif"), (b"BM", "image/bmp"))


def media_type(path: Path) -> str | None:
    """The image type a file's first bytes announce, or None for anything that is not an image."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return None
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return next((media for magic, media in _MAGIC if head.startswith(magic)), None)


class ImageRefused(ValueError):
    """A request for a file the viewer will not serve."""


@dataclass(frozen=True)
class ImageLink:
    """A record's image reference made servable (`url` is relative to the site root), or not
    (`url` None and `problem` says why: outside the allowed roots, not found, a remote URL)."""

    ref: str
    url: str | None
    problem: str | None = None
    path: Path | None = None


class ImageLinks:
    def __init__(self, roots: list[Path], bases: list[Path] = ()):
        self.roots = [Path(r).resolve() for r in roots]
        self.bases = [Path(b).resolve() for b in bases]
        self.link = lru_cache(maxsize=65536)(self._link)  # type: ignore[method-assign]

    def _root_of(self, path: Path) -> tuple[int, Path] | None:
        real = path.resolve()
        for i, root in enumerate(self.roots):
            if real.is_relative_to(root):
                return i, real.relative_to(root)
        return None

    def _link(self, ref: str, near: tuple[Path, ...] = ()) -> ImageLink:
        """`near`: folders tried first for a relative reference (the output's, its samples file's)."""
        text = str(ref or "").strip()
        if not text:
            return ImageLink(text, None, "empty image reference")
        if "://" in text or text.startswith("data:"):
            return ImageLink(text, None, "a remote or inline URL: the viewer serves local files only")
        found: Path | None = None
        problem = "image not found"
        bases = [None] if Path(text).is_absolute() else [*near, *self.bases, *self.roots]
        for base in dict.fromkeys(bases):
            try:
                found = resolve_image(text, base, allow_outside_root=False)
                break
            except ImageRefError as exc:
                problem = str(exc)
            except (FileNotFoundError, OSError):
                continue
        if found is None:
            return ImageLink(text, None, problem)
        where = self._root_of(found)
        if where is None:
            return ImageLink(text, None, "outside the run folders and image roots (pass --images ROOT to allow it)")
        if media_type(found) is None:
            return ImageLink(text, None, "not an image file (JPEG, PNG, GIF, WebP or BMP)")
        i, rel = where
        return ImageLink(text, f"img/{i}/{quote(rel.as_posix())}", None, found)

    def serve(self, root: int, relpath: str) -> tuple[Path, str]:
        """(file, media type) for `img/<root>/<relpath>`; ImageRefused for anything else."""
        if not 0 <= root < len(self.roots):
            raise ImageRefused(f"no image root {root}")
        if not relpath or relpath.startswith(("/", "\\")) or PurePosixPath(relpath).is_absolute() or ":" in relpath[:3]:
            raise ImageRefused("absolute paths are refused")
        if "\\" in relpath or "\x00" in relpath:
            raise ImageRefused("backslashes and NUL bytes are refused")
        base = self.roots[root]
        try:
            path = resolve_image(relpath, base, allow_outside_root=False)  # never widened by the user's opt-in
        except ImageRefError:
            raise ImageRefused("the path leaves the image root") from None
        except (FileNotFoundError, OSError):
            raise FileNotFoundError(relpath) from None
        if not path.resolve().is_relative_to(base):  # the resolver's own check, kept explicit here
            raise ImageRefused("outside the image root")
        media = media_type(path)
        if media is None:
            raise ImageRefused("not an image file")
        return path, media
