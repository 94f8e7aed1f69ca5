"""Composite images: the anchor beside its distractor(s), plus the Blank and Double layout controls.

Why this shape: the authors' script decodes the anchor once per variant at full size and runs in
one process (24 composites/s, 13.5/s on 1024-px inputs). Here all variants of one anchor form one
task, so the anchor is decoded once; JPEGs are decoded in draft mode at the smallest DCT scale that
still covers the target height; and tasks run in a process pool. Every panel is EXIF-oriented, RGB,
and resized to the target height keeping its aspect ratio. Resizing was most of a composite's work,
so the default `resample="fast"` does it with OpenCV: bicubic when the panel grows (Pillow's LANCZOS
took ~15 ms per 512-px panel, OpenCV ~2 ms), and when it shrinks by up to 4x a low-pass with the
stretched Lanczos kernel followed by a bicubic read-out (~5-7 ms against ~27 ms for a 1024x700 photo).
Either way the pixels differ from Pillow's LANCZOS by ~0.2-0.7/255 on average. Beyond 4x, and with
`resample="lanczos"` both ways, it is Pillow's LANCZOS, as the authors' script.

Work per composite (issue 17): a panel is decoded and resized once per worker process, not once per
task: each worker keeps a byte-bounded LRU of the panels it made (keyed by path, size, mtime,
height and resample mode), and `run_tasks` hands each worker consecutive tasks, so an image that is
the anchor of one task and the distractor of the next is read once. An image without an EXIF
rotation is not copied by `exif_transpose`. The pixels are exactly what the one-decode-per-use path
produces.

A failure to read or decode an image ends only the composites that need it, with the reason.
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, ImageOps

from kbvqa.data.images import check_image
from kbvqa.pipelines.augment.options import RESAMPLE, Style, check_resample  # noqa: F401 - the composite's style

_ROTATED = {5, 6, 7, 8}  # EXIF orientations that swap width and height


@dataclass(frozen=True)
class Job:
    """One output image. `panels` are in display order (row-major for a grid): an image name from
    the task's `images`, or "blank:<name>" for an empty panel the size of that image."""

    out_path: str
    panels: tuple[str, ...]
    layout: str = "row"  # row | grid
    cols: int = 0  # grid columns (0 = ceil(sqrt(n)))


@dataclass(frozen=True)
class Task:
    images: dict[str, str]  # name -> file path
    jobs: tuple[Job, ...]
    style: Style = field(default_factory=Style)


@dataclass
class JobResult:
    out_path: str
    status: str  # saved | error
    reason: str = ""
    size: tuple[int, int] | None = None


def decode(path: str | Path, height: int, resample: str = RESAMPLE[0]) -> Image.Image:
    """Open, EXIF-orient, convert to RGB and resize to `height` (JPEG: draft mode first). The header
    passes kbvqa's byte and pixel caps first (kbvqa.data.images.check_image)."""
    check_image(path)
    with Image.open(path) as im:
        w, h = im.size  # the panel width comes from the full size, so draft rounding never changes it
        if im.getexif().get(0x0112, 1) in _ROTATED:
            w, h = h, w
        if w < 1 or h < 1:
            raise ValueError(f"empty image {w}x{h}")
        width = max(1, round(w * height / h))
        orient = im.getexif().get(0x0112, 1)
        if im.format == "JPEG":
            im.draft("RGB", (height, 1) if orient in _ROTATED else (1, height))
        if orient != 1:  # exif_transpose copies the whole image even when there is nothing to turn
            im = ImageOps.exif_transpose(im)
        if im.mode != "RGB":
            im = im.convert("RGB")
        if (width, height) == im.size:
            im.load()
            return im
        return resize_panel(im, (width, height), resample)


_MAX_FAST_SHRINK = 4.0  # beyond this the prefilter's kernel grows past ~23 taps; Pillow reduces first


def resize_panel(im: Image.Image, size: tuple[int, int], resample: str = RESAMPLE[0]) -> Image.Image:
    """An RGB panel at `size` (see the module docstring for the two modes)."""
    if resample == "fast":
        cv2, np = _opencv()
        if size[1] > im.height:
            return Image.fromarray(cv2.resize(np.asarray(im), size, interpolation=cv2.INTER_CUBIC))
        sx, sy = im.width / size[0], im.height / size[1]
        if max(sx, sy) <= _MAX_FAST_SHRINK:
            return Image.fromarray(_lanczos_shrink(np.asarray(im), size, sx, sy))
    return im.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)


def _lanczos_kernel(scale: float) -> Any:
    """Lanczos-3 stretched by `scale`, as Pillow weighs input pixels when it shrinks by that factor."""
    _, np = _opencv()
    if scale <= 1.0:
        return np.ones(1, np.float32)
    r = math.ceil(3 * scale) - 1  # the last tap inside the support |x| < 3 * scale
    x = np.arange(-r, r + 1) / scale
    k = np.sinc(x) * np.sinc(x / 3)
    return (k / k.sum()).astype(np.float32)


def _lanczos_shrink(a: Any, size: tuple[int, int], sx: float, sy: float) -> Any:
    """Shrink as Pillow's LANCZOS does, at about a quarter of its cost: low-pass the whole image with the
    stretched Lanczos kernel in one SIMD separable pass (OpenCV, 8-bit out), then read each output
    pixel at its centre in the input by bicubic interpolation (Pillow weighs the taps around each
    exact centre instead). On photographs the result is ~0.2-0.6/255 from Pillow's on average."""
    cv2, _ = _opencv()
    smooth = cv2.sepFilter2D(a, -1, _lanczos_kernel(sx), _lanczos_kernel(sy), borderType=cv2.BORDER_REFLECT)
    return cv2.resize(smooth, size, interpolation=cv2.INTER_CUBIC)


def _opencv() -> tuple[Any, Any]:
    """cv2 and numpy, imported on first use: only the fast resampling needs them."""
    import cv2
    import numpy as np

    if cv2.getNumThreads() != 1:
        cv2.setNumThreads(1)  # the pool's processes are the parallelism; threads would only contend
    return cv2, np


class PanelCache:
    """Decoded, resized panels of this process, least recently used first out, at most `max_bytes`
    of pixels. Keyed by (path, file size, mtime, height, resample): a file changed on disk is decoded
    again. Panels are never modified after decoding (they are pasted, not drawn on), so sharing is safe."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = self.misses = 0
        self._items: OrderedDict[tuple, Image.Image] = OrderedDict()

    def get(self, path: str, height: int, resample: str = RESAMPLE[0]) -> Image.Image:
        try:
            st = os.stat(path)
            key: tuple | None = (os.path.abspath(path), st.st_size, st.st_mtime_ns, height, resample)
        except OSError:
            key = None  # decode() reports the missing file
        if key is not None and key in self._items:
            self._items.move_to_end(key)
            self.hits += 1
            return self._items[key]
        self.misses += 1
        im = decode(path, height, resample)
        size = im.width * im.height * 3
        if key is not None and size <= self.max_bytes:
            self._items[key] = im
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, old = self._items.popitem(last=False)
                self.bytes -= old.width * old.height * 3
        return im

    def clear(self) -> None:
        self._items.clear()
        self.bytes = 0


PANEL_CACHE_BYTES = int(os.environ.get("KBVQA_PANEL_CACHE_MB", "160")) << 20
_PANELS = PanelCache(PANEL_CACHE_BYTES)  # one per process (each pool worker has its own)


def probe_size(path: str | Path, height: int) -> tuple[int, int]:
    """The panel size an image would get, from its header only (for Blank panels)."""
    check_image(path)
    with Image.open(path) as im:
        w, h = im.size
        if im.getexif().get(0x0112, 1) in _ROTATED:
            w, h = h, w
    return max(1, round(w * height / h)), height


def layout(sizes: Sequence[tuple[int, int]], kind: str, cols: int, gap: int) -> tuple[tuple[int, int], list[tuple[int, int]]]:
    """Canvas size and each panel's top-left corner. Row: panels side by side. Grid: cells of the
    widest panel's width, panels centred in their cell."""
    if kind == "row":
        xs, x = [], 0
        for w, _ in sizes:
            xs.append(x)
            x += w + gap
        return (x - gap, max(h for _, h in sizes)), [(x0, 0) for x0 in xs]
    if kind != "grid":
        raise ValueError(f"unknown layout {kind!r}")
    n = len(sizes)
    cols = cols or math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    cw, ch = max(w for w, _ in sizes), max(h for _, h in sizes)
    pos = [((i % cols) * (cw + gap) + (cw - w) // 2, (i // cols) * (ch + gap) + (ch - h) // 2)
           for i, (w, h) in enumerate(sizes)]
    return (cols * cw + (cols - 1) * gap, rows * ch + (rows - 1) * gap), pos


def _save(im: Image.Image, path: str, style: Style) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    if style.fmt in ("jpg", "jpeg"):
        im.save(tmp, "JPEG", quality=style.quality)
    elif style.fmt == "png":
        im.save(tmp, "PNG")
    else:
        raise ValueError(f"unknown image format {style.fmt!r} (jpg or png)")
    os.replace(tmp, path)


def run_task(task: Task) -> list[JobResult]:
    """Build every job of one task, decoding each named image at most once."""
    st = task.style
    decoded: dict[str, Image.Image | Exception] = {}

    def get(name: str) -> Image.Image:
        if name not in decoded:
            try:
                decoded[name] = _PANELS.get(task.images[name], st.height, st.resample)
            except Exception as e:  # noqa: BLE001 - reported on every job that needs it
                decoded[name] = e
        got = decoded[name]
        if isinstance(got, Exception):
            raise _PanelError(f"{name} image {task.images[name]}: {type(got).__name__}: {got}")
        return got

    out = []
    for job in task.jobs:
        try:
            panels: list[Image.Image | tuple[int, int]] = []
            for p in job.panels:
                if p.startswith("blank:"):
                    ref = p[len("blank:"):]
                    try:
                        panels.append(get(ref).size if ref in decoded else probe_size(task.images[ref], st.height))
                    except _PanelError:
                        raise
                    except Exception as e:  # noqa: BLE001
                        raise _PanelError(f"{ref} image {task.images[ref]}: {type(e).__name__}: {e}") from None
                else:
                    panels.append(get(p))
            sizes = [p if isinstance(p, tuple) else p.size for p in panels]
            canvas_size, pos = layout(sizes, job.layout, job.cols, st.gap)
            canvas = Image.new("RGB", canvas_size, st.background)
            for p, xy, sz in zip(panels, pos, sizes):
                if isinstance(p, tuple):
                    canvas.paste(Image.new("RGB", sz, st.blank_colour), xy)
                else:
                    canvas.paste(p, xy)
            _save(canvas, job.out_path, st)
            out.append(JobResult(job.out_path, "saved", size=canvas_size))
        except _PanelError as e:
            out.append(JobResult(job.out_path, "error", str(e)))
        except Exception as e:  # noqa: BLE001 - one job's failure must not end the task
            out.append(JobResult(job.out_path, "error", f"{type(e).__name__}: {e}"))
    return out


class _PanelError(Exception):
    pass


def _safe_task(task: Task) -> list[JobResult]:
    try:
        return run_task(task)
    except Exception as e:  # noqa: BLE001
        return [JobResult(j.out_path, "error", f"{type(e).__name__}: {e}") for j in task.jobs]


def run_tasks(tasks: Sequence[Task], workers: int | None = None, *, progress: bool = False) -> list[list[JobResult]]:
    """Run tasks, in order, in a process pool of `workers` (default os.cpu_count(); 1 = in-process).
    `progress` draws the project's progress bar (composites done / total, with an ETA) on a terminal."""
    from kbvqa.progress import ProgressBar

    workers = workers or os.cpu_count() or 1
    out: list[list[JobResult]] = []
    with ProgressBar(sum(len(t.jobs) for t in tasks), "composites", progress and bool(tasks)) as bar:
        if workers <= 1 or len(tasks) <= 1:
            try:
                for t in tasks:
                    out.append(_safe_task(t))
                    bar.advance(len(t.jobs))
                return out
            finally:
                _PANELS.clear()  # this process lives on: do not keep the panels past the run
        # consecutive tasks (neighbouring anchors share distractors) go to one worker, so its panel cache
        # sees the reuse; 4 chunks per worker keep the load balanced at the end
        chunk = max(1, min(64, math.ceil(len(tasks) / (workers * 4))))
        with ProcessPoolExecutor(max_workers=workers) as ex:
            for res in ex.map(_safe_task, tasks, chunksize=chunk):
                out.append(res)
                bar.advance(len(res))
        return out
