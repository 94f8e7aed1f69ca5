"""Build the vector indexes: KB images and KB sections in, vectors out (`kbvqa index images|text`).

The KB layer stores vectors and computes none (kb/ never imports models/), so computing them lives
here, where a pipeline may use both: `build_image_index` maps each KB `image_urls` entry to a local
file (`ImageResolver`), encodes them with an image encoder and reports every image it could not
find or decode; `build_text_index` embeds every section. `index_images` / `index_text` are the
commands' whole job (open the KB, make the encoder from its registered name, build, save) and
`load_image_index` is the wiring every image-retrieval job shares: an index and the encoder that
built it.

Every setting of one build is an `ImageIndexOptions` / `TextIndexOptions` (their defaults are written
there and nowhere else: the FAISS settings are the index's own `IndexParams`, nested as they are; the
encoder batch is `ENCODE_BATCH`, the one default `kbvqa retrieve` shares). `image_index_options` /
`text_index_options` build them once from `[index.images]` / `[index.text]` of `--config` and the
flags (flags win); the build gets them unchanged, and the saved index's .json records them as
`options`:

    [index.images]
    kind = "ivf"
    batch_size = 32
    [index.images.params]
    nprobe = 32
    [index.text]
    max_chars = 1000
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Mapping, TypeVar
from urllib.parse import unquote, urlparse

import numpy as np
from pydantic import Field, field_validator

from kbvqa.data.images import outside_root_allowed
from kbvqa.data.text import section_text
from kbvqa.data.urls import canonical_url
from kbvqa.kb.image_index import ImageIndex, IndexKind, IndexParams
from kbvqa.kb.text_index import TextIndex
from kbvqa.models.image_encoders import (ENCODE_BATCH, HistogramEncoder, ImageEncoder, encode_files, get_encoder,
                                         resolve_encoder)
from kbvqa.models.text_embed import BATCH_SIZE as TEXT_BATCH
from kbvqa.progress import ProgressBar
from kbvqa.runner.options import JobOptions, read_table

__all__ = ["BuildReport", "ImageIndexOptions", "ImageResolver", "IndexBuild", "TextIndexOptions", "build_image_index",
           "build_text_index", "image_index_options", "index_images", "index_text", "load_image_index",
           "text_index_options"]


# -- KB images -> local files ------------------------------------------------------------------------
ImageRule = Literal["auto", "basename", "relative", "urlpath"]


@dataclass
class ImageResolver:
    """Map a KB `image_urls` entry to a local file under `root`.

    Rules: `basename` (ROOT/<last path segment of the url, percent-decoded>), `relative` (ROOT/<the
    entry as stored>, for KBs that store relative paths), `urlpath` (ROOT/<host-less url path>, for a
    mirror that keeps the server's directory layout), `auto` (relative for non-URLs, else basename,
    then urlpath). A callable `rule(url, root) -> Path | None` may replace them. A candidate that
    lands outside `root` (a `../` entry, a symlink out) is refused and counted in `refused`, unless
    the user opted in (`--allow-outside-root`)."""

    root: Path
    rule: ImageRule | Callable[[str, Path], Path | None] = "auto"
    refused: int = 0

    def candidates(self, url: str) -> list[Path]:
        root = Path(self.root)
        if callable(self.rule):
            p = self.rule(url, root)
            return [Path(p)] if p is not None else []
        is_url = "://" in url
        path = unquote(urlparse(url).path) if is_url else url
        base = path.rstrip("/").rsplit("/", 1)[-1]
        by_rule = {
            "basename": [root / base, root / url.rstrip("/").rsplit("/", 1)[-1]],
            "relative": [root / url.lstrip("/")],
            "urlpath": [root / path.lstrip("/")],
        }
        if self.rule == "auto":
            order = (["basename", "urlpath"] if is_url else ["relative", "basename"])
            out = [p for r in order for p in by_rule[r]]
        else:
            if self.rule not in by_rule:
                raise ValueError(f"unknown image rule {self.rule!r} (auto, basename, relative, urlpath)")
            out = by_rule[self.rule]
        seen, uniq = set(), []
        for p in out:
            if p not in seen:
                seen.add(p)
                uniq.append(p)
        return uniq

    def resolve(self, url: str) -> Path | None:
        base = Path(self.root).resolve()
        allowed = outside_root_allowed()
        for p in self.candidates(url):
            if p.is_file():
                if allowed or p.resolve().is_relative_to(base):
                    return p
                self.refused += 1
                return None
        return None


# -- the jobs' options -------------------------------------------------------------------------------


class ImageIndexOptions(JobOptions):
    """Every setting of one `kbvqa index images` build. Paths are as given; None for a library caller
    that hands the KB, the image folder and the encoder itself (`build_image_index`)."""

    kb: Path | None = None  # a kbvqa SQLite KB or a wiki .json/.jsonl (imported once)
    images: Path | None = None  # the folder holding the KB's images
    out: Path | None = None  # index path: OUT.npy, OUT.json (and OUT.faiss for ivf/hnsw)
    config: Path | None = None  # the kbvqa.toml whose [index.images] table these settings come from
    encoder: str = HistogramEncoder.name  # a registered name (ENCODERS), an alias or `open_clip:ARCH`
    model_dir: Path | None = None  # a neural encoder's local model dir or checkpoint file
    device: str | None = None  # a neural encoder's torch device (None: its own choice)
    kind: IndexKind = "flat"  # flat (exact) | ivf | hnsw
    rule: ImageRule = "auto"  # how a KB image url maps to a file under `images` (ImageResolver)
    max_per_article: int | None = Field(None, ge=1)  # images indexed per article (None: all)
    batch_size: int = Field(ENCODE_BATCH, ge=1)  # images per encoder call
    params: IndexParams = Field(default_factory=IndexParams)  # the FAISS structure's settings, as the index takes them

    @field_validator("encoder")
    @classmethod
    def _registered(cls, name: str) -> str:
        resolve_encoder(name)  # an unknown name is refused before the KB is opened; nothing is loaded
        return name


class TextIndexOptions(JobOptions):
    """Every setting of one `kbvqa index text` build (paths as given; None for a library caller)."""

    kb: Path | None = None
    out: Path | None = None  # index path: OUT.npy and OUT.json
    config: Path | None = None  # the kbvqa.toml whose [index.text] table these settings come from
    model_dir: Path | None = None  # a local sentence-transformers model (None: the packaged all-MiniLM-L6-v2)
    device: str | None = None
    batch_size: int = Field(TEXT_BATCH, ge=1)  # sections per embedder call
    batch_articles: int = Field(512, ge=1)  # articles whose sections are gathered before the embedder runs
    max_chars: int = Field(1500, ge=1)  # characters of a section's text embedded (after its titles)


Opts = TypeVar("Opts", ImageIndexOptions, TextIndexOptions)


def _options(cls: type[Opts], section: str, config: str | Path | None, flags: Mapping[str, Any]) -> Opts:
    if config is None:
        return cls.build(**flags)
    return cls.build(read_table(config, section), source=f"{config} [{section}]", config=Path(config), **flags)


def image_index_options(config: str | Path | None = None, **flags: Any) -> ImageIndexOptions:
    """The image index build's options, built once: the class defaults, under `[index.images]` of
    `config`, under `flags` (None: a flag not given). A bad value is an OptionsError naming the flag,
    or the file and key."""
    return _options(ImageIndexOptions, "index.images", config, flags)


def text_index_options(config: str | Path | None = None, **flags: Any) -> TextIndexOptions:
    """The text index build's options: the defaults, under `[index.text]` of `config`, under `flags`."""
    return _options(TextIndexOptions, "index.text", config, flags)


@dataclass
class BuildReport:
    """What `build_image_index` did; nothing missing is silent."""

    articles: int = 0
    articles_without_images: int = 0
    articles_indexed: int = 0
    images_listed: int = 0
    images_resolved: int = 0
    images_missing: int = 0
    images_outside_root: int = 0  # of images_missing: found, but outside the image root (refused)
    images_failed: int = 0
    vectors: int = 0
    seconds: float = 0.0
    images_per_second: float = 0.0
    examples_missing: list[str] = field(default_factory=list)
    examples_failed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def build_image_index(kb: Any, image_root: str | Path, encoder: Any, opts: ImageIndexOptions | None = None, *,
                      progress: bool = False, urls: Iterable[str] | None = None,
                      **settings: Any) -> tuple[ImageIndex, BuildReport]:
    """Index every KB article's images (or those of `urls`) found under `image_root`, as `opts` say
    (rule, kind, max_per_article, batch_size, params; or, for a library caller, `settings` built
    into one). Missing files and undecodable images are counted in the report (with up to 20
    examples each); the index carries `opts.used()` as its `options`."""

    opts = opts or ImageIndexOptions.build(**settings)
    t0 = time.perf_counter()
    rule, max_images_per_article = opts.rule, opts.max_per_article
    resolver = ImageResolver(Path(image_root), rule)
    report = BuildReport()
    paths: list[Path] = []
    owners: list[str] = []
    names: list[str] = []
    iterator = (kb.get(u) for u in urls) if urls is not None else iter(kb)
    for article in iterator:
        if article is None:
            continue
        report.articles += 1
        listed = list(article.image_urls)
        if max_images_per_article:
            listed = listed[:max_images_per_article]
        if not listed:
            report.articles_without_images += 1
        for img_url in listed:
            report.images_listed += 1
            p = resolver.resolve(img_url)
            if p is None:
                report.images_missing += 1
                if len(report.examples_missing) < 20:
                    report.examples_missing.append(img_url)
                continue
            paths.append(p)
            owners.append(article.url)
            names.append(img_url)
    report.images_resolved = len(paths)
    report.images_outside_root = resolver.refused
    bar = ProgressBar(len(paths), f"index images ({encoder.name})", progress)
    vecs, kept, failed = encode_files(encoder, paths, batch_size=opts.batch_size, on_batch=bar.advance)
    bar.close()
    report.images_failed = len(failed)
    report.examples_failed = [f"{names[i]}: {msg}" for i, msg in list(failed.items())[:20]]
    index = ImageIndex(encoder.name, int(vecs.shape[1]) if len(vecs) else int(encoder.dim), opts.kind, opts.params)
    index.add(vecs, [owners[i] for i in kept], [names[i] for i in kept])
    index.build()
    report.vectors = len(index)
    report.articles_indexed = len(Counter(index.urls))
    report.seconds = round(time.perf_counter() - t0, 3)
    report.images_per_second = round(len(kept) / report.seconds, 1) if report.seconds else 0.0
    index.stats = {**report.as_dict(), "image_root": str(image_root), "rule": rule}
    index.options = opts.used()
    return index, report


def build_text_index(kb: Any, embedder: Any, opts: TextIndexOptions | None = None, *,
                     urls: Iterable[str] | None = None, progress: bool = False,
                     **settings: Any) -> tuple[TextIndex, dict[str, Any]]:
    """Embed every section of every KB article (or of `urls`), `opts.max_chars` of each, gathering
    `opts.batch_articles` articles per embedder run (`settings` build `opts` for a library caller).
    Returns (index, stats); the index carries `opts.used()` as its `options`."""

    opts = opts or TextIndexOptions.build(**settings)
    batch_articles, max_chars = opts.batch_articles, opts.max_chars
    t0 = time.perf_counter()
    ranges: dict[str, tuple[int, int]] = {}
    section_ids: list[int] = []
    chunks: list[np.ndarray] = []
    row = 0
    n_articles = n_empty = 0
    total = len(kb) if urls is None and hasattr(kb, "__len__") else 0
    bar = ProgressBar(total, "embed KB sections", progress and total > 0)
    buf_texts: list[str] = []

    def flush() -> None:
        if buf_texts:
            chunks.append(embedder.encode(buf_texts))
            buf_texts.clear()

    articles = (kb.get(u) for u in urls) if urls is not None else iter(kb)
    pending = 0
    for art in articles:
        if art is None:
            continue
        n_articles += 1
        start = row
        for s in art.sections:
            if not (s.text or s.title).strip():
                continue
            buf_texts.append(section_text(art.title, s.title, s.text, max_chars))
            section_ids.append(s.index)
            row += 1
        if row == start:
            n_empty += 1
        ranges[canonical_url(art.url)] = (start, row)
        pending += 1
        if pending >= batch_articles:
            flush()
            bar.advance(pending)
            pending = 0
    flush()
    bar.advance(pending)
    bar.close()
    vectors = np.concatenate(chunks) if chunks else np.zeros((0, embedder.dim), dtype=np.float32)
    index = TextIndex.from_rows(embedder.name, embedder.dim, vectors, ranges, section_ids)
    index.options = opts.used()
    secs = time.perf_counter() - t0
    return index, {"articles": n_articles, "articles_without_text": n_empty, "sections": len(index),
                   "seconds": round(secs, 3), "sections_per_second": round(len(index) / secs, 1) if secs else 0.0}


# -- the commands' jobs -------------------------------------------------------------------------------


@dataclass
class IndexBuild:
    """What `index_images` / `index_text` built and saved, and the summary the command prints."""

    index: Any
    path: Path  # the saved index's .json
    stats: dict[str, Any]
    model: Any  # the encoder or embedder

    def summary(self) -> dict[str, Any]:
        if isinstance(self.index, ImageIndex):
            return {"index": str(self.path), "encoder": self.index.encoder, "kind": self.index.kind,
                    "vectors": len(self.index), **{k: v for k, v in self.stats.items() if not k.startswith("examples")}}
        return {"index": str(self.path), "embedder": self.index.embedder, **self.stats}


def _open(kb: Path, progress: bool) -> Any:
    from kbvqa.kb.store import open_kb

    return open_kb(kb, progress=progress)


def _paths(opts: JobOptions, *names: str) -> list[Path]:
    missing = [f"--{n.replace('_', '-')}" for n in names if getattr(opts, n) is None]
    if missing:
        raise ValueError(f"an index build needs {', '.join(missing)}")
    return [getattr(opts, n) for n in names]


def index_images(opts: ImageIndexOptions, *, progress: bool = False) -> IndexBuild:
    """`kbvqa index images`: open the KB `opts.kb`, make the encoder by its registered name, index
    every article's images under `opts.images` and save the index to `opts.out`, its .json
    recording `opts` as used."""
    kb, image_root, out = _paths(opts, "kb", "images", "out")
    store = _open(kb, progress)
    enc = get_encoder(opts.encoder, opts.model_dir, batch_size=opts.batch_size, progress=progress,
                      **({"device": opts.device} if opts.device else {}))
    index, report = build_image_index(store, image_root, enc, opts, progress=progress)
    if not len(index):  # an empty index would answer every query with nothing: say why instead
        examples = (report.examples_missing + report.examples_failed)[:3]
        raise ValueError(f"{image_root}: not one of the KB's {report.images_listed} listed image(s) was found and "
                         f"decoded there (rule {opts.rule}: "
                         f"{report.images_missing} missing, {report.images_outside_root} outside the folder, "
                         f"{report.images_failed} undecodable; e.g. {examples}); nothing written")
    return IndexBuild(index, index.save(out), report.as_dict(), enc)


def index_text(opts: TextIndexOptions, *, progress: bool = False) -> IndexBuild:
    """`kbvqa index text`: embed every section of the KB `opts.kb` with a local sentence-transformers
    model and save the index to `opts.out`, its .json recording `opts` as used."""
    from kbvqa.models.text_embed import TextEmbedder

    kb, out = _paths(opts, "kb", "out")
    store = _open(kb, progress)
    emb = TextEmbedder(opts.model_dir, device=opts.device, batch_size=opts.batch_size)
    index, stats = build_text_index(store, emb, opts, progress=progress)
    return IndexBuild(index, index.save(out), stats, emb)


def load_image_index(path: str | Path, model_dir: str | Path | None = None, *,
                     device: str | None = None) -> tuple[ImageIndex, ImageEncoder]:
    """A saved image index and the encoder it was built with (by the name it records; a neural one
    from `model_dir`, checked to be the same model)."""
    index = ImageIndex.load(Path(path))
    return index, get_encoder(index.encoder, model_dir, **({"device": device} if device else {}))
