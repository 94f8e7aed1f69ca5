"""IVR-12: the 12-dimension rubric judge for interleaved text+image answers (seed 001 §3.3, §4.1).

Twelve 1–5 dimensions in three groups — content (judged from the answer text and the short
reference), presentation (the text), image (the query image, every embedded image and the text) —
and two hard gates: the answer addresses the pictured subject (a model call with the query image and
the text) and every image tag resolves (rules). The rubric is a versioned data file
(`rubrics/ivr12.toml`, a reconstruction: the paper's Appendix E is not in our copy) that marks, entry
by entry, what is the paper's (`source = "paper"`, with the section naming it: eight of the twelve
dimensions' names, the groups) and what is kbvqa's (four dimension names, both gates, the `floor`
policy, every criterion, and the group sizes: content 6, presentation 3, image 3, kbvqa's reading of
Table 3, whose group gaps give its overall gap only with six content dimensions — the arithmetic is
in the file's [grouping]); its sha256 and grouping (`Rubric.describe`) go into every verdict's
result line, the manifest and the summary, and the summary carries each entry's source.

How it fails, deliberately unlike the rubric judges users complain about (MMDR-Bench's mid-range
defaults, MM-Vet's 0, WildVision's tie): one strict-JSON call per group (and one for the gate) per
judge and repeat; an unparseable reply, a missing or unexpected dimension, a score that is not an
integer in 1–5 or a missing rationale makes the item `invalid` with that reason (a runner invalid
line, sent again on `--resume`); a failed call makes it `error`. Neither is ever a number. An answer
without images gets `n/a` for the image group: excluded from the means and counted.

Gated and ungated means are both reported. Gating policy `floor` (kbvqa's, the rubric's `[gating]`):
an item that fails a gate that was evaluated scores 1 on every dimension that applies to it; an item
with no answer at all fails "addresses the pictured subject" by rule (recorded as decided by rule,
not by a model). Means are per dimension over the items that have a score (the denominator printed
beside each). Aggregates never stand on stand-ins: a group mean exists only when every dimension of
the group was judged by a model, the overall only when all twelve were — per item, and in the
summary over a complete run (no invalid or error item) — else it is null with the reason.

With no judge model the embedded default measures what rules can — the tags gate, non-redundancy
(perceptual-hash distance), visual quality (resolution and Laplacian sharpness), conciseness (length
against the short reference) — labelled as rule measures (`measured_by: rule`), kbvqa's stand-ins
that are shown apart and enter no group or overall mean; every other dimension is
`n/a (needs a judge model)`.

`--predictions` may be agent predictions (runner lines of Prediction.record(): tags checked against
`meta.provenance`) or the NoteVQA references themselves (`reference.text` with `candidate_images`
tags resolved against `reference.images`): both are rendered the same way (`[Image N]` markers) and
judged with the same prompts.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import re
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from pydantic import Field

from kbvqa.data.images import ImageRefError, open_image, resolve_image
from kbvqa.data.jsonl import read_jsonl
from kbvqa.data.notevqa import looks_like_notevqa, reference_tags, sample_from_notevqa
from kbvqa.evaluate import METRICS
from kbvqa.evaluate.io import ScoreInputError
from kbvqa.models.jsonx import extract_json
from kbvqa.models.prompts import Prompt
from kbvqa.models.prompts.ivr12 import GROUP_PROMPTS
from kbvqa.models.replies import placeholder_reason
from kbvqa.models.result import ModelCallError, rejected
from kbvqa.runner import Context, Invalid, Stage, StageConfig
from kbvqa.runner.job import Job
from kbvqa.stages import register_stage
from kbvqa.stages.agent.tags import strip_tags

__all__ = ["GROUPS", "Rubric", "RubricError", "load_rubric", "parse_verdict", "render_agent_answer",
           "render_reference", "build_records", "IVR12Config", "IVR12Stage", "ivr12_job", "summarize",
           "compare_summaries", "normalize_summary", "aggregate_means", "item_aggregates", "check_resumable",
           "text_length", "SOURCES", "ENTRY_SOURCES"]

GROUPS = ("content", "presentation", "image")
SOURCES = ("auto", "predictions", "references")
RULE_DIMENSIONS = ("non_redundancy", "visual_quality", "conciseness")
RULE_GATES = ("tags_resolve",)
#: why a dimension has no score (counted per reason in the summary)
NA_REASONS = {"no_images": "n/a (no images)", "needs_judge": "n/a (needs a judge model)",
              "no_answer": "n/a (no answer)", "not_local": "n/a (image not a local file)"}
_RUBRIC_RESOURCE = "rubrics/ivr12.toml"


# ------------------------------------------------------------------------------------------ rubric


class RubricError(ValueError):
    """The rubric file is unusable; the message names the file and the field."""


#: where a rubric entry comes from: the paper (with the section that names it), kbvqa's
#: reconstruction, or a user's own edit
ENTRY_SOURCES = ("paper", "kbvqa", "user")


@dataclass(frozen=True)
class Origin:
    """Where one rubric entry comes from (`source`), the section of the paper that names it
    (`paper_ref`, required for `paper`) and what the paper does or does not say (`note`)."""

    source: str
    paper_ref: str = ""
    note: str = ""

    def describe(self) -> dict[str, str]:
        return {"source": self.source, **({"paper_ref": self.paper_ref} if self.paper_ref else {}),
                **({"note": self.note} if self.note else {})}


@dataclass(frozen=True)
class Dimension:
    key: str
    group: str
    title: str
    criterion: str
    anchors: tuple[tuple[int, str], ...]  # ((1, text), (3, text), (5, text))
    origin: Origin = Origin("kbvqa")
    group_origin: Origin | None = None  # who put it in its group, where the paper does not say (`group_source`)


@dataclass(frozen=True)
class GateSpec:
    key: str
    title: str
    judged_by: str  # model | rules
    criterion: str
    origin: Origin = Origin("kbvqa")


@dataclass(frozen=True)
class Rubric:
    """A loaded rubric. `sha256` is over the file's bytes: any edit changes it."""

    name: str
    version: str
    sha256: str
    path: str
    groups: tuple[tuple[str, str], ...]  # (key, title)
    dimensions: tuple[Dimension, ...]
    gates: tuple[GateSpec, ...]
    floor: int
    scale: tuple[int, int]
    rules: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    reconstruction: str = ""  # the file's own statement of where its criteria come from
    group_origins: Mapping[str, Origin] = field(default_factory=dict)
    gating_origin: Origin = Origin("kbvqa")
    file_origins: Mapping[str, Origin] = field(default_factory=dict)  # [provenance]: scale, criteria, rules
    grouping_origin: Origin | None = None  # [grouping]: why the groups have the sizes they have

    @property
    def tag(self) -> str:
        """`name@version:sha12`, what provenance records next to the prompt id."""
        return f"{self.name}@{self.version}:{self.sha256[:12]}"

    def describe(self) -> dict[str, Any]:
        """What results lines, summaries and manifests name: the file and its grouping."""
        return {"name": self.name, "version": self.version, "sha256": self.sha256, "path": self.path,
                **({"reconstruction": self.reconstruction} if self.reconstruction else {}),
                "grouping": self.grouping()}

    def grouping(self) -> dict[str, Any]:
        """Which dimensions each group holds (a user's rubric may group differently), the sizes as
        `n/n/n` and, where the file says, where that grouping comes from ([grouping])."""
        keys = {g: self.keys(g) for g, _ in self.groups}
        return {"sizes": "/".join(str(len(v)) for v in keys.values()), "groups": keys,
                **(self.grouping_origin.describe() if self.grouping_origin is not None else {})}

    def dims(self, group: str) -> list[Dimension]:
        return [d for d in self.dimensions if d.group == group]

    def provenance(self) -> dict[str, Any]:
        """Entry by entry, what is the paper's and what is kbvqa's (or a user's): the summary's
        `provenance`, so a table can say which dimension names a reader will find in the paper."""
        from_paper = [d.key for d in self.dimensions if d.origin.source == "paper"]
        return {"dimension_names_from_paper": f"{len(from_paper)} of {len(self.dimensions)}",
                "groups": {g: o.describe() for g, o in self.group_origins.items()},
                "gates": {g.key: g.origin.describe() for g in self.gates},
                "gating": {"policy": "floor", **self.gating_origin.describe()},
                **{k: o.describe() for k, o in self.file_origins.items()}}

    def model_gates(self) -> list[GateSpec]:
        return [g for g in self.gates if g.judged_by == "model"]

    def prompt_version(self, prompt: Prompt) -> str:
        return f"{prompt.id}+{self.tag}"

    def criteria(self, group: str) -> str:
        """The group's criteria with their anchors, as the judge reads them."""
        if group == "gate":
            return "\n".join(f"- {g.key} ({g.title}): {g.criterion}" for g in self.model_gates())
        lines = []
        for d in self.dims(group):
            lines.append(f"- {d.key} ({d.title}): {d.criterion}")
            lines += [f"    {k} = {text}" for k, text in d.anchors]
        return "\n".join(lines)

    def keys(self, group: str) -> list[str]:
        return [g.key for g in self.model_gates()] if group == "gate" else [d.key for d in self.dims(group)]

    def reply_template(self, group: str) -> str:
        lo, hi = self.scale
        value = '"pass": <true|false>' if group == "gate" else f'"score": <integer {lo}-{hi}>'
        return "{" + ", ".join(f'"{k}": {{{value}, "rationale": "<one line>"}}' for k in self.keys(group)) + "}"

    def reply_schema(self, group: str) -> dict[str, Any]:
        """The JSON schema sent as response_format (servers that support it constrain the reply)."""
        lo, hi = self.scale
        value = {"type": "boolean"} if group == "gate" else {"type": "integer", "enum": list(range(lo, hi + 1))}
        vkey = "pass" if group == "gate" else "score"
        one = {"type": "object", "properties": {vkey: value, "rationale": {"type": "string"}},
               "required": [vkey, "rationale"], "additionalProperties": False}
        keys = self.keys(group)
        return {"name": f"ivr12_{group}", "schema": {"type": "object", "properties": {k: one for k in keys},
                                                      "required": keys, "additionalProperties": False}}


def _need(obj: Mapping[str, Any], key: str, typ: type | tuple[type, ...], where: str, path: str) -> Any:
    v = obj.get(key)
    if not isinstance(v, typ) or (isinstance(v, str) and not v.strip()):
        raise RubricError(f"{path}: {where}{key}: required, a non-empty {getattr(typ, '__name__', typ)}; got {v!r}")
    return v


def _origin(obj: Mapping[str, Any], at: str, where: str) -> Origin:
    """An entry's `source` (paper | kbvqa | user) and, for the paper's, the `paper_ref` naming it."""
    src = obj.get("source")
    if src not in ENTRY_SOURCES:
        raise RubricError(f"{where}: {at}source: say where this entry comes from, one of {list(ENTRY_SOURCES)}; "
                          f"got {src!r}")
    ref, note = obj.get("paper_ref", ""), obj.get("note", "")
    if not isinstance(ref, str) or not isinstance(note, str):
        raise RubricError(f"{where}: {at}paper_ref / note: must be strings")
    if src == "paper" and not ref.strip():
        raise RubricError(f"{where}: {at}paper_ref: an entry from the paper names the section that gives it")
    return Origin(src, ref.strip(), " ".join(note.split()))


def load_rubric(path: str | Path | None = None) -> Rubric:
    """The packaged rubric (`path` None) or a user's copy, checked: the three groups with at least one
    dimension each, unique snake_case keys, non-empty 1/3/5 anchors, gates judged by `model` or by a
    known rule, rule settings for the dimensions rules measure, and where every group, dimension and
    gate and the gating policy come from (`source`, `paper_ref`). Raises RubricError naming file and field."""
    if path is None:
        res = resources.files("kbvqa.evaluate").joinpath(_RUBRIC_RESOURCE)
        raw, where = res.read_bytes(), f"kbvqa/evaluate/{_RUBRIC_RESOURCE}"
    else:
        p = Path(path)
        if not p.is_file():
            raise RubricError(f"{p}: rubric file not found")
        raw, where = p.read_bytes(), str(p)
    try:
        doc = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RubricError(f"{where}: not valid UTF-8 TOML: {exc}") from None
    name = _need(doc, "name", str, "", where)
    version = _need(doc, "version", str, "", where)
    scale = doc.get("scale", [1, 5])
    if scale != [1, 5]:
        raise RubricError(f"{where}: scale: IVR-12 scores are 1-5 integers; got {scale!r}")
    groups_doc = _need(doc, "groups", dict, "", where)
    if sorted(groups_doc) != sorted(GROUPS):
        raise RubricError(f"{where}: groups: must be exactly {list(GROUPS)}, got {sorted(groups_doc)}")
    groups = tuple((g, str(groups_doc[g].get("title") or g)) for g in GROUPS)
    group_origins = {g: _origin(groups_doc[g], f"groups.{g}.", where) for g in GROUPS}
    dims: list[Dimension] = []
    seen: set[str] = set()
    for i, d in enumerate(_need(doc, "dimensions", list, "", where)):
        at = f"dimensions[{i}]."
        key = _need(d, "key", str, at, where)
        if not re.fullmatch(r"[a-z][a-z0-9_]*", key) or key in seen:
            raise RubricError(f"{where}: {at}key: {key!r} must be a unique snake_case name")
        seen.add(key)
        group = _need(d, "group", str, at, where)
        if group not in GROUPS:
            raise RubricError(f"{where}: {at}group: {group!r} is not one of {list(GROUPS)}")
        anchors = _need(d, "anchors", dict, at, where)
        if sorted(anchors) != ["1", "3", "5"] or not all(isinstance(v, str) and v.strip() for v in anchors.values()):
            raise RubricError(f"{where}: {at}anchors: needs non-empty texts for exactly 1, 3 and 5; got keys "
                              f"{sorted(anchors)}")
        placed = None
        if "group_source" in d:
            placed = _origin({"source": d["group_source"], "note": d.get("group_note", "")}, f"{at}group_", where)
        dims.append(Dimension(key, group, str(d.get("title") or key), _need(d, "criterion", str, at, where),
                              tuple((int(k), anchors[k].strip()) for k in ("1", "3", "5")), _origin(d, at, where),
                              placed))
    for g in GROUPS:
        if not any(d.group == g for d in dims):
            raise RubricError(f"{where}: dimensions: group {g!r} has no dimension")
    grouping_origin = _grouping(doc, dims, where)
    gates: list[GateSpec] = []
    for i, g in enumerate(doc.get("gates") or []):
        at = f"gates[{i}]."
        key = _need(g, "key", str, at, where)
        if key in seen:
            raise RubricError(f"{where}: {at}key: {key!r} is already used")
        seen.add(key)
        by = _need(g, "judged_by", str, at, where)
        if by not in ("model", "rules") or (by == "rules" and key not in RULE_GATES):
            raise RubricError(f"{where}: {at}judged_by: {by!r}; a gate is judged by 'model' or is one of the "
                              f"rule gates {list(RULE_GATES)}")
        gates.append(GateSpec(key, str(g.get("title") or key), by, _need(g, "criterion", str, at, where),
                              _origin(g, at, where)))
    gating = doc.get("gating") or {}
    if gating.get("policy", "floor") != "floor":
        raise RubricError(f"{where}: gating.policy: only 'floor' is implemented, got {gating.get('policy')!r}")
    floor = gating.get("floor", 1)
    if floor not in range(1, 6):
        raise RubricError(f"{where}: gating.floor: must be an integer 1-5, got {floor!r}")
    gating_origin = _origin(gating, "gating.", where)
    file_origins = {k: _origin(v if isinstance(v, dict) else {}, f"provenance.{k}.", where)
                    for k, v in (doc.get("provenance") or {}).items()}
    rules = doc.get("rules") or {}
    for k in rules:
        if k not in RULE_DIMENSIONS or k not in seen:
            raise RubricError(f"{where}: rules.{k}: rules measure only {list(RULE_DIMENSIONS)} (and the "
                              "dimension must be in the rubric)")
    _check_rules(rules, where)
    return Rubric(name, version, hashlib.sha256(raw).hexdigest(), where, groups, tuple(dims), tuple(gates), floor,
                  (1, 5), rules, str(doc.get("reconstruction") or ""), group_origins, gating_origin, file_origins,
                  grouping_origin)


def _grouping(doc: Mapping[str, Any], dims: Sequence[Dimension], where: str) -> Origin | None:
    """The optional [grouping] table: where the group sizes come from; its `sizes`, when given, must
    be the sizes the dimensions have (so a note's arithmetic cannot drift from the file)."""
    gdoc = doc.get("grouping")
    if gdoc is None:
        return None
    if not isinstance(gdoc, dict):
        raise RubricError(f"{where}: grouping: must be a table")
    sizes = gdoc.get("sizes")
    if sizes is not None:
        have = {g: sum(1 for d in dims if d.group == g) for g in GROUPS}
        if not isinstance(sizes, dict) or {g: sizes.get(g) for g in GROUPS} != have:
            raise RubricError(f"{where}: grouping.sizes: says {sizes!r} but the dimensions give {have}")
    return _origin(gdoc, "grouping.", where)


def _check_rules(rules: Mapping[str, Any], where: str) -> None:
    spec = {"non_redundancy": ("duplicate_bits", "distinct_bits"),
            "visual_quality": ("resolution_steps", "sharpness_side", "sharpness_steps"),
            "conciseness": ("min_reference_words", "ratio_steps")}
    for dim, keys in spec.items():
        if dim in rules:
            missing = [k for k in keys if k not in rules[dim]]
            if missing:
                raise RubricError(f"{where}: rules.{dim}: missing {missing}")
            for k in keys:
                if k.endswith("_steps") and (not isinstance(rules[dim][k], list) or len(rules[dim][k]) != 4
                                             or rules[dim][k] != sorted(rules[dim][k])):
                    raise RubricError(f"{where}: rules.{dim}.{k}: four ascending thresholds (for scores 2-5)")


# --------------------------------------------------------------------------------------- rendering

_TAG = re.compile(r"<image>(.*?)</image>", re.S)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def text_length(text: str | None) -> int:
    """Words of `text` with image tags removed; each CJK character counts as a word (NoteVQA's
    community text is mostly Chinese, which has no spaces)."""
    plain = strip_tags(text or "")
    return len(_CJK.findall(plain)) + len(_CJK.sub(" ", plain).split())


def _tail(text: str) -> str:
    """An unclosed `<image>` at the end is a malformed tag: shown as unresolved."""
    i = text.find("<image>")
    return text if i < 0 else text[:i] + "[unresolved image]"


def render_agent_answer(answer: str, provenance: Mapping[str, Any] | None) -> tuple[str, list[dict[str, Any]],
                                                                                    dict[str, Any]]:
    """(text with [Image N] markers, embedded images, tag report) for an agent answer.

    `provenance` is the answer's `meta.provenance` (kbvqa.stages.agent.tags.validate_tags): its
    `resolved` entries are the valid tags in order, so the tags are walked in order and each one
    that matches the next resolved entry (same query and idx) becomes [Image N]; any other tag is
    [unresolved image]. Without provenance, tags cannot be traced: the gate fails if there are any."""
    resolved = list((provenance or {}).get("resolved") or [])
    embedded: list[dict[str, Any]] = []
    pos = 0

    def sub(m: re.Match[str]) -> str:
        nonlocal pos
        try:
            obj = json.loads(m.group(1))
        except ValueError:
            obj = None
        if pos < len(resolved) and isinstance(obj, dict) and obj.get("query") == resolved[pos].get("query") \
                and obj.get("idx") == resolved[pos].get("idx"):
            r = resolved[pos]
            pos += 1
            embedded.append({"n": len(embedded) + 1, "image": r.get("image"), "sha256": r.get("sha256"),
                             "url": r.get("url")})
            return f"[Image {len(embedded)}]"
        return "[unresolved image]"

    text = _tail(_TAG.sub(sub, answer))
    n_tags = answer.count("<image>")
    if provenance is None:
        report = {"checked_by": "none", "tags": n_tags, "valid": 0,
                  "violations": [{"kind": "no_provenance"}] if n_tags else []}
    else:
        report = {"checked_by": "meta.provenance", "tags": int(provenance.get("tags", n_tags) or 0),
                  "valid": int(provenance.get("valid", len(resolved)) or 0),
                  "violations": list(provenance.get("violations") or [])}
        if len(embedded) != len(resolved):  # provenance that does not match the text it claims to describe
            report["violations"].append({"kind": "provenance_mismatch",
                                         "detail": f"{len(resolved)} resolved tags, {len(embedded)} found in order"})
    return text, embedded, report


def render_reference(text: str, images: Sequence[Mapping[str, Any]], root: Path | None, *,
                     locate: Any = None) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """(text with [Image N] markers, embedded images, tag report) for a NoteVQA interleaved reference:
    each `<image>{"candidate_images": N}</image>` resolves to the N-th (1-based) of `images`, whose
    file must exist (under `root` when relative) and match its sha256 when one is given."""
    tags, violations = reference_tags(text, len(images))  # malformed / out of range / duplicate
    embedded: list[dict[str, Any]] = []
    parts: list[str] = []
    pos = 0

    def resolve(t: Any) -> str | None:
        entry = images[t.index - 1]
        ref = entry.get("path") or entry.get("url") or ""
        try:
            where = (locate or _locate)(str(ref), root)
        except (ImageRefError, ValueError) as exc:
            violations.append({"kind": "missing_image", "tag": t.raw, "detail": str(exc)})
            return None
        if not _is_url(where):
            p = Path(where)
            if not p.is_file():
                violations.append({"kind": "missing_image", "tag": t.raw, "detail": f"image not found: {p}"})
                return None
            if entry.get("sha256") and hashlib.sha256(p.read_bytes()).hexdigest() != entry["sha256"]:
                violations.append({"kind": "sha256_mismatch", "tag": t.raw, "detail": str(p)})
                return None
        embedded.append({"n": len(embedded) + 1, "image": where, "sha256": entry.get("sha256"),
                         "url": entry.get("source_url")})
        return f"[Image {len(embedded)}]"

    for t in tags:
        parts += [text[pos:t.start], resolve(t) or "[unresolved image]"]
        pos = t.end
    parts.append(text[pos:])
    rendered = _tail(_TAG.sub("[unresolved image]", "".join(parts)))  # what the parser refused stays visible
    return rendered, embedded, {"checked_by": "reference.images", "tags": text.count("<image>"),
                                "valid": len(embedded), "violations": violations}


def _is_url(ref: str) -> bool:
    return bool(re.match(r"^(https?|data):", ref))


def _locate(ref: str, root: Path | None) -> str:
    """A URL as it is; a file reference as an absolute path under `root` (the one resolver, so
    `..` cannot climb out of it). A file that does not exist is returned as its would-be path: the
    stage reports it as an error for that item, not for the whole run."""
    if _is_url(ref):
        return ref
    try:
        return str(resolve_image(ref, root))
    except FileNotFoundError:
        p = Path(ref)
        return str(p if p.is_absolute() or root is None else (Path(root) / p).resolve())


# ------------------------------------------------------------------------------------ the records


def _short_reference(answers: Sequence[str]) -> str:
    texts = [a for a in answers if a and a.strip()]
    return texts[0] if len(texts) == 1 else ("any one of: " + " | ".join(texts) if texts else "")


def detect_source(predictions: str | Path) -> str:
    """'references' when the file's first line is a NoteVQA line with an interleaved `reference`."""
    for _, obj in read_jsonl(predictions):
        return "references" if looks_like_notevqa(obj) and isinstance(obj.get("reference"), dict) else "predictions"
    return "predictions"


@dataclass
class Inputs:
    """What `build_records` read: the records to judge and the accounting of everything else."""

    records: list[dict[str, Any]]
    source: str
    n_unknown_ids: int = 0
    n_duplicate_ids: int = 0
    producers: Counter = field(default_factory=Counter)  # "backend:model" of the answers' producers


def build_records(predictions: str | Path, samples: Iterable[Any], *, source: str = "auto",
                  samples_path: str | Path = "", image_root: str | Path | None = None) -> Inputs:
    """One record per sample (in sample order): the rendered answer, its embedded images, the tag
    report, the query images and the short reference. A sample without a usable answer is a record
    with `no_answer` = why (missing line, null answer, a failed prediction line, no reference): it is
    counted, never dropped. Relative image paths: query images under `image_root` (default: the
    samples file's folder), answer and reference images under the predictions file's folder, where
    kbvqa keeps them (the agent's `OUT.artifacts/`)."""
    predictions = Path(predictions)
    src = detect_source(predictions) if source == "auto" else source
    if src not in ("predictions", "references"):
        raise ValueError(f"source must be one of {SOURCES}, not {source!r}")
    qroot = Path(image_root) if image_root is not None else (Path(samples_path).parent if samples_path else None)
    aroot = predictions.parent
    lines: dict[str, tuple[int, dict[str, Any]]] = {}
    dup = 0
    for ln, obj in read_jsonl(predictions):
        rid = obj.get("id", obj.get("sample_id", obj.get("data_id")))
        if not isinstance(rid, str) or not rid:
            raise ScoreInputError(predictions, ln, "id", f"must be a non-empty string, got {rid!r}")
        dup += rid in lines
        lines[rid] = (ln, obj)
    inputs = Inputs([], src, n_duplicate_ids=dup)
    locate = functools.lru_cache(maxsize=None)(_locate)  # one resolution per distinct image in this build
    known: set[str] = set()
    for s in samples:
        known.add(s.id)
        meta = s.meta or {}
        bad_image = None  # an image reference refused (outside its root...): this item's error, not the file's
        try:
            query = [locate(str(q), qroot) for q in s.images]
        except ImageRefError as exc:
            query, bad_image = [], f"query image of sample {s.id!r}: {exc}"
        rec: dict[str, Any] = {"id": s.id, "source": src, "question": s.question,
                               "short_reference": _short_reference(s.answer_texts),
                               "category": meta.get("category"), "intent": meta.get("intent"),
                               "query_images": query, "answer": None, "text": None, "embedded": [],
                               "tags": {"checked_by": "none", "tags": 0, "valid": 0, "violations": []},
                               "no_answer": None, "producer": None}
        got = lines.get(s.id)
        if got is None:
            rec["no_answer"] = "missing: no line for this id"
        else:
            ln, obj = got
            try:
                _fill(rec, obj, src, aroot, predictions, ln, locate)
            except ImageRefError as exc:
                bad_image = bad_image or f"{predictions}:{ln}: {exc}"
        if bad_image:
            rec["bad_image"] = bad_image
        rec["words"] = text_length(rec["text"])
        rec["reference_words"] = text_length(rec["short_reference"])
        inputs.records.append(rec)
        if rec["producer"]:
            inputs.producers[rec["producer"]] += 1
    inputs.n_unknown_ids = sum(1 for rid in lines if rid not in known)
    return inputs


def _fill(rec: dict[str, Any], obj: dict[str, Any], src: str, root: Path, path: Path, ln: int,
          locate: Any = _locate) -> None:
    if src == "references":
        sample = sample_from_notevqa(obj, file=path, row=ln)
        ref = sample.meta.get("reference")
        if not isinstance(ref, dict) or not (ref.get("text") or "").strip():
            rec["no_answer"] = "no interleaved reference on this line"
            return
        rec["answer"] = ref["text"]
        rec["text"], rec["embedded"], rec["tags"] = render_reference(ref["text"], ref.get("images") or [], root,
                                                                     locate=locate)
        rec["producer"] = "reference"
        return
    status = obj.get("status", "ok")
    if status != "ok":
        rec["no_answer"] = f"prediction line is {status}: {obj.get('reason') or 'no reason given'}"
        return
    answer = obj.get("answer", obj.get("prediction"))
    if answer is not None and not isinstance(answer, str):
        raise ScoreInputError(path, ln, "answer", f"must be a string or null, got {type(answer).__name__}")
    if not answer or not answer.strip():
        rec["no_answer"] = "the system gave no answer"
        return
    prov = (obj.get("meta") or {}).get("provenance")
    rec["answer"] = answer
    rec["text"], embedded, rec["tags"] = render_agent_answer(answer, prov if isinstance(prov, dict) else None)
    rec["embedded"] = [{**e, "image": locate(str(e["image"]), root)} for e in embedded if e.get("image")]
    producer = obj.get("producer") or {}
    if isinstance(producer, dict) and producer.get("model"):
        rec["producer"] = f"{producer.get('backend', '?')}:{producer['model']}"


def input_hash(record: Mapping[str, Any], settings: Mapping[str, Any]) -> str:
    """What a verdict depends on: the judged fields, the rubric and the judge settings."""
    keys = ("question", "short_reference", "query_images", "text", "embedded", "tags", "no_answer")
    payload = {"record": {k: record.get(k) for k in keys}, "settings": settings}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def check_resumable(out: Path, records: Sequence[Mapping[str, Any]]) -> None:
    """A verdict in the journal is reused only for the same inputs, rubric and judges; a journal
    written otherwise is refused (file, line, id), never mixed in."""
    if not Path(out).is_file():
        return
    done: dict[str, tuple[int, Any]] = {}
    with open(out, "rb") as fh:
        for ln, raw in enumerate(fh, 1):
            try:
                obj = json.loads(raw)
            except ValueError:  # a line cut off by a crash: the runner repairs it
                continue
            if isinstance(obj, dict) and isinstance(obj.get("id"), str):
                if obj.get("status") == "ok":
                    done[obj["id"]] = (ln, obj.get("ivr12_input"))
                else:
                    done.pop(obj["id"], None)
    for rec in records:
        if rec["id"] in done and done[rec["id"]][1] != rec["ivr12_input"]:
            raise ScoreInputError(out, done[rec["id"]][0], "ivr12_input",
                                  f"id {rec['id']!r} was judged with other inputs, another rubric or other "
                                  "judges; run with --no-resume (the old journal is moved aside) or choose "
                                  "another --out")


# -------------------------------------------------------------------------------------- verdicts


def parse_verdict(text: str | None, keys: Sequence[str], *, what: str, gate: bool = False,
                  scale: tuple[int, int] = (1, 5)) -> dict[str, tuple[Any, str]]:
    """{key: (score or pass, one-line rationale)} from a reply that must be exactly the JSON object
    (optionally in one ``` fence). Anything else raises Invalid with the reason: not JSON, not an
    object, a missing or unexpected key, a score that is not an integer in `scale`, a pass that is
    not a boolean, an empty rationale or one copied from the reply template (kbvqa.models.replies'
    placeholder check). Never a default."""
    try:
        obj = extract_json(text, strict=True)
    except ValueError as exc:
        raise Invalid(f"{what}: not the JSON object asked for ({exc})") from None
    if not isinstance(obj, dict):
        raise Invalid(f"{what}: the reply is a JSON {type(obj).__name__}, not an object")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise Invalid(f"{what}: missing {'gate' if gate else 'dimension'}(s) {missing}")
    extra = [k for k in obj if k not in keys]
    if extra:
        raise Invalid(f"{what}: unexpected key(s) {extra}")
    vkey = "pass" if gate else "score"
    out: dict[str, tuple[Any, str]] = {}
    for k in keys:
        v = obj[k]
        if not isinstance(v, dict) or sorted(v) != sorted((vkey, "rationale")):
            raise Invalid(f"{what}: {k!r} must be {{{vkey!r}, 'rationale'}}, got {json.dumps(v)[:80]}")
        val, why = v[vkey], v["rationale"]
        if gate and not isinstance(val, bool):
            raise Invalid(f"{what}: {k!r} pass {val!r} is not true or false")
        if not gate:
            if isinstance(val, bool) or not isinstance(val, int):
                raise Invalid(f"{what}: {k!r} score {val!r} is not an integer")
            if not scale[0] <= val <= scale[1]:
                raise Invalid(f"{what}: {k!r} score {val} is outside {scale[0]}-{scale[1]}")
        if not isinstance(why, str) or not why.strip():
            raise Invalid(f"{what}: {k!r} has no rationale")
        copied = placeholder_reason(why, ("one line",))
        if copied:
            raise Invalid(f"{what}: {k!r} rationale {why!r} is {copied}")
        out[k] = (val, " ".join(why.split()))
    return out


# ------------------------------------------------------------------------------------------ rules


@functools.lru_cache(maxsize=4096)
def _facts(path: str, mtime_ns: int, size: int, side: int) -> tuple[int, int, float, int]:
    """(width, height, Laplacian variance at `side`, phash) of one image file; keyed on its stat."""
    import numpy as np  # numpy and Pillow only when images are judged
    from PIL import Image

    from kbvqa.data import phash as ph

    img = open_image(path, mode="L")
    w, h = img.size
    s = side / min(w, h)
    small = img.resize((max(3, round(w * s)), max(3, round(h * s))), Image.Resampling.BILINEAR)
    a = np.asarray(small, dtype=np.float32)
    lap = a[1:-1, :-2] + a[1:-1, 2:] + a[:-2, 1:-1] + a[2:, 1:-1] - 4 * a[1:-1, 1:-1]
    return w, h, float(lap.var()), ph.phash(img)


def image_facts(path: str, side: int = 256) -> tuple[int, int, float, int]:
    """Cached facts of a local image (FileNotFoundError / BadImage when it is not one)."""
    st = Path(path).stat()
    return _facts(str(path), st.st_mtime_ns, st.st_size, side)


def _steps(value: float, steps: Sequence[float]) -> int:
    return 1 + sum(1 for s in steps if value >= s)


def measure_rules(record: Mapping[str, Any], rubric: Rubric) -> dict[str, dict[str, Any]]:
    """The rule-measured dimensions of one record: {dim: {score, na, detail}}. A missing or
    undecodable local image raises (the item becomes an error line naming it), never a score."""
    from kbvqa.data import phash as ph  # numpy only when a rubric is measured

    out: dict[str, dict[str, Any]] = {}
    rules = rubric.rules
    if record.get("no_answer"):
        return {d: {"score": None, "na": "no_answer"} for d in rules}
    emb = [e["image"] for e in record.get("embedded") or []]
    query = list(record.get("query_images") or [])
    if "conciseness" in rules:
        r = rules["conciseness"]
        yard = max(int(record.get("reference_words") or 0), int(r["min_reference_words"]))
        ratio = int(record.get("words") or 0) / yard
        out["conciseness"] = {"score": 5 - sum(1 for s in r["ratio_steps"] if ratio > s), "na": None,
                              "detail": {"words": record.get("words"), "yardstick_words": yard,
                                         "ratio": round(ratio, 3)}}
    image_dims = [d for d in ("non_redundancy", "visual_quality") if d in rules]
    if not image_dims:
        return out
    if not emb:
        out.update({d: {"score": None, "na": "no_images"} for d in image_dims})
        return out
    if any(_is_url(x) for x in [*emb, *query]):
        out.update({d: {"score": None, "na": "not_local"} for d in image_dims})
        return out
    side = int(rules.get("visual_quality", {}).get("sharpness_side", 256))
    for which, refs in (("embedded", emb), ("query", query)):
        for x in refs:
            if not Path(x).is_file():
                raise FileNotFoundError(f"{which} image not found: {x}")
    ef = [image_facts(x, side) for x in emb]
    qf = [image_facts(x, side) for x in query]
    if "visual_quality" in rules:
        r = rules["visual_quality"]
        per = [{"image": i + 1, "short_side": min(w, h), "sharpness": round(lv, 1),
                "score": min(_steps(min(w, h), r["resolution_steps"]), _steps(lv, r["sharpness_steps"]))}
               for i, (w, h, lv, _) in enumerate(ef)]
        out["visual_quality"] = {"score": min(p["score"] for p in per), "na": None, "detail": {"images": per}}
    if "non_redundancy" in rules:
        r = rules["non_redundancy"]
        pairs = [(ph.distance(ef[i][3], ef[j][3]), f"Image {i + 1}", f"Image {j + 1}")
                 for i in range(len(ef)) for j in range(i + 1, len(ef))]
        pairs += [(ph.distance(e[3], q[3]), f"Image {i + 1}", f"query image {k + 1}")
                  for i, e in enumerate(ef) for k, q in enumerate(qf)]
        if not pairs:  # one embedded image and no local query image: nothing to be redundant with
            out["non_redundancy"] = {"score": 5, "na": None, "detail": {"pairs": 0}}
        else:
            bits, a, b = min(pairs)
            v = ph.verdict(bits, near=int(r["duplicate_bits"]), distinct=int(r["distinct_bits"]))
            out["non_redundancy"] = {"score": {"duplicate": 1, "ambiguous": 3, "distinct": 5}[v], "na": None,
                                     "detail": {"closest_bits": bits, "closest_pair": [a, b], "verdict": v,
                                                "pairs": len(pairs)}}
    return out


def tags_gate(record: Mapping[str, Any]) -> dict[str, Any]:
    """Every image tag resolves: no violations and as many valid tags as tags (vacuously true for
    an answer without tags)."""
    t = record.get("tags") or {}
    ok = not t.get("violations") and int(t.get("valid") or 0) == int(t.get("tags") or 0)
    kinds = Counter(v.get("kind") for v in t.get("violations") or [])
    return {"label": "rules", "decided_by": "rule", "pass": ok,
            "reason": f"{t.get('valid', 0)} of {t.get('tags', 0)} tags resolve ({t.get('checked_by')})"
                      + ("; violations: " + ", ".join(f"{k} {n}" for k, n in kinds.items()) if kinds else "")}


# ------------------------------------------------------------------------------------------ stage


class IVR12Config(StageConfig):
    role: str = "judge"  # ctx.roles[role]: one client or a list (several judges); absent = rules mode
    rubric: str | None = None  # path of a rubric TOML; None = the packaged one
    repeats: int = Field(1, ge=1)  # calls per group per judge (agreement by Krippendorff's alpha)
    temperature: float = Field(0.0, ge=0)
    image_max_side: int = Field(768, ge=1)  # images are downscaled before they are sent


@functools.lru_cache(maxsize=512)
def _data_url(path: str, mtime_ns: int, size: int, max_side: int) -> str:
    from kbvqa.models.images import image_to_data_url

    return image_to_data_url(path, max_side=max_side)


def _image_input(ref: str, max_side: int) -> str:
    """A URL as it is; a local file as a data URL, encoded once per (file, size) in a run."""
    if _is_url(ref):
        return ref
    p = Path(ref)
    if not p.is_file():
        raise FileNotFoundError(f"image not found: {p}")
    st = p.stat()
    return _data_url(str(p), st.st_mtime_ns, st.st_size, max_side)


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _judged_mean(entries: Sequence[tuple[str, Mapping[str, Any], str]], value: str, what: str,
                 prefix: str = "") -> tuple[float | None, str | None]:
    """(mean, None) of `value` over `entries` — (key, entry with `measured_by`, why it has no judged
    value) — when every one was judged by a model; else (None, why not). A rule measure is a
    stand-in and an n/a is no score: neither enters an aggregate, so a partial mean is never shown."""
    judged, rule, absent = [], [], Counter()
    for key, e, why in entries:
        v = e.get(value)
        if e.get("measured_by") == "judge" and v is not None:
            judged.append(v)
        elif e.get("measured_by") == "rule":
            rule.append(key)
        else:
            absent[why] += 1
    if len(judged) == len(entries):
        return _mean(judged), None
    n = len(entries)
    parts = ([f"{len(rule)} of {n} dimensions measured by rules ({', '.join(rule)})"] if rule else []) + \
        [f"{k} of {n} {why}" for why, k in absent.items()]
    return None, f"{prefix}{', '.join(parts)}; no {what}"


def item_aggregates(dims: Mapping[str, Mapping[str, Any]], rubric: Rubric, *, mode: str,
                    no_answer: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """One item's group means and overall mean, ungated and gated: each only when every dimension in
    it was judged by a model for this item (an overall needs all twelve), else null with the reason."""
    prefix = "no answer: " if no_answer else ("rules mode: " if mode == "rules" else "")

    def entries(keys: Sequence[str]) -> list[tuple[str, Mapping[str, Any], str]]:
        return [(k, dims[k], f"without a judged score ({NA_REASONS.get(dims[k].get('na'), 'no score')})")
                for k in keys]

    def agg(keys: Sequence[str], what: str) -> dict[str, Any]:
        mean, why = _judged_mean(entries(keys), "score", what, prefix)
        gated, _ = _judged_mean(entries(keys), "gated", what, prefix)
        return {"mean": mean, "gated_mean": gated, **({"reason": why} if why else {})}

    groups = {g: agg([d.key for d in rubric.dims(g)], "group mean") for g, _ in rubric.groups}
    return groups, agg([d.key for d in rubric.dimensions], "overall")


@METRICS.register("ivr12", family="rubric",
                  help="IVR-12 rubric judge for interleaved answers: 12 dimensions 1-5, two gates (invalid and "
                       "error counted; n/a excluded and counted)")
@register_stage
class IVR12Stage(Stage):
    """One record (from `build_records`) in; the record plus `ivr12` (dimension scores with labels
    and rationales, gates, rule measurements, judge provenance, item means) out."""

    name = "ivr12"
    version = "1"
    config_model = IVR12Config
    prompts = tuple(GROUP_PROMPTS.values())

    def __init__(self, config: IVR12Config | None = None):
        super().__init__(config)
        self.rubric = rb = load_rubric(self.config.rubric)
        # per group, what every call of the run shares: criteria text, reply template and schema, prompt version
        self.frame = {g: (rb.criteria(g), rb.reply_template(g), rb.reply_schema(g), rb.prompt_version(p))
                      for g, p in GROUP_PROMPTS.items()}

    def prompt_versions(self) -> dict[str, str]:
        return {**{p.id: p.sha256 for p in self.prompts}, f"{self.rubric.name}.rubric@{self.rubric.version}":
                self.rubric.sha256}

    def judges(self, ctx: Context) -> list[Any]:
        j = ctx.roles.get(self.config.role)
        return [] if j is None else (list(j) if isinstance(j, list) else [j])

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        if record.get("bad_image"):  # refused per item (build_records), counted as this item's error
            raise ValueError(f"image reference refused: {record['bad_image']}")
        rb = self.rubric
        judges = self.judges(ctx)
        # image files are read in a worker thread; with a judge, the rule measurements (recorded beside
        # the verdict) run while the calls are in flight
        rules_task = asyncio.ensure_future(asyncio.to_thread(measure_rules, record, rb))
        gates: dict[str, dict[str, Any]] = {}
        for g in rb.gates:
            if g.judged_by == "rules":
                gates[g.key] = tags_gate(record)
            elif record.get("no_answer"):  # nothing for a model to look at: failed without a call, and said so
                gates[g.key] = {"label": "rules", "decided_by": "rule", "pass": False,
                                "reason": f"decided by rule: no answer ({record['no_answer']})"}
            else:
                gates[g.key] = {"label": "n/a", "decided_by": None, "pass": None, "reason": NA_REASONS["needs_judge"]}
        dims: dict[str, dict[str, Any]] = {}
        provenance: list[dict[str, Any]] = []
        if record.get("no_answer"):
            dims = {d.key: {"group": d.group, "label": "n/a", "score": None, "na": "no_answer"} for d in rb.dimensions}
        elif judges:
            async with _settled(rules_task):
                dims, judged_gates, provenance = await self._judge(record, ctx, judges)
            gates.update(judged_gates)
        rules = await rules_task
        if not judges and not record.get("no_answer"):
            for d in rb.dimensions:
                r = rules.get(d.key)
                if r is not None and r["score"] is not None:  # a stand-in for the dimension, never averaged
                    dims[d.key] = {"group": d.group, "label": "rules", "measured_by": "rule",
                                   "score": r["score"]}  # details: ivr12.rules
                else:
                    na = (r or {}).get("na") or ("no_images" if d.group == "image" and not record.get("embedded")
                                                 else "needs_judge")
                    dims[d.key] = {"group": d.group, "label": "n/a", "score": None, "na": na}
        self._gate(record, dims, gates, bool(judges))
        mode = "judge" if judges else "rules"
        groups, overall = item_aggregates(dims, rb, mode=mode, no_answer=record.get("no_answer"))
        return {**record, "ivr12": {
            "rubric": rb.describe(), "mode": mode, "dimensions": dims, "gates": gates,
            "gate_failed": any(g["pass"] is False for g in gates.values()),
            "mean": overall["mean"], "gated_mean": overall["gated_mean"],
            **({"mean_reason": overall["reason"]} if overall.get("reason") else {}),
            "groups": groups, "rules": rules, "judges": provenance}}

    def _gate(self, record: Mapping[str, Any], dims: dict[str, dict[str, Any]], gates: Mapping[str, Any],
              judged: bool) -> None:
        """`gated` per dimension: the floor when a gate failed, else the score. A dimension without a
        score joins the gated means only when the item has no answer (so abstaining is not rewarded)
        and the dimension is measurable in this mode and not an image dimension."""
        failed = any(g["pass"] is False for g in gates.values())
        for key, v in dims.items():
            if v["score"] is not None:
                v["gated"] = self.rubric.floor if failed else v["score"]
            elif (failed and v.get("na") == "no_answer" and v["group"] != "image"
                  and (judged or key in self.rubric.rules)):
                v["gated"] = self.rubric.floor
            else:
                v["gated"] = None

    def _images(self, record: Mapping[str, Any]) -> tuple[list[str], list[str]]:
        """The query and embedded images as the judge gets them (data URLs, URLs as they are)."""
        side = self.config.image_max_side
        return ([_image_input(q, side) for q in record["query_images"]],
                [_image_input(e["image"], side) for e in record["embedded"]])

    async def _judge(self, record: Mapping[str, Any], ctx: Context, judges: list[Any]) -> tuple[
            dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
        rb, cfg = self.rubric, self.config
        common = {"question": record["question"], "answer_raw": record["text"]}
        params: dict[str, Any] = {"temperature": cfg.temperature}

        def send(groups: list[str], messages: Mapping[str, dict[str, Any]]) -> tuple[list[tuple[int, int, str]], Any]:
            built = {g: GROUP_PROMPTS[g].messages(criteria_raw=self.frame[g][0], reply_raw=self.frame[g][1],
                                                  **messages[g]) for g in groups}

            async def call(j: int, r: int, g: str) -> Any:
                extra = {"seed": r} if cfg.repeats > 1 else {}  # distinct repeats (and cache keys) per seed
                return await judges[j].chat(built[g], schema=self.frame[g][2], prompt_version=self.frame[g][3],
                                            **params, **extra)

            slots = [(j, r, g) for j in range(len(judges)) for r in range(cfg.repeats) for g in groups]
            return slots, asyncio.gather(*(call(*x) for x in slots))

        # the text-only groups go out at once; the image groups once their pictures are encoded
        text_slots, text_calls = send(["content", "presentation"], {
            "content": dict(images=(), short_reference=record["short_reference"], **common),
            "presentation": dict(images=(), **common)})
        async with _settled(text_calls):
            query, emb = await asyncio.to_thread(self._images, record)
            groups = (["image"] if emb else []) + (["gate"] if rb.model_gates() else [])
            image_slots, image_calls = send(groups, {
                "image": dict(images=[*query, *emb], n_query=len(query), n_embedded=len(emb), **common),
                "gate": dict(images=query, **common)})
            image_results = await image_calls
        slots, results = text_slots + image_slots, [*(await text_calls), *image_results]
        groups = ["content", "presentation", *groups]
        names = [getattr(getattr(c, "provenance", None), "model", None) or f"#{j + 1}" for j, c in enumerate(judges)]
        errors, invalid = [], []
        parsed: dict[tuple[int, int, str], dict[str, tuple[Any, str]]] = {}
        for (j, r, g), res in zip(slots, results, strict=True):
            ctx.add_usage(getattr(res, "usage", None))
            what = f"judge {names[j]}" + (f" repeat {r + 1}" if cfg.repeats > 1 else "") + f", {g} verdict"
            if getattr(res, "status", "error") == "error":
                errors.append(f"{what}: call failed: {getattr(res, 'reason', '') or 'no reason given'}")
                continue
            if getattr(res, "truncated", False):
                invalid.append(str(rejected(res, f"{what}: reply truncated (finish_reason=length; raise max_tokens)")))
                continue
            try:
                parsed[(j, r, g)] = parse_verdict(getattr(res, "text", None), rb.keys(g), what=what,
                                                  gate=g == "gate", scale=rb.scale)
            except Invalid as exc:
                invalid.append(str(rejected(res, str(exc))))  # refused after it parsed: not served again
        if errors:
            raise ModelCallError("; ".join(errors + invalid))
        if invalid:
            raise Invalid("; ".join(invalid))
        n_j = len(judges)
        dims: dict[str, dict[str, Any]] = {}
        for d in rb.dimensions:
            if d.group == "image" and not emb:
                dims[d.key] = {"group": d.group, "label": "n/a", "score": None, "na": "no_images"}
                continue
            ratings, why = self._matrix(parsed, d.group, d.key, n_j)
            flat = [x for row in ratings for x in row]
            score = flat[0] if len(flat) == 1 else round(sum(flat) / len(flat), 4)
            dims[d.key] = {"group": d.group, "label": "judge", "measured_by": "judge", "score": score,
                           "ratings": ratings, **why}
        gates: dict[str, dict[str, Any]] = {}
        for g in rb.model_gates():
            ratings, why = self._matrix(parsed, "gate", g.key, n_j)
            flat = [x for row in ratings for x in row]
            # a hard gate: it passes when a strict majority of the ratings pass (a tie fails)
            gates[g.key] = {"label": "model", "decided_by": "model", "pass": sum(flat) * 2 > len(flat),
                            "ratings": ratings, **why}
        provenance = []
        for j in range(n_j):
            res = results[slots.index((j, 0, groups[0]))]
            prov = getattr(res, "provenance", None) or getattr(judges[j], "provenance", None)
            provenance.append({**(prov.model_dump(mode="json", exclude_none=True) if prov is not None else {}),
                               "prompt_versions": {g: self.frame[g][3] for g in groups}})
        return dims, gates, provenance


    def _matrix(self, parsed: Mapping[tuple[int, int, str], Mapping[str, tuple[Any, str]]], group: str, key: str,
                n_judges: int) -> tuple[list[list[Any]], dict[str, Any]]:
        """ratings[judge][repeat] of one dimension or gate, and its rationale (all of them, in the same
        shape, when there are several)."""
        cells = [[parsed[(j, r, group)][key] for r in range(self.config.repeats)] for j in range(n_judges)]
        ratings = [[c[0] for c in row] for row in cells]
        whys = [[c[1] for c in row] for row in cells]
        return ratings, ({"rationale": whys[0][0]} if len(cells) * len(cells[0]) == 1 else
                         {"rationale": whys[0][0], "rationales": whys})


@contextlib.asynccontextmanager
async def _settled(pending: Any) -> Any:
    """Leave nothing running behind a failure: when the body raises, `pending` (a task or gather
    started before it) is cancelled and awaited, so its outcome is never left unretrieved."""
    try:
        yield
    except BaseException:
        pending.cancel()
        with contextlib.suppress(BaseException):
            await pending
        raise


def ivr12_job(judges: Sequence[Any], config: IVR12Config | None = None) -> Job:
    """The IVR-12 job: one IVR12Stage with the judge clients (none: rules mode) in its role."""
    config = config or IVR12Config()
    roles: dict[str, Any] = {}
    if judges:
        roles[config.role] = list(judges) if len(judges) > 1 else judges[0]
    return Job([IVR12Stage(config)], Context(roles=roles), description="ivr12 rubric judge")


# ------------------------------------------------------------------------------------- summaries


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(float(x), nd)


def _agreement(ok: list[Mapping[str, Any]], rubric: Rubric, judges: Sequence[str]) -> dict[str, Any]:
    """Per dimension (and model gate): α across each judge's repeats and α across judges (each
    judge's mean over its repeats), ordinal and interval (nominal for gates)."""
    from kbvqa.evaluate.agreement import krippendorff_alpha  # numpy only when a summary is made

    out: dict[str, Any] = {}
    keys = [(d.key, False) for d in rubric.dimensions] + [(g.key, True) for g in rubric.model_gates()]
    for key, gate in keys:
        rows = []
        for line in ok:
            v = (line["ivr12"]["gates"] if gate else line["ivr12"]["dimensions"]).get(key) or {}
            if v.get("ratings"):
                rows.append([[int(x) for x in row] for row in v["ratings"]])
        if not rows:
            continue
        metrics = ("nominal",) if gate else ("ordinal", "interval")
        entry: dict[str, Any] = {"n_items": len(rows)}
        if len(rows[0][0]) > 1:
            entry["repeats"] = {judges[j] if j < len(judges) else f"judge {j + 1}":
                                {m: _r(krippendorff_alpha([r[j] for r in rows], m)) for m in metrics}
                                for j in range(len(rows[0]))}
        if len(rows[0]) > 1:
            units = [[sum(row) / len(row) for row in r] for r in rows]
            if gate:
                units = [[x >= 0.5 for x in u] for u in units]
            entry["judges"] = {m: _r(krippendorff_alpha(units, m)) for m in metrics}
        if len(entry) > 1:
            out[key] = entry
    return out


def _same_model(judge: str, producer: str) -> bool:
    def norm(x: str) -> str:
        return x.split(":", 1)[-1].rsplit("/", 1)[-1].casefold()

    return bool(judge) and norm(judge) == norm(producer)


def self_judging_warnings(judge_models: Sequence[str], producers: Mapping[str, int]) -> list[str]:
    """A warning per judge model that also wrote answers (compared without provider prefixes, case-folded)."""
    out = []
    for jm in judge_models:
        hits = {p: n for p, n in producers.items() if _same_model(jm, p)}
        if hits:
            out.append(f"the judge model {jm!r} also wrote {sum(hits.values())} of the answers "
                       f"({', '.join(hits)}): self-preference is not controlled (seed 001 did the same)")
    return out


def _na_text(n_na: Mapping[str, int]) -> str:
    return ", ".join(f"{NA_REASONS.get(k, str(k))} {v}" for k, v in sorted(n_na.items(), key=str)) or "no score"


def aggregate_means(dims: Mapping[str, Mapping[str, Any]], groups: Sequence[tuple[str, str]],
                    status: Mapping[str, int], mode: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A summary's group and overall means, ungated and gated, from its dimension means: a group
    mean only when every dimension of the group has a judged mean, the overall only when all of them
    do, and neither while items are invalid or error (an aggregate over the items that happened to
    get a verdict is not the run's); otherwise null with the reason. Per dimension, the mean is over
    the items it was judged on (`n`; an answer without images has no image dimensions — kbvqa's
    missing-value rule, the paper's is in the appendix our copy lacks)."""
    prefix = "rules mode: " if mode == "rules" else ""
    bad = {k: int(status.get(k, 0)) for k in ("invalid", "error") if status.get(k)}
    incomplete = (f"incomplete run: {' and '.join(f'{v} {k}' for k, v in bad.items())} items have no verdict "
                  "(run again with --resume to retry them)") if bad else ""

    def agg(keys: list[str], title: str, what: str) -> dict[str, Any]:
        entries = [(k, dims[k], f"without a judged score ({_na_text(dims[k].get('n_na') or {})})") for k in keys]
        out: dict[str, Any] = {"title": title, "n_dimensions": len(keys)}
        for value, name in (("mean", "mean"), ("gated_mean", "gated_mean")):
            m, why = _judged_mean(entries, value, what, prefix)
            if why is None and incomplete:
                m, why = None, f"{incomplete}; no {what}"
            out[name] = _r(m)
            if name == "mean":
                out["reason"] = why
        out["n_judged_dimensions"] = sum(1 for _, e, _ in entries if e.get("measured_by") == "judge")
        return out

    by_group = {g: agg([k for k, d in dims.items() if d["group"] == g], title, "group mean") for g, title in groups}
    return by_group, agg(list(dims), "IVR-12 overall", "overall")


def _measured_by(labels: Counter) -> str | None:
    """How a dimension's scores were made: `judge` (a model), `rule` (kbvqa's stand-in), `mixed`, or
    None (no score at all)."""
    kinds = {"judge" if k == "judge" else "rule" for k, n in labels.items() if n}
    return None if not kinds else (kinds.pop() if len(kinds) == 1 else "mixed")


def summarize(lines: Iterable[Mapping[str, Any]], rubric: Rubric, *, judges: Sequence[str] = (),
              mode: str = "rules") -> dict[str, Any]:
    """The IVR-12 summary of a finished journal: per-dimension means, ungated and gated, each with its
    denominator, how it was measured (`measured_by`: judge / rule) and where the dimension comes from
    (`source`: paper / kbvqa); group and overall means only over judged dimensions of a complete run
    (else null with `reason`); n/a counts by reason; gate counts by who decided them (model / rule);
    item statuses; judge agreement (with repeats or several judges); the length–score correlation."""
    from kbvqa.evaluate.agreement import pearson, spearman  # numpy only when a summary is made

    lines = list(lines)
    status = Counter(str(x.get("status")) for x in lines)
    ok = [x for x in lines if x.get("status") == "ok" and isinstance(x.get("ivr12"), dict)]
    no_answer = Counter(str(x.get("no_answer")).split(":")[0] for x in lines if x.get("no_answer"))
    dims: dict[str, Any] = {}
    for d in rubric.dimensions:
        vals = [x["ivr12"]["dimensions"][d.key] for x in ok if d.key in x["ivr12"]["dimensions"]]
        scores = [v["score"] for v in vals if v["score"] is not None]
        gated = [v["gated"] for v in vals if v.get("gated") is not None]
        labels = Counter(v["label"] for v in vals if v["score"] is not None)
        by = _measured_by(labels)
        mixed = by == "mixed"  # judge and rule scores in one journal: never averaged together
        origin = {("source_note" if k == "note" else k): v for k, v in d.origin.describe().items()}
        placed = {} if d.group_origin is None else {
            "group_source": d.group_origin.source, **({"group_note": d.group_origin.note} if d.group_origin.note else {})}
        dims[d.key] = {"group": d.group, "title": d.title, **origin, **placed,
                       "label": ("judge" if labels.get("judge") else "rules" if labels.get("rules") else "n/a"),
                       "measured_by": by,
                       "mean": None if mixed else _r(_mean(scores)), "n": len(scores),
                       "gated_mean": None if mixed else _r(_mean(gated)), "gated_n": len(gated),
                       "n_na": dict(Counter(v.get("na") for v in vals if v["score"] is None))}
        if by == "rule":
            dims[d.key]["note"] = "rule measure (kbvqa's stand-in for a judge), not the judged dimension"
        elif mixed:
            dims[d.key]["note"] = "judge and rule scores in one journal: not averaged"
    groups, overall = aggregate_means(dims, rubric.groups, status, mode)
    for g, _ in rubric.groups:
        groups[g].update(rubric.group_origins[g].describe() if g in rubric.group_origins else {})
    gates = {}
    for g in rubric.gates:
        vals = [x["ivr12"]["gates"].get(g.key, {}) for x in ok]
        decided: dict[str, dict[str, Any]] = {}
        for v in vals:
            if v.get("pass") is None:
                continue
            who = v.get("decided_by") or ("model" if v.get("label") == "model" else "rule")
            d = decided.setdefault(who, {"pass": 0, "fail": 0})
            d["pass" if v["pass"] else "fail"] += 1
            if who == "rule" and g.judged_by == "model":  # a model gate decided without a call: say why
                why = str(v.get("reason") or "").removeprefix("decided by rule: ").split(" (")[0]
                d.setdefault("reasons", Counter())[why] += 1
        for d in decided.values():
            if "reasons" in d:
                d["reasons"] = dict(d["reasons"])
        gates[g.key] = {"title": g.title, "judged_by": g.judged_by, **g.origin.describe(),
                        "pass": sum(1 for v in vals if v.get("pass") is True),
                        "fail": sum(1 for v in vals if v.get("pass") is False),
                        "n_a": sum(1 for v in vals if v.get("pass") is None), "decided_by": decided}
    pairs = [(x["words"], x["ivr12"]["mean"]) for x in ok if x["ivr12"].get("mean") is not None]
    length = {"n": len(pairs), "x": "answer words (tags removed)",
              "y": "item overall (items with all twelve dimensions judged)",
              "pearson": _r(pearson([p[0] for p in pairs], [p[1] for p in pairs])) if pairs else None,
              "spearman": _r(spearman([p[0] for p in pairs], [p[1] for p in pairs])) if pairs else None}
    if mode == "rules":
        length["note"] = "rules mode: no item has a judged overall, so there is no length-score correlation"
    return {
        "kind": "ivr12", "scorer": f"ivr12 ({rubric.tag}, {mode})", "rubric": rubric.describe(), "mode": mode,
        "n_items": len(lines),
        "status": {k: status.get(k, 0) for k in ("ok", "invalid", "error")},
        "complete": status.get("invalid", 0) == 0 and status.get("error", 0) == 0,
        "n_no_answer": sum(no_answer.values()), "no_answer": dict(no_answer),
        "n_without_images": sum(1 for x in ok if not x.get("no_answer") and not x.get("embedded")),
        "n_gate_failed": sum(1 for x in ok if x["ivr12"].get("gate_failed")),
        "gating": {"policy": "floor", "floor": rubric.floor, **rubric.gating_origin.describe(),
                   "gates_evaluated": [g for g, v in gates.items() if v["pass"] + v["fail"] > 0]},
        "provenance": rubric.provenance(),
        "dimensions": dims, "groups": groups, "overall": overall,
        "gates": gates, "agreement": _agreement(ok, rubric, judges) if mode == "judge" else {},
        "length_score": length,
    }


def normalize_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A summary with every figure standing on what it claims, also one written by an older kbvqa:
    each dimension says how it was measured (`measured_by`, from its `label` when absent) and the
    group and overall means are recomputed from the dimension means (aggregate_means), so an old
    rules-mode "overall" built from three stand-ins is dropped with the reason, never reprinted."""
    s = json.loads(json.dumps(summary))  # a deep copy of plain JSON
    dims = s.get("dimensions") or {}
    for d in dims.values():
        if "measured_by" not in d:
            d["measured_by"] = {"judge": "judge", "rules": "rule"}.get(d.get("label"))
    titles = [(g, (v or {}).get("title", g)) for g, v in (s.get("groups") or {}).items()]
    groups, overall = aggregate_means(dims, titles, s.get("status") or {}, s.get("mode", "rules"))
    keep = ("source", "paper_ref", "note", "source_note")
    s["groups"] = {g: {**{k: v for k, v in (s["groups"][g] or {}).items() if k in keep}, **groups[g]} for g in groups}
    s["overall"] = overall
    return s


def compare_summaries(a: Mapping[str, Any], b: Mapping[str, Any], names: tuple[str, str] = ("A", "B"), *,
                      allow_different_rubrics: bool = False) -> dict[str, Any]:
    """Per-dimension, per-group and overall means of two IVR-12 summaries and their gaps (A − B),
    ungated and gated, with both denominators (seed 001 Table 3 shape). A dimension's gap is given
    only when it was measured the same way on both sides (judge and judge, or rule and rule: then a
    gap of kbvqa's stand-in measures, labelled so); a group's or the overall gap only when both means
    exist. Otherwise the gap is null with the reason. Summaries made under different rubric files
    are refused unless `allow_different_rubrics` (their scales differ)."""
    for s, n in ((a, names[0]), (b, names[1])):
        if s.get("kind") != "ivr12":
            raise ValueError(f"{n}: not an IVR-12 summary (kind {s.get('kind')!r})")
    a, b = normalize_summary(a), normalize_summary(b)
    ra, rb_ = a["rubric"]["sha256"], b["rubric"]["sha256"]
    notes = []
    if ra != rb_:
        msg = (f"the two runs used different rubric files ({a['rubric']['version']} {ra[:12]} vs "
               f"{b['rubric']['version']} {rb_[:12]}): not the same criteria")
        if not allow_different_rubrics:
            raise ValueError(msg + "; pass --allow-different-rubrics to compare anyway")
        notes.append("warning: " + msg)
    if a.get("mode") != b.get("mode"):
        notes.append(f"warning: {names[0]} was scored in {a.get('mode')} mode, {names[1]} in {b.get('mode')} mode")
    elif a.get("judges") != b.get("judges"):
        notes.append(f"warning: different judges ({a.get('judges')} vs {b.get('judges')})")
    for s, n in ((a, names[0]), (b, names[1])):
        if not s.get("complete", True):
            notes.append(f"warning: {n} is incomplete (invalid {s['status']['invalid']}, error {s['status']['error']}: "
                         "in no mean)")

    def gap(u: float | None, v: float | None) -> float | None:
        return None if u is None or v is None else round(u - v, 4)

    def dim_row(key: str, x: Mapping[str, Any], y: Mapping[str, Any]) -> dict[str, Any]:
        bx, by = x.get("measured_by"), y.get("measured_by")
        same = bx == by and bx in ("judge", "rule")
        if bx is None and by is None:
            why = f"no score on either side ({_na_text(x.get('n_na') or {})}); no gap"
        elif bx is None or by is None:
            why = f"no score in {names[0] if bx is None else names[1]}; no gap"
        elif not same:
            why = f"not measured the same way ({names[0]}: {bx}, {names[1]}: {by}); no gap"
        elif x["mean"] is None or y["mean"] is None:
            why = f"no score in {names[0] if x['mean'] is None else names[1]}; no gap"
        else:
            why = "gap of rule measures (kbvqa's stand-ins), not of the judged dimension" if bx == "rule" else None
        return {"level": "dimension", "group": x["group"], "key": key, "title": x.get("title", key),
                "source": x.get("source"), "measured_by_a": bx, "measured_by_b": by,
                "a": x["mean"], "n_a": x["n"], "b": y["mean"], "n_b": y["n"],
                "gap": gap(x["mean"], y["mean"]) if same else None, "a_gated": x["gated_mean"],
                "b_gated": y["gated_mean"], "gap_gated": gap(x["gated_mean"], y["gated_mean"]) if same else None,
                "reason": why}

    def agg_row(level: str, group: str, key: str, x: Mapping[str, Any], y: Mapping[str, Any]) -> dict[str, Any]:
        whys = [f"{n}: {s['reason']}" for s, n in ((x, names[0]), (y, names[1])) if s.get("reason")]
        return {"level": level, "group": group, "key": key, "title": x.get("title", key), "source": x.get("source"),
                "measured_by_a": "judge" if x["mean"] is not None else None,
                "measured_by_b": "judge" if y["mean"] is not None else None,
                "a": x["mean"], "n_a": None, "b": y["mean"], "n_b": None, "n_dimensions": x["n_dimensions"],
                "gap": gap(x["mean"], y["mean"]), "a_gated": x["gated_mean"], "b_gated": y["gated_mean"],
                "gap_gated": gap(x["gated_mean"], y["gated_mean"]), "reason": "; ".join(whys) or None}

    rows = []
    for key, da in a["dimensions"].items():
        if key not in b["dimensions"]:
            raise ValueError(f"dimension {key!r} is in {names[0]} but not in {names[1]}")
        rows.append(dim_row(key, da, b["dimensions"][key]))
    rows += [agg_row("group", g, g, ga, b["groups"][g]) for g, ga in a["groups"].items()]
    rows.append(agg_row("overall", "", "overall", a["overall"], b["overall"]))
    if a["overall"]["mean"] is None or b["overall"]["mean"] is None:
        notes.append("no overall gap: an overall mean needs all twelve dimensions judged by a model on both sides")
    return {"kind": "ivr12-compare", "scorer": a.get("scorer", "ivr12"), "names": list(names),
            "items": {names[0]: a["n_items"], names[1]: b["n_items"]},
            "status": {names[0]: a["status"], names[1]: b["status"]}, "rows": rows, "notes": notes}
