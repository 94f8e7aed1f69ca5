"""Hugging Face `datasets` exports, read without the `datasets` package and without a download.

Format name `hf` (`detect_format` recognises every input below):

- a folder written by `Dataset.save_to_disk`: dataset_info.json (`features`), state.json
  (`_data_files`, `_split`) and data-0000k-of-0000N.arrow shards in Arrow IPC *stream* format;
- a folder written by `DatasetDict.save_to_disk`: dataset_dict.json (`splits`) and one such folder per
  split. `split=` picks one; a single split needs none; several without `split=` is an error that
  lists them (or point at the split's own folder);
- a folder of shards as on the Hub or in the `datasets` cache (`data/train-00000-of-00002.parquet`,
  `default/validation/0000.parquet`, `name-train.arrow` beside a dataset_info.json): each file's
  split comes from its name (`<split>-NNNNN-of-NNNNN`, `…-<split>` for a split dataset_info.json
  lists, a usual split name such as `train.parquet`) or from its folder, and is picked the same way;
- one file: `.arrow` (IPC stream or file format), `.feather` (v1 or v2) or `.parquet`
  (`Dataset.to_parquet`; `--from hf`, since a `.parquet` file is detected as the generic format).

Rows go through the generic adapter's column mapping (`kbvqa.data.generic.read_rows`: `mapping=`,
`sep=`), exactly as the jsonl/csv/parquet formats do. Without an `images` mapping and an `images`
column, the dataset's one Image column is taken as `images`. The features (dataset_info.json, else
the `huggingface` metadata `datasets` writes into every Arrow/Parquet schema, else the Arrow type)
decide how a cell is read:

- Image — a `{"bytes", "path"}` struct, alone or in a list. As `datasets` decodes it, bytes come
  first: they are written once to `image_dir` as `<sha256 of the bytes><.jpg|.png|…>` (the suffix from
  the image's own header, after the byte and pixel caps of `kbvqa.data.images`) and referenced
  relative to `image_root` (default: image_dir itself), so `image_dir=OUT_DIR/NAME.images,
  image_root=OUT_DIR` gives references that move with an output written to OUT_DIR. A cell without
  bytes is referenced by its `path`: relative to `image_root` when it names a file under it, else as
  written and counted (`image_path_not_under_root`) — a later job refuses a reference outside its
  image root, and this reader never copies a file the data names. Bytes with no `image_dir` are an
  error naming the file, row and column, unless `embedded_images="skip"` (for jobs that never look
  at pixels, such as statistics), which leaves them out and counts each one
  (`embedded_image_not_written`); a cell with neither bytes nor path is counted
  (`empty_image_cell`). Bytes that are not an image are an error naming the row.
- ClassLabel — the label's name instead of its integer (-1 = no label).
- Any other binary value cannot go into a JSON record: left out and counted (`binary_value_omitted`).

The split's name (state.json `_split`, the DatasetDict split, the shard's name) fills `split` where
the row leaves it empty. Errors name the shard file and the 1-based row within it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kbvqa.data.errors import DataError, ErrorPolicy, SkipReport
from kbvqa.data.generic import check_mapping, read_rows
from kbvqa.data.images import BadImage, check_image_bytes
from kbvqa.data.schema import Sample

__all__ = ["HF_FORMAT", "HFSource", "ImageSink", "looks_like_hf", "read_hf", "resolve_source", "write_hf"]

HF_FORMAT = "hf"
META_FILES = ("dataset_dict.json", "state.json", "dataset_info.json")
DATA_SUFFIXES = (".arrow", ".parquet", ".feather")
_SHARD = re.compile(r"^(?P<base>.*?)-\d{5}-of-\d{5}$")  # `train-00000-of-00002`, `data-00000-of-00001`
_SPLIT_WORDS = ("train", "test", "validation", "valid", "val", "dev", "eval", "evaluation")
_LIST_TYPES = ("Sequence", "List", "LargeList")
_EXT = {"JPEG": ".jpg", "PNG": ".png", "WEBP": ".webp", "GIF": ".gif", "BMP": ".bmp", "TIFF": ".tif",
        "MPO": ".jpg"}
_WALK_DEPTH = 4


# ------------------------------------------------------------------------------------------ sources

@dataclass
class HFSource:
    """What one read covers: the data files in order, the split's name (None: not known) and the
    features dataset_info.json declares (None: take them from each file's schema)."""

    files: list[Path]
    split: str | None = None
    features: dict[str, Any] | None = None
    splits: list[str] = field(default_factory=list)  # every split the input holds (for messages)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise DataError(f"not UTF-8 text ({exc.reason})", file=path) from None
    except json.JSONDecodeError as exc:
        raise DataError(f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})", file=path) from None
    except OSError as exc:
        raise DataError(f"cannot read: {exc.strerror or exc}", file=path) from None


def _features_of(info_path: Path) -> dict[str, Any] | None:
    if not info_path.is_file():
        return None
    info = _read_json(info_path)
    if not isinstance(info, dict):
        raise DataError("expected a JSON object", file=info_path)
    feats = info.get("features")
    if feats is not None and not isinstance(feats, dict):
        raise DataError("`features` must be an object of column -> feature", file=info_path, field="features")
    return feats


def _info_splits(info_path: Path) -> list[str]:
    if not info_path.is_file():
        return []
    info = _read_json(info_path)
    splits = info.get("splits") if isinstance(info, dict) else None
    return [str(k) for k in splits] if isinstance(splits, dict) else []


def _walk_data_files(root: Path, limit: int | None = None) -> list[Path]:
    """Data files under `root` (a few levels deep, hidden folders such as the Hub's .cache skipped,
    `datasets`' own `cache-*.arrow` files left out), in a stable order."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        depth = len(Path(dirpath).relative_to(root).parts)
        dirnames[:] = [] if depth >= _WALK_DEPTH else sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if Path(name).suffix.lower() in DATA_SUFFIXES and not name.startswith(("cache-", ".")):
                out.append(Path(dirpath) / name)
                if limit is not None and len(out) >= limit:
                    return out
    return out


def looks_like_hf(path: str | Path) -> bool:
    """A `datasets` export folder (dataset_dict.json / state.json / dataset_info.json, or data shards),
    or an .arrow / .feather file."""
    p = Path(path)
    if p.is_dir():
        return any((p / name).is_file() for name in META_FILES) or bool(_walk_data_files(p, limit=1))
    return p.suffix.lower() in (".arrow", ".feather")


def _choose(split: str | None, available: list[str], where: Path) -> str:
    if split is not None:
        if split not in available:
            raise DataError(f"no split {split!r}; this dataset has: {', '.join(available)}", file=where)
        return split
    if len(available) == 1:
        return available[0]
    raise DataError(f"this dataset has {len(available)} splits ({', '.join(available)}); "
                    "choose one (--split NAME, split=NAME)", file=where)


def _saved_dataset(folder: Path, split: str | None) -> HFSource:
    """A `Dataset.save_to_disk` folder (state.json lists the shards)."""
    state_path = folder / "state.json"
    features = _features_of(folder / "dataset_info.json")
    state = _read_json(state_path)
    if not isinstance(state, dict):
        raise DataError("expected a JSON object", file=state_path)
    listed = state.get("_data_files")
    if not isinstance(listed, list) or not all(isinstance(d, dict) and isinstance(d.get("filename"), str)
                                               for d in listed):
        raise DataError('expected a list of {"filename": ...}', file=state_path, field="_data_files")
    files = []
    for d in listed:
        name = d["filename"]
        target = folder / name
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise DataError(f"data file {name!r} is not inside the dataset folder", file=state_path,
                            field="_data_files")
        if not target.is_file():
            raise DataError(f"data file {name!r} listed in state.json is missing", file=target)
        files.append(target)
    own = state.get("_split")
    own = str(own) if own is not None else None
    if split is not None and own is not None and split != own:
        raise DataError(f"this dataset folder holds split {own!r}, not {split!r}", file=state_path, field="_split")
    return HFSource(files, own or split, features, [own] if own else [])


def _split_of(f: Path, root: Path, known: list[str]) -> str | None:
    stem = f.name[: -len(f.suffix)]
    m = _SHARD.match(stem)
    base = m.group("base") if m else stem
    for s in sorted(known, key=len, reverse=True):
        if base == s or base.endswith((f"-{s}", f"_{s}")):
            return s
    if m and base != "data":  # the Hub's `<split>-NNNNN-of-NNNNN`; `data-…` is save_to_disk's own naming
        return base
    if base.lower() in _SPLIT_WORDS:
        return base
    for parent in f.relative_to(root).parts[:-1][::-1]:
        if parent in known or parent.lower() in _SPLIT_WORDS:
            return parent
    return None


def _shard_folder(folder: Path, split: str | None) -> HFSource:
    """A folder of data shards without save_to_disk's state.json: the Hub layout or the cache."""
    files = _walk_data_files(folder)
    if not files:
        raise DataError("no dataset_dict.json, state.json or .arrow/.parquet/.feather files: "
                        "not a Hugging Face datasets export", file=folder)
    info_path = folder / "dataset_info.json"
    known = _info_splits(info_path)
    groups: dict[str | None, list[Path]] = {}
    for f in files:
        groups.setdefault(_split_of(f, folder, known), []).append(f)
    names = [g for g in groups if g is not None]
    if len(groups) == 1:
        (only,) = groups
        if split is not None and only is not None and split != only:
            raise DataError(f"no split {split!r}; this dataset has: {only}", file=folder)
        return HFSource(groups[only], only or split, _features_of(info_path), names)
    if None in groups:
        odd = ", ".join(str(f.relative_to(folder)) for f in groups[None][:3])
        raise DataError(f"cannot tell the split of {odd}" + (f" beside splits {', '.join(names)}" if names else "")
                        + "; point at one file or one split's folder", file=folder)
    chosen = _choose(split, names, folder)
    return HFSource(groups[chosen], chosen, _features_of(info_path), names)


def resolve_source(path: str | Path, split: str | None = None) -> HFSource:
    """The data files one read of `path` covers (see the module docstring); DataError naming the
    file otherwise."""
    p = Path(path)
    if not p.exists():
        raise DataError("file not found", file=p)
    if p.is_file():
        if p.suffix.lower() not in DATA_SUFFIXES:
            raise DataError(f"not a Hugging Face datasets file (expected {', '.join(DATA_SUFFIXES)}, "
                            "or a save_to_disk folder)", file=p)
        state = p.parent / "state.json"
        own = None
        if state.is_file():  # a shard of a save_to_disk folder
            st = _read_json(state)
            own = st.get("_split") if isinstance(st, dict) else None
        own = str(own) if own is not None else _split_of(p, p.parent, _info_splits(p.parent / "dataset_info.json"))
        if split is not None and own is not None and split != own:
            raise DataError(f"this file holds split {own!r}, not {split!r}", file=p)
        return HFSource([p], own or split, _features_of(p.parent / "dataset_info.json"), [own] if own else [])
    dd = p / "dataset_dict.json"
    if dd.is_file():
        info = _read_json(dd)
        splits = info.get("splits") if isinstance(info, dict) else None
        if not isinstance(splits, list) or not splits or not all(isinstance(s, str) for s in splits):
            raise DataError("expected a non-empty list of split names", file=dd, field="splits")
        for s in splits:  # each names a folder beside dataset_dict.json, never a path out of it
            if s in ("", ".", "..") or Path(s).name != s or "\\" in s:
                raise DataError(f"split name {s!r} is not a folder name", file=dd, field="splits")
        chosen = _choose(split, splits, dd)
        sub = p / chosen
        if not sub.is_dir():
            raise DataError(f"split {chosen!r} is listed in dataset_dict.json but its folder is missing", file=sub)
        src = resolve_source(sub, chosen)
        src.splits = list(splits)
        return src
    if (p / "state.json").is_file():
        return _saved_dataset(p, split)
    return _shard_folder(p, split)


# ------------------------------------------------------------------------------------------ files

def _open(path: Path, batch_size: int) -> tuple[Any, Iterator[Any]]:
    """(Arrow schema, record batches) of one data file; the schema is read before any row."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyarrow import feather

    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            pf = pq.ParquetFile(path)
            return pf.schema_arrow, pf.iter_batches(batch_size=batch_size)
        with open(path, "rb") as fh:
            head = fh.read(6)
        if head == b"ARROW1":  # IPC file format (Feather v2 too)
            reader = pa.ipc.open_file(pa.memory_map(str(path)))
            return reader.schema, (reader.get_batch(i) for i in range(reader.num_record_batches))
        if head[:4] == b"FEA1":  # Feather v1 (deprecated by Arrow, still read): no batches to stream
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                table = feather.read_table(str(path))
            return table.schema, iter(table.to_batches(max_chunksize=batch_size))
        reader = pa.ipc.open_stream(pa.memory_map(str(path)))  # IPC stream: save_to_disk's shards
        return reader.schema, iter(reader)
    except (pa.ArrowException, OSError) as exc:
        kind = "Parquet" if suffix == ".parquet" else "Arrow IPC (stream or file) / Feather"
        raise DataError(f"not a readable {kind} file ({type(exc).__name__}: {exc})", file=path) from None


def _schema_features(schema: Any) -> dict[str, Any]:
    """The features `datasets` writes into a schema's metadata (`huggingface` → info.features)."""
    raw = (schema.metadata or {}).get(b"huggingface")
    if not raw:
        return {}
    try:
        feats = json.loads(raw).get("info", {}).get("features")
    except (ValueError, AttributeError):
        return {}
    return feats if isinstance(feats, dict) else {}


def _is_image_struct(t: Any) -> bool:
    import pyarrow as pa

    if not pa.types.is_struct(t) or {t.field(i).name for i in range(t.num_fields)} != {"bytes", "path"}:
        return False
    b = t.field("bytes").type
    return pa.types.is_binary(b) or pa.types.is_large_binary(b)


def _inferred_feature(t: Any) -> Any:
    """An Image feature for an image-shaped Arrow type (no features anywhere), else None."""
    import pyarrow as pa

    if _is_image_struct(t):
        return {"_type": "Image"}
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and _is_image_struct(t.value_type):
        return {"_type": "List", "feature": {"_type": "Image"}}
    return None


def _column_features(schema: Any, declared: dict[str, Any] | None) -> dict[str, Any]:
    from_schema = _schema_features(schema)
    out: dict[str, Any] = {}
    for f in schema:
        feat = (declared or {}).get(f.name)
        if feat is None:
            feat = from_schema.get(f.name)
        out[f.name] = feat if feat is not None else _inferred_feature(f.type)
    return out


def _holds_image(feat: Any) -> bool:
    """An Image column, or a list of images (what `images` can be mapped to)."""
    if isinstance(feat, list):
        return len(feat) == 1 and _is_image(feat[0])
    if isinstance(feat, dict):
        if feat.get("_type") == "Image":
            return True
        if feat.get("_type") in _LIST_TYPES:
            return _is_image(feat.get("feature"))
    return False


def _is_image(feat: Any) -> bool:
    return isinstance(feat, dict) and feat.get("_type") == "Image"


# ------------------------------------------------------------------------------------------ cells

class ImageSink:
    """Turns Image cells into image references (see the module docstring): embedded bytes become
    content-hashed files in `image_dir`, referenced relative to `image_root`."""

    def __init__(self, image_dir: str | Path | None = None, image_root: str | Path | None = None, *,
                 embedded_images: Literal["write", "skip"] = "write", report: SkipReport | None = None):
        if embedded_images not in ("write", "skip"):
            raise ValueError(f"embedded_images must be 'write' or 'skip', not {embedded_images!r}")
        self.image_dir = Path(image_dir) if image_dir is not None else None
        root = image_root if image_root is not None else image_dir
        self.image_root = Path(root).resolve() if root is not None else None
        if self.image_dir is not None and self.image_root is not None \
                and not self.image_dir.resolve().is_relative_to(self.image_root):
            raise ValueError(f"image_dir {self.image_dir} is not inside image_root {self.image_root}: "
                             "references are written relative to image_root")
        self.embedded_images = embedded_images
        self.report = report if report is not None else SkipReport()
        self.written = 0  # new files
        self.reused = 0  # bytes already on disk (the same image in several rows, or a rerun)
        self.by_path = 0

    def __call__(self, cell: Any, *, file: Path, row: int, column: str) -> str | None:
        where = f"{file} row {row} field {column!r}"
        if isinstance(cell, str):  # a plain path column cast to Image
            cell = {"bytes": None, "path": cell}
        if not isinstance(cell, dict):
            raise DataError(f"an Image cell must be a {{bytes, path}} struct, not {type(cell).__name__}",
                            file=file, row=row, field=column)
        data, path = cell.get("bytes"), cell.get("path")
        if data:
            if self.image_dir is None:
                if self.embedded_images == "skip":
                    self.report.warn("embedded_image_not_written", where)
                    return None
                raise DataError("the dataset embeds this image's bytes and no image folder was given to write "
                                "them to (image_dir=; or embedded_images='skip' to count them and go on); on the "
                                "command line, convert first: kbvqa data convert DATASET OUT.jsonl --from hf",
                                file=file, row=row, field=column)
            return self._write(bytes(data), file=file, row=row, column=column)
        if path:
            return self._by_path(str(path), where)
        self.report.warn("empty_image_cell", where)
        return None

    def _write(self, data: bytes, *, file: Path, row: int, column: str) -> str:
        try:
            fmt, _, _ = check_image_bytes(data)  # the header only: no pixel is decoded
        except BadImage as exc:
            raise DataError(str(exc), file=file, row=row, field=column) from None
        assert self.image_dir is not None and self.image_root is not None
        target = self.image_dir / f"{hashlib.sha256(data).hexdigest()}{_EXT.get(fmt, '.' + fmt.lower())}"
        if target.is_file() and target.stat().st_size == len(data):
            self.reused += 1
        else:
            self.image_dir.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            try:
                tmp.write_bytes(data)
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
            self.written += 1
        return Path(os.path.relpath(target.resolve(), self.image_root)).as_posix()

    def _by_path(self, path: str, where: str) -> str:
        self.by_path += 1
        if self.image_root is None:
            return path
        p = Path(path)
        candidate = p if p.is_absolute() else self.image_root / p
        try:
            resolved = candidate.resolve()
            inside = resolved.is_file() and resolved.is_relative_to(self.image_root)
        except (OSError, RuntimeError):
            inside = False
        if inside:
            return path if not p.is_absolute() else resolved.relative_to(self.image_root).as_posix()
        self.report.warn("image_path_not_under_root", f"{where}: {path}")
        return path


@dataclass
class _Cells:
    """Reads one row's cells by their features."""

    sink: ImageSink
    report: SkipReport
    file: Path
    row: int = 0
    column: str = ""

    def convert(self, v: Any, feat: Any) -> Any:
        if v is None:
            return None
        if isinstance(feat, list):  # `[feature]`: a list of that feature
            return self._list(v, feat[0] if feat else None)
        if isinstance(feat, dict):
            kind = feat.get("_type")
            if kind == "Image":
                return self.sink(v, file=self.file, row=self.row, column=self.column)
            if kind == "ClassLabel":
                return self._label(v, feat)
            if kind in _LIST_TYPES:
                inner = feat.get("feature")
                if isinstance(v, dict) and isinstance(inner, dict) and "_type" not in inner:
                    # a Sequence of a dict is stored as a dict of lists
                    return {k: self._list(x, inner.get(k)) if isinstance(x, list) else self.convert(x, inner.get(k))
                            for k, x in v.items()}
                return self._list(v, inner)
            if kind is None and isinstance(v, dict):  # a dict of features
                return {k: self.convert(x, feat.get(k)) for k, x in v.items()}
        if isinstance(v, (bytes, bytearray, memoryview)):
            self.report.warn("binary_value_omitted", f"{self.file} row {self.row} field {self.column!r}")
            return None
        if isinstance(v, dict):
            return {k: self.convert(x, None) for k, x in v.items()}
        if isinstance(v, list):
            return [self.convert(x, None) for x in v]
        return v

    def _list(self, v: Any, inner: Any) -> Any:
        if not isinstance(v, list):
            return self.convert(v, inner)
        out = [self.convert(x, inner) for x in v]
        return [x for x in out if x is not None] if _is_image(inner) else out  # an unwritten image is counted

    def _label(self, v: Any, feat: dict[str, Any]) -> Any:
        names = feat.get("names")
        if not isinstance(v, int) or isinstance(v, bool) or not isinstance(names, list):
            return v
        if v < 0:
            return None
        if v >= len(names):
            raise DataError(f"class label {v} is not among the feature's {len(names)} names",
                            file=self.file, row=self.row, field=self.column)
        return names[v]


def _rows(source: HFSource, first: tuple[Any, Iterator[Any]] | None, cells: _Cells, policy: ErrorPolicy,
          batch_size: int) -> Iterator[tuple[Path, int, dict[str, Any]]]:
    import pyarrow as pa

    for i, file in enumerate(source.files):
        schema, batches = first if (i == 0 and first is not None) else _open(file, batch_size)
        feats = _column_features(schema, source.features)
        cells.file = file
        num = 0
        try:
            for batch in batches:
                for rec in batch.to_pylist():
                    num += 1
                    cells.row = num
                    try:
                        out = {}
                        for col, v in rec.items():
                            cells.column = col
                            out[col] = cells.convert(v, feats.get(col))
                    except DataError as e:
                        policy.handle(e)
                        continue
                    yield file, num, out
        except (pa.ArrowException, OSError) as exc:  # a truncated or corrupt shard: the rest is unreadable
            policy.handle(DataError(f"cannot read the file past row {num} ({type(exc).__name__}: {exc})",
                                    file=file, row=num + 1))


def _image_mapping(mapping: dict[str, str] | None, feats: dict[str, Any], report: SkipReport,
                   where: Path) -> dict[str, str] | None:
    """The user's mapping, plus images -> the one Image column when nothing says where images are."""
    user = dict(mapping or {})
    image_cols = [c for c, f in feats.items() if _holds_image(f)]
    if "images" in user or "images" in feats or not image_cols:
        return mapping
    free = [c for c in image_cols if c not in user.values()]
    if len(free) == 1:
        user["images"] = free[0]
        return user
    if len(free) > 1:
        report.warn("several_image_columns", f"{where}: {', '.join(free)} (map one with images=COLUMN; "
                                             "the others' references stay in meta)")
    return mapping


def read_hf(path: str | Path, *, mapping: dict[str, str] | None = None, sep: str = "|", split: str | None = None,
            image_dir: str | Path | None = None, image_root: str | Path | None = None,
            embedded_images: Literal["write", "skip"] = "write", policy: ErrorPolicy | None = None,
            batch_size: int = 1024, **_: Any) -> Iterator[Sample]:
    """Stream Samples from a Hugging Face `datasets` export (see the module docstring)."""
    policy = policy or ErrorPolicy()
    if mapping is not None:
        check_mapping(mapping)
    source = resolve_source(path, split)
    sink = ImageSink(image_dir, image_root, embedded_images=embedded_images, report=policy.report)
    first = _open(source.files[0], batch_size) if source.files else None
    feats = _column_features(first[0], source.features) if first else dict(source.features or {})
    mapping = _image_mapping(mapping, feats, policy.report, source.files[0] if source.files else Path(path))
    cells = _Cells(sink, policy.report, Path(path))
    for sample in read_rows(_rows(source, first, cells, policy, batch_size), fmt=HF_FORMAT, mapping=mapping,
                            sep=sep, policy=policy):
        if sample.split is None and source.split:
            sample.split = source.split
        yield sample


def write_hf(samples: Any, path: str | Path, **opts: Any) -> int:
    """A Hugging Face dataset folder (Parquet shards with embedded Image features and a dataset card)
    that `datasets.load_dataset(path)` reads: `kbvqa.data.hf_export.write_hf_folder` (its options:
    image_root=, source=, license=, name=, default_split=)."""
    from kbvqa.data.hf_export import write_hf_folder

    return write_hf_folder(samples, path, **opts)

