"""The input of reference construction: each sample joined with the agent's trajectory for it.

The trajectories are `kbvqa answer --pipeline agent` output (runner lines of Prediction records).
A step's stored observation is capped; the full text lives in `<predictions stem>.artifacts/`
(`observation_file`, relative to the predictions file), so the full text is read here — the URL
scorer splits visited pages out of it and the synthesis sees up to 3,000 characters per step. Only
what the later stages read is kept (tool, arguments, status, items, observation), which keeps the
stage journals small.

Nothing is dropped quietly: samples without a trajectory, trajectories whose episode failed, and
trajectories for ids the samples file lacks are counted (and named) in the intake summary.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbvqa.data.errors import DataError
from kbvqa.data.formats import read_samples
from kbvqa.data.images import ImageRefError, resolve_image
from kbvqa.data.jsonl import read_jsonl
from kbvqa.tools.base import file_sha256

ITEM_FIELDS = ("kind", "rank", "query", "title", "url", "text", "image", "sha256", "error")
ITEM_TEXT_CHARS = 1500
OBSERVATION_CAP = 60_000  # a safety cap on what one step carries between stages


@dataclass
class Intake:
    records: list[dict[str, Any]]
    counts: dict[str, Any] = field(default_factory=dict)


def _slim_step(step: dict[str, Any], base: Path, missing: list[str]) -> dict[str, Any]:
    obs = str(step.get("observation") or "")
    source = "inline"
    rel = step.get("observation_file")
    if rel:
        path = base / str(rel)
        try:
            obs, source = path.read_text(encoding="utf-8"), "artifact"
        except OSError:
            missing.append(str(path))
            source = "inline (artifact missing)"
    items = [{k: (it[k][:ITEM_TEXT_CHARS] if k == "text" and isinstance(it.get(k), str) else it[k])
              for k in ITEM_FIELDS if it.get(k) not in (None, "")}
             for it in step.get("items") or [] if isinstance(it, dict)]
    return {"turn": step.get("turn"), "tool": step["tool"], "arguments": step.get("arguments"),
            "status": step.get("status"), "reason": step.get("reason") or "",
            "thought": str(step.get("thought") or "")[:500], "observation": obs[:OBSERVATION_CAP],
            "observation_source": source, "items": items}


def read_trajectories(path: Path) -> dict[str, tuple[int, dict[str, Any]]]:
    """id -> (line, prediction) from agent output; a later line for an id replaces an earlier one
    (the runner's journal rule)."""
    out: dict[str, tuple[int, dict[str, Any]]] = {}
    for ln, obj in read_jsonl(path):
        rid = obj.get("id", obj.get("sample_id"))
        if not isinstance(rid, str) or not rid:
            raise DataError(f"must be a non-empty string, got {rid!r}", file=path, row=ln, field="id")
        traj = obj.get("trajectory")
        if traj is not None and not isinstance(traj, list):
            raise DataError("must be a list of steps", file=path, row=ln, field="trajectory")
        for i, step in enumerate(traj or []):
            if not isinstance(step, dict):
                raise DataError(f"step {i} is a {type(step).__name__}, not an object", file=path, row=ln,
                                field="trajectory")
        out[rid] = (ln, obj)
    return out


def intake(samples: str | Path, trajectories: str | Path, *, image_root: str | Path | None = None,
           fmt: str | None = None, allow_outside_root: bool | None = None) -> Intake:
    """One record per sample that has an ok trajectory, and the counts of everything else."""
    samples, trajectories = Path(samples), Path(trajectories)
    root = Path(image_root) if image_root is not None else samples.parent
    trajs = read_trajectories(trajectories)
    base = trajectories.parent
    records: list[dict[str, Any]] = []
    tally: Counter[str] = Counter()
    not_ok: Counter[str] = Counter()
    missing_obs: list[str] = []
    no_trajectory: list[str] = []
    seen: set[str] = set()
    for s in read_samples(samples, fmt):
        tally["samples"] += 1
        seen.add(s.id)
        if s.id not in trajs:
            no_trajectory.append(s.id)
            continue
        ln, pred = trajs[s.id]
        status = str(pred.get("status", "ok"))
        if status != "ok":
            not_ok[status] += 1
            continue
        try:
            images = [resolve_image(ref, root, allow_outside_root=allow_outside_root) for ref in s.images]
        except (FileNotFoundError, ImageRefError) as exc:
            raise DataError(f"sample {s.id!r}: {exc}", file=samples, field="images") from None
        query = images[0] if images else None
        digest = file_sha256(query) if query else None
        steps = [_slim_step(st, base, missing_obs) for st in pred.get("trajectory") or [] if st.get("tool")]
        meta = pred.get("meta") or {}
        guided = bool(meta.get("guided"))
        tally["guided" if guided else "unguided"] += 1
        answers = s.answer_texts
        records.append({
            "id": s.id, "question": s.question, "answer": answers[0] if answers else "", "answers": answers,
            "query_image": str(query) if query else None, "query_sha256": digest,
            "query_images": [str(p) for p in images], "steps": steps,
            "trajectory_source": {"file": str(trajectories), "row": ln, "guided": guided,
                                  "tools": meta.get("tools"), "producer": pred.get("producer")},
            "sample": s.dump()})
    unknown = sorted(set(trajs) - seen)
    return Intake(records, {
        "samples": tally["samples"], "trajectories": len(trajs), "items": len(records),
        "no_trajectory": len(no_trajectory), "agent_not_ok": dict(not_ok), "unknown_trajectory_ids": len(unknown),
        "guided": tally["guided"], "unguided": tally["unguided"], "observation_files_missing": len(missing_obs),
        **({"examples_no_trajectory": no_trajectory[:5]} if no_trajectory else {}),
        **({"examples_unknown_ids": unknown[:5]} if unknown else {}),
        **({"examples_missing_observations": missing_obs[:3]} if missing_obs else {})})


def trajectory_tools(trajectories: str | Path) -> str | None:
    """The tool backend the agent's ok episodes name (`meta.tools`) when they all name the same one,
    else None; None too for a file that cannot be read here (intake reports its problem)."""
    names: set[Any] = set()
    try:
        for _, obj in read_jsonl(Path(trajectories)):
            if isinstance(obj, dict) and str(obj.get("status", "ok")) == "ok":
                names.add((obj.get("meta") or {}).get("tools") if isinstance(obj.get("meta"), dict) else None)
    except (OSError, ValueError, DataError):
        return None
    return next(iter(names)) if len(names) == 1 and next(iter(names)) in ("local", "web") else None
