"""Find kbvqa outputs in run folders: by their manifests first, then by the known summary files.

Every runner output `OUT.jsonl` has `OUT.manifest.json` beside it (kbvqa.runner.manifest); its stage
names say what the output is (audit, agent, judge, IVR-12, answers, retrieval). What the runner does
not write is recognised by name: `OUT.summary.json` (audit and IVR-12 summaries, attached to their
output), an augmentation folder (`manifest.jsonl` + `stats.json`, with `samples.jsonl` and
`retrieval.jsonl`) and per-item score files (`kbvqa score ... --per-item`, lines with `data_id` and
`correct` or `label`), attached to the predictions `P.jsonl` they are named after (`P.*.jsonl`).
Any other JSONL file is still listed (as plain records), and a manifest whose output is missing is
listed with that problem: nothing found is dropped silently.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Catalog", "Output", "discover", "kind_of"]

AUDIT_STAGES = frozenset({"verify", "derive", "posedness", "leakage"})
#: Run-config keys that name other files a view can use (references, the predictions judged ...).
RELATED_KEYS = ("input", "samples", "references", "predictions", "records")
_SKIP_DIRS = re.compile(r"^\.|\.cassette$|\.artifacts$|^__pycache__$")
_SNIFF_BYTES = 1 << 20

KIND_TITLES = {"audit": "Audit", "augmentation": "Augmentation", "predictions": "Predictions",
               "retrieval": "Retrieval", "agent": "Agent episodes", "judge": "Judge verdicts",
               "ivr12": "IVR-12 rubric", "scores": "Per-item scores", "records": "Records",
               "summary": "Summary"}


@dataclass
class Output:
    """One thing the viewer can show: a JSONL output (or a summary JSON) and what belongs to it."""

    oid: str
    kind: str
    path: Path
    root: Path
    rel: str
    manifest: dict[str, Any] | None = None
    manifest_path: Path | None = None
    summary: dict[str, Any] | None = None
    summary_path: Path | None = None
    related: dict[str, Path] = field(default_factory=dict)
    scores: list[Path] = field(default_factory=list)  # per-item score files for predictions
    problems: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        return KIND_TITLES.get(self.kind, self.kind)

    @property
    def has_manifest(self) -> bool:
        return self.manifest is not None

    @property
    def stage_names(self) -> list[str]:
        return _stage_names(self.manifest)


@dataclass
class Catalog:
    """Everything found under the run folders, and the folders images may be served from."""

    roots: list[Path]
    image_roots: list[Path]
    outputs: list[Output] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.reindex()

    def reindex(self) -> None:
        self._by_oid = {o.oid: o for o in self.outputs}
        self._by_path = {o.path.resolve(): o for o in self.outputs}

    def add(self, out: Output) -> None:
        self.outputs.append(out)
        self._by_oid[out.oid] = out
        self._by_path[out.path.resolve()] = out

    def get(self, oid: str) -> Output | None:
        return self._by_oid.get(oid)

    def by_path(self, path: Path | str) -> Output | None:
        try:
            return self._by_path.get(Path(path).resolve())
        except OSError:
            return None

    @property
    def allowed_roots(self) -> list[Path]:
        """Folders whose files may be served: the run folders and the configured image roots."""
        return [*self.roots, *self.image_roots]

    def sample_files(self) -> list[Path]:
        """Every samples / references file a manifest names (for references and query images)."""
        seen: dict[Path, None] = {}
        for o in self.outputs:
            for key in ("samples", "input", "references"):
                p = o.related.get(key)
                if p is not None:
                    seen.setdefault(p.resolve(), None)
        return list(seen)


def _stage_names(manifest: dict[str, Any] | None) -> list[str]:
    if not manifest:
        return []
    names = [s.get("name") for s in manifest.get("stages") or [] if isinstance(s, dict)]
    names += list((manifest.get("run_config") or {}).get("stages") or [])
    return [str(n) for n in names if n]


def _first_record(path: Path) -> dict[str, Any] | None:
    """The first JSON object of a JSONL file (read from its first MiB), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(_SNIFF_BYTES)
    except OSError:
        return None
    for raw in head.splitlines():
        if raw.strip():
            try:
                obj = json.loads(raw)
            except ValueError:
                return None
            return obj if isinstance(obj, dict) else None
    return None


def kind_of(stage_names: list[str], first: dict[str, Any] | None) -> str:
    """What an output is: by its stages when a manifest names them, else by its first record."""
    names = set(stage_names)
    if names & AUDIT_STAGES:
        return "audit"
    for stage, kind in (("agent", "agent"), ("simpleqa-judge", "judge"), ("ivr12", "ivr12")):
        if stage in names:
            return kind
    if any(n.startswith("answer-") for n in names):
        return "predictions"
    if names & {"retrieve-image", "rerank-sections"}:
        return "retrieval"
    r = first or {}
    if isinstance(r.get("audit"), dict):
        return "audit"
    if isinstance(r.get("verdict"), dict):
        return "judge"
    if isinstance(r.get("ivr12"), dict):
        return "ivr12"
    if isinstance(r.get("meta"), dict) and "termination" in r["meta"]:
        return "agent"
    if "anchor_data_id" in r and "target_side" in r:
        return "augmentation"
    if "data_id" in r and ("correct" in r or "label" in r):
        return "scores"
    if "answer" in r and "sample_id" in r:
        return "predictions"
    if "retrieved" in r:
        return "retrieval"
    return "records"


def _load_json(path: Path, problems: list[str]) -> dict[str, Any] | None:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problems.append(f"{path}: unreadable ({type(exc).__name__}: {exc})")
        return None
    if not isinstance(obj, dict):
        problems.append(f"{path}: not a JSON object")
        return None
    return obj


def _related(manifest: dict[str, Any] | None, base: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    cfg = (manifest or {}).get("run_config") or {}
    for key in RELATED_KEYS:
        v = cfg.get(key)
        if isinstance(v, str) and v:
            p = Path(v) if Path(v).is_absolute() else base / v
            if p.is_file():
                out[key] = p
    return out


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def _walk(root: Path) -> list[tuple[Path, list[str]]]:
    out = []
    for d, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(x for x in dirs if not _SKIP_DIRS.search(x))
        out.append((Path(d), sorted(files)))
    return out


def discover(run_dirs: list[Path | str], image_roots: list[Path | str] = ()) -> Catalog:
    """Find every output under `run_dirs` (a folder, or one JSONL file given directly)."""
    roots: list[Path] = []
    singles: list[Path] = []
    problems: list[str] = []
    for d in map(Path, run_dirs):
        if d.is_dir():
            roots.append(d.resolve())
        elif d.is_file():
            roots.append(d.parent.resolve())
            singles.append(d.resolve())
        else:
            problems.append(f"{d}: no such folder or file")
    cat = Catalog(roots=list(dict.fromkeys(roots)), image_roots=[Path(r).resolve() for r in image_roots],
                  problems=problems)
    multi = len(cat.roots) > 1
    used: set[str] = set()

    def new(kind: str, path: Path, root: Path, **kw: Any) -> Output:
        rel = path.relative_to(root).as_posix()
        base = _slug((root.name + "-" if multi else "") + rel.removesuffix(".jsonl").removesuffix(".json"))
        oid, n = base, 2
        while oid in used:
            oid, n = f"{base}-{n}", n + 1
        used.add(oid)
        out = Output(oid=oid, kind=kind, path=path, root=root, rel=rel, **kw)
        cat.add(out)
        return out

    for root in cat.roots:
        _discover_root(cat, root, new)
    _link_references(cat)
    _recorded_image_roots(cat)
    if singles:  # files given directly: keep those (their folders still serve their images)
        keep, parents = set(singles), {s.parent for s in singles}
        cat.outputs[:] = [o for o in cat.outputs if o.path.resolve() in keep or o.root not in parents]
        cat.reindex()
    cat.outputs.sort(key=lambda o: (cat.roots.index(o.root), o.rel))
    return cat


#: run_config keys naming a folder of the images a run's records name: the agent's --kb-images
#: (trajectory items and provenance name KB images there), a curation stage's posts image root (its
#: records name images relative to it), IVR-12's query and answer image roots (absolute paths there).
RECORDED_IMAGE_ROOTS = ("kb_images", "image_root", "query_image_root", "answer_image_root")


def recorded_roots(o: Output) -> list[tuple[str, Path]]:
    """(run_config key, folder) for every image root the output's manifest records (RECORDED_IMAGE_ROOTS)."""
    rc = (o.manifest or {}).get("run_config") or {}
    return [(key, Path(str(rc[key]))) for key in RECORDED_IMAGE_ROOTS if rc.get(key)]


def _recorded_image_roots(cat: Catalog) -> None:
    """A run that stores absolute image paths records their root in its manifest; that folder is an
    image root of the viewer (listed on the front page), so those images show from any working
    directory (and a relative reference is looked for under it: RecordContext). A root that is not an
    existing absolute folder, or is the filesystem root, is not added and is listed as a problem."""
    for o in cat.outputs:
        for key, p in recorded_roots(o):
            value = str(p)
            if key != "kb_images" and p.is_absolute() and not p.exists():
                continue  # a run's own image folder that nothing was written to (an offline reference build)
            if not p.is_absolute() or not p.is_dir() or p.resolve() == p.resolve().parent:
                cat.problems.append(f"{o.rel}: run_config.{key} {value!r} is not an absolute folder that exists; "
                                    "its images are not shown (pass --images ROOT)")
                continue
            if p.resolve() not in cat.allowed_roots and not any(p.resolve().is_relative_to(r) for r in cat.roots):
                cat.image_roots.append(p.resolve())


def _link_references(cat: Catalog) -> None:
    """A judge or rubric run names the predictions it read and their references: give those
    predictions the references too, so an agent episode can show its reference beside it."""
    for o in cat.outputs:
        pred = o.related.get("predictions")
        refs = o.related.get("samples") or o.related.get("references")
        target = cat.by_path(pred) if pred is not None else None
        if target is not None and refs is not None:
            target.related.setdefault("samples", refs)


def _output_of(manifest: Any, d: Path, name: str) -> Path:
    """The output a manifest describes: the file its `output` field names (`p.json.manifest.json`
    describes `p.json`, runner.lock.side_path), else `X.jsonl` for `X.manifest.json`."""
    recorded = Path(str(manifest.get("output") or "")).name if isinstance(manifest, dict) else ""
    if recorded and name in (f"{recorded}.manifest.json", f"{Path(recorded).stem}.manifest.json"):
        return d / recorded
    return d / (name.removesuffix(".manifest.json") + ".jsonl")


def _discover_root(cat: Catalog, root: Path, new: Any) -> None:
    """Manifests and augmentation folders first, then summaries, then every other JSONL file."""
    claimed: set[Path] = set()
    per_item: list[Path] = []
    walk = _walk(root)
    for d, files in walk:
        names = set(files)
        for name in files:
            if not name.endswith(".manifest.json"):
                continue
            p = d / name
            manifest = _load_json(p, cat.problems)
            out_path = _output_of(manifest, d, name)
            claimed.add(p)
            if out_path.name not in names:
                cat.problems.append(f"{p}: manifest without its output {out_path.name}")
                continue
            claimed.add(out_path)
            kind = kind_of(_stage_names(manifest), _first_record(out_path))
            new(kind, out_path, root, manifest=manifest, manifest_path=p, related=_related(manifest, d))
        if "manifest.jsonl" in names and "stats.json" in names:
            rel = {k: d / f for k, f in (("samples", "samples.jsonl"), ("records", "retrieval.jsonl"))
                   if f in names}
            claimed.update({d / "manifest.jsonl", d / "stats.json"})  # samples/retrieval also list on their own
            new("augmentation", d / "manifest.jsonl", root, summary=_load_json(d / "stats.json", cat.problems),
                summary_path=d / "stats.json", related=rel)
    for d, files in walk:
        for name in files:
            p = d / name
            if not name.endswith(".summary.json") or p in claimed:
                continue
            target = cat.by_path(d / (name.removesuffix(".summary.json") + ".jsonl"))
            summary = _load_json(p, cat.problems)
            claimed.add(p)
            if target is not None and target.summary is None:
                target.summary, target.summary_path = summary, p
            elif summary is not None:
                new("summary", p, root, summary=summary, summary_path=p)
    for d, files in walk:
        for name in files:
            p = d / name
            if not name.endswith(".jsonl") or p in claimed:
                continue
            kind = kind_of([], _first_record(p))
            if kind == "scores":
                per_item.append(p)
            new(kind, p, root)
    for p in per_item:  # `P.<scorer>.jsonl` holds the verdicts on the predictions P.jsonl beside it
        owner = next((o for o in cat.outputs if o.kind in ("predictions", "agent") and o.path.parent == p.parent
                      and p.name.startswith(o.path.stem + ".")), None)
        if owner is not None:
            owner.scores.append(p)
