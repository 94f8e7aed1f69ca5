"""A benchmark (typically an audited, repaired split) as a Hugging Face dataset folder that
`datasets.load_dataset(DIR)` reads back and `huggingface-cli upload` publishes as it is.

The folder (`kbvqa data convert SRC DIR --to hf`):

- `data/<split>-0000k-of-0000N.parquet` — one group of shards per split (the samples' `split`, or
  `default_split`), shards cut at `max_shard_bytes`. Images are embedded as `datasets` Image
  features: a `{bytes, path}` struct per image in a list column, the bytes read from the sample's
  image file under `image_root` (checked against kbvqa's byte and pixel caps; a missing or
  unreadable image is an error naming the sample — never a row without its image). Every shard's
  Arrow schema carries the `huggingface` metadata `datasets` writes itself, so the features survive
  even without the card.
- `README.md` — the dataset card: a YAML header with `license`, `configs` (the splits' data files),
  `dataset_info` (features, and each split's rows and bytes), then the provenance in prose.
- `kbvqa_provenance.json` — the same provenance, machine-readable: kbvqa's version, the source file
  and its sha256, and for an audited split the audit's counts (kept / repaired / dropped / not
  finished, their reasons, what the repairs changed) and its manifest (path, sha256), read from the
  `<fixed>.split.json` that `kbvqa audit split` writes beside the split.

Columns: `id`, `question`, `answers` (the accepted answer texts), `images` (list of Image),
`question_type`, `answer_type`, `entity_url`, `entity_title`, `dataset`, and `kbvqa_sample` (the
whole kbvqa Sample as JSON, images named as in the `images` column's paths), so nothing the
benchmark holds is lost in the flat columns.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kbvqa.data.errors import DataError
from kbvqa.data.images import BadImage, check_image_bytes, resolve_image
from kbvqa.data.schema import Sample

__all__ = ["FEATURES", "write_hf_folder", "split_provenance", "UPLOAD_HINT"]

_STRING = {"dtype": "string", "_type": "Value"}
#: The `datasets` features of the folder's columns (the JSON `datasets` stores in a schema's metadata).
FEATURES: dict[str, Any] = {
    "id": _STRING, "question": _STRING,
    "answers": {"feature": _STRING, "_type": "Sequence"},
    "images": {"feature": {"_type": "Image"}, "_type": "Sequence"},
    "question_type": _STRING, "answer_type": _STRING, "entity_url": _STRING, "entity_title": _STRING,
    "dataset": _STRING, "kbvqa_sample": _STRING,
}
_YAML_TYPES = {"id": "string", "question": "string", "answers": ("sequence", "string"),
               "images": ("sequence", "image"), "question_type": "string", "answer_type": "string",
               "entity_url": "string", "entity_title": "string", "dataset": "string", "kbvqa_sample": "string"}
_SPLIT_NAME = re.compile(r"^\w+(\.\w+)*$")
DEFAULT_SHARD_BYTES = 256 << 20
UPLOAD_HINT = "huggingface-cli upload OWNER/NAME {dir} . --repo-type dataset"


def _schema() -> Any:
    import pyarrow as pa

    img = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    fields = [pa.field(n, pa.list_(pa.string()) if n == "answers" else pa.list_(img) if n == "images" else pa.string())
              for n in FEATURES]
    return pa.schema(fields, metadata={b"huggingface": json.dumps({"info": {"features": FEATURES}}).encode()})


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _row(s: Sample, image_root: Path | None) -> dict[str, Any]:
    images = []
    for ref in s.images:
        try:
            p = resolve_image(ref, image_root)
            data = p.read_bytes()
            check_image_bytes(data)
        except (OSError, BadImage, ValueError) as exc:
            raise DataError(f"image {ref!r} (image root {image_root}; pass --image-root): {exc}",
                            field="images") from None
        images.append({"bytes": data, "path": str(ref)})
    return {"id": s.id, "question": s.question, "answers": s.answer_texts, "images": images,
            "question_type": s.question_type, "answer_type": s.answer_type,
            "entity_url": s.entity.url if s.entity else None, "entity_title": s.entity.title if s.entity else None,
            "dataset": s.dataset, "kbvqa_sample": json.dumps(s.dump(), ensure_ascii=False, sort_keys=True)}


def _row_bytes(row: dict[str, Any]) -> int:
    return sum(len(i["bytes"]) for i in row["images"]) + len(row["kbvqa_sample"]) + len(row["question"])


class _SplitWriter:
    """Rows of one split into shards of about `limit` bytes, named `-of-N` once N is known."""

    def __init__(self, folder: Path, split: str, limit: int):
        self.folder, self.split, self.limit = folder, split, limit
        self.rows: list[dict[str, Any]] = []
        self.size = 0
        self.shards: list[Path] = []
        self.n_rows = 0
        self.n_bytes = 0

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        self.size += _row_bytes(row)
        self.n_rows += 1
        if self.size >= self.limit:
            self.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist(self.rows, schema=_schema())
        tmp = self.folder / f".{self.split}-{len(self.shards):05d}.parquet.tmp"
        pq.write_table(table, tmp)
        self.shards.append(tmp)
        self.n_bytes += table.nbytes
        self.rows, self.size = [], 0

    def finish(self) -> list[str]:
        self.flush()
        names = []
        for k, tmp in enumerate(self.shards):
            final = self.folder / f"{self.split}-{k:05d}-of-{len(self.shards):05d}.parquet"
            tmp.replace(final)
            names.append(final.name)
        return names


def split_provenance(src: Path) -> dict[str, Any] | None:
    """The audit's record for a split `kbvqa audit split` wrote (`<stem>.split.json` beside it): its
    counts, the audited file and the audit's manifest (path and sha256). None for any other file."""
    summary = src.with_name(f"{src.stem}.split.json")
    if not summary.is_file():
        return None
    try:
        info = json.loads(summary.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise DataError(f"unreadable split summary ({exc})", file=summary) from None
    keys = ("records", "kept", "repaired", "dropped", "not_finished", "retained", "repair_reasons", "drop_reasons",
            "drop_flags", "not_finished_reasons", "changes")
    out: dict[str, Any] = {"split_summary": str(summary), **{k: info[k] for k in keys if k in info}}
    audited = info.get("audited")
    if audited:
        a = Path(audited)
        if not a.is_absolute() and not a.exists():
            a = src.parent / a.name  # a relative path from another working folder: try beside the split
        out["audited"] = str(audited)
        manifest = a.with_name(f"{a.stem}.manifest.json")
        if manifest.is_file():
            m = json.loads(manifest.read_text(encoding="utf-8"))
            out["manifest"] = {"path": str(manifest), "sha256": _sha256(manifest),
                               **{k: m[k] for k in ("kbvqa_version", "created", "run_id", "fingerprint") if k in m}}
    return out


def _q(text: Any) -> str:
    """A YAML scalar: JSON's quoting is valid YAML."""
    return json.dumps(text, ensure_ascii=False)


def _card(name: str, license: str, splits: dict[str, _SplitWriter], prov: dict[str, Any]) -> str:
    lines = ["---", f"license: {_q(license)}", f"pretty_name: {_q(name)}", "task_categories:",
             "- visual-question-answering", "tags:", "- kbvqa", "- knowledge-based-vqa", "configs:",
             "- config_name: default", "  data_files:"]
    for sp in splits:
        lines += [f"  - split: {_q(sp)}", f"    path: {_q(f'data/{sp}-*')}"]
    lines += ["dataset_info:", "  features:"]
    for col, t in _YAML_TYPES.items():
        lines.append(f"  - name: {col}")
        lines.append(f"    {t[0]}: {t[1]}" if isinstance(t, tuple) else f"    dtype: {t}")
    lines.append("  splits:")
    for sp, w in splits.items():
        lines += [f"  - name: {_q(sp)}", f"    num_bytes: {w.n_bytes}", f"    num_examples: {w.n_rows}"]
    lines += ["---", "", f"# {name}", "",
              "Written by kbvqa (`kbvqa data convert ... --to hf`). Columns: `id`, `question`, `answers` (every "
              "accepted answer text), `images` (the query images, embedded), `question_type`, `answer_type`, "
              "`entity_url`, `entity_title`, `dataset`, and `kbvqa_sample` (the whole kbvqa sample as JSON).", "",
              "## Splits", ""]
    lines += [f"- `{sp}`: {w.n_rows} rows" for sp, w in splits.items()]
    lines += ["", "## Provenance", "", f"- kbvqa version: {prov['kbvqa_version']}",
              f"- source file: `{prov['source']}` (sha256 `{prov['source_sha256']}`)",
              f"- source benchmark(s): {', '.join(f'{k} ({v} rows)' for k, v in prov['datasets'].items())}"]
    audit = prov.get("audit")
    if audit:
        lines += [f"- audited file: `{audit.get('audited', 'n/a')}`",
                  f"- audit decisions over {audit.get('records', 'n/a')} records: kept {audit.get('kept', 'n/a')}, "
                  f"repaired {audit.get('repaired', 'n/a')}, dropped {audit.get('dropped', 'n/a')}, not finished "
                  f"{audit.get('not_finished', 'n/a')}; this dataset holds the {audit.get('retained', 'n/a')} "
                  "retained rows (kept and repaired)",
                  f"- repairs, by reason: {_q(audit.get('repair_reasons', {}))}",
                  f"- what the repairs changed: {_q(audit.get('changes', {}))}",
                  f"- drops, by reason: {_q(audit.get('drop_reasons', {}))}"]
        m = audit.get("manifest")
        lines.append(f"- audit manifest: `{m['path']}` (sha256 `{m['sha256']}`)" if m else
                     "- audit manifest: not found beside the audited file")
    else:
        lines.append("- not an audited split (no `<stem>.split.json` beside the source): no audit provenance")
    lines += ["", "The same record, machine-readable: `kbvqa_provenance.json`.", "",
              "## Publishing", "", "Nothing here talks to the Hub; to publish this folder:", "",
              "```", UPLOAD_HINT.format(dir="."), "```", ""]
    return "\n".join(lines)


def write_hf_folder(samples: Iterable[Sample], path: str | Path, *, image_root: str | Path | None = None,
                    source: str | Path | None = None, license: str = "other", name: str | None = None,
                    default_split: str = "test", max_shard_bytes: int = DEFAULT_SHARD_BYTES) -> int:
    """Write `samples` as a dataset folder at `path` (see the module doc); returns the rows written.
    `path` must not exist or be an empty folder (nothing mixed with an earlier export). `source` (the
    file the samples came from) gives the provenance; `image_root` resolves the image references
    (default: the source's folder)."""
    out = Path(path)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise DataError("the dataset folder exists and is not empty: choose a new folder or remove it", file=out)
    src = Path(source) if source is not None else None
    root = Path(image_root) if image_root is not None else (src.parent if src is not None else None)
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    writers: dict[str, _SplitWriter] = {}
    datasets: dict[str, int] = {}
    n = 0
    try:
        for s in samples:
            split = s.split or default_split
            if not _SPLIT_NAME.match(split):
                raise DataError(f"split name {split!r} is not a valid Hugging Face split name (letters, digits, "
                                "_ and . only)", field="split", row=n + 1)
            try:
                row = _row(s, root)
            except DataError as exc:
                raise DataError(f"sample {s.id!r}: {exc.message}", file=src, field="images", row=n + 1) from None
            writers.setdefault(split, _SplitWriter(data, split, max_shard_bytes)).add(row)
            datasets[s.dataset or "(not named)"] = datasets.get(s.dataset or "(not named)", 0) + 1
            n += 1
        for w in writers.values():
            w.finish()
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)  # no half-written dataset left behind
        raise
    from kbvqa import __version__

    prov: dict[str, Any] = {"kbvqa_version": __version__, "source": str(src) if src else "(samples given in memory)",
                            "source_sha256": _sha256(src) if src is not None and src.is_file() else "n/a",
                            "datasets": datasets, "splits": {sp: w.n_rows for sp, w in writers.items()},
                            "license": license}
    audit = split_provenance(src) if src is not None else None
    if audit:
        prov["audit"] = audit
    title = name or (src.stem if src is not None else out.name)
    (out / "README.md").write_text(_card(title, license, writers, prov), encoding="utf-8")
    (out / "kbvqa_provenance.json").write_text(json.dumps(prov, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return n
