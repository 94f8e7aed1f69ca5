"""The fingerprint of an output: what shaped its records, so `--resume` never mixes two settings.

Why: a resumed run keeps the records already `ok` in its journal and makes the rest. Made under
another model, prompt or stage setting, the two halves would meet in one number that names only the
second. So every manifest carries the fingerprint of its records, and a resume whose fingerprint
differs is refused (`SettingChanged`, exit 2 in every command), naming what changed.

It is derived here, in one place, from what the manifest already records — no job writes its own:

- each model role (`roles`): backend, model, base URL, prompt version, and the call settings that
  change a reply: temperature, max tokens, structured output, extra request params (a seed);
- each stage (`stages`): the stage list with versions, every prompt's id and hash (a user's prompt
  file changes the id: `name@file-<hash>`), and the stage's config;
- the job's options as used (`run_config.options`).

Left out are the run settings — how a run goes, not what its records hold: the `run` and the
call-limit (`models`, `judges`) groups of the options, and any key named in `RUN_SETTINGS`
(concurrency, timeouts, retries, limit, resume, progress...) or `PATH_KEYS` (where files are: an
input moved to another folder is the same input; a job that reuses records checks their inputs record
by record, as `score judge` and `score ivr12` do). A stage or option key that only one of the two runs
has (another kbvqa version added it) is not compared; a role or a prompt that only one has is a change.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

VERSION = 1

#: option and stage-config keys that say how a run goes, never what a record holds
RUN_SETTINGS = frozenset({
    "concurrency", "llm_concurrency", "limit", "resume", "allow_empty", "progress", "skip_invalid",
    "require_complete", "force", "timeout", "connect_timeout", "page_timeout", "deadline", "max_retries",
    "retries", "backoff", "workers", "batch_size", "batch_articles", "max_wait", "device", "api_key_env",
})
#: keys whose values are paths of files or folders (inputs, outputs, caches, model folders)
PATH_KEYS = frozenset({
    "samples", "images", "kb", "index", "model_dir", "rerank_model_dir", "text_index", "config", "cassette",
    "kb_images", "input", "out", "url_types", "posts", "references", "qtypes", "bem_dir",
    "semantic_model_dir", "image_root", "wiki", "trajectories", "predictions",
})
#: option groups that hold only run settings and call limits (the model itself is in the roles)
RUN_GROUPS = frozenset({"run", "models", "judges"})

#: (key in a role's manifest entry, its name in a message)
_ROLE_FIELDS = (("backend", "backend"), ("model", "model"), ("base_url", "base URL"),
                ("prompt_version", "prompt version"), ("params", "request params"))
_ROLE_LIMITS = (("temperature", "temperature"), ("max_tokens", "max tokens"),
                ("structured_output", "structured output"))
_ABSENT = object()
log = logging.getLogger("kbvqa.runner")


class SettingChanged(ValueError):
    """`--resume` on an output whose records were made under another setting (the message names it)."""


def _content(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A config or options tree flattened to dotted keys, run settings and paths left out."""
    out: dict[str, Any] = {}
    if not isinstance(tree, Mapping):
        return out
    for key, value in tree.items():
        key = str(key)
        mapping = isinstance(value, Mapping)
        if key in RUN_SETTINGS or (key in PATH_KEYS and not mapping) or (mapping and key in RUN_GROUPS):
            continue  # a path key holding a table (augment's url_types given inline) is content
        if isinstance(value, Mapping) and value:
            out.update(_content(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def _role_items(entry: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(entry, Mapping):
        return {f"{prefix}backend": str(entry)}
    items = {f"{prefix}{label}": entry[k] for k, label in _ROLE_FIELDS if entry.get(k) is not None}
    limits = entry.get("limits") or {}
    items.update({f"{prefix}{label}": limits[k] for k, label in _ROLE_LIMITS if limits.get(k) is not None})
    return items or {f"{prefix}backend": entry.get("class")}


def items_of(manifest: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The fingerprint's items from a manifest, by group: roles (by role name), prompts, stages, options."""
    roles: dict[str, dict[str, Any]] = {}
    for name, entry in sorted((manifest.get("roles") or {}).items()):
        if isinstance(entry, list):  # several clients in one role (IVR-12's judges): each by its place
            roles[name] = {k: v for i, one in enumerate(entry, 1) for k, v in _role_items(one, f"#{i} ").items()}
        else:
            roles[name] = _role_items(entry)
    prompts: dict[str, Any] = {}
    stages: dict[str, Any] = {"stages": ", ".join(f"{s.get('name')}@{s.get('version')}"
                                                  for s in manifest.get("stages") or [])}
    for s in manifest.get("stages") or []:
        for pid, digest in (s.get("prompt_hashes") or {}).items():
            prompts[f"prompt {str(pid).partition('@')[0]}"] = f"{pid} sha256:{str(digest)[:16]}"
        stages.update({f"{s.get('name')} {k}": v for k, v in _content(s.get("config")).items()})
    options = _content((manifest.get("run_config") or {}).get("options"))
    return {"roles": roles, "prompts": prompts, "stages": stages, "options": options}


def fingerprint(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The fingerprint a manifest records: its items and their sha256 (equal digests, equal settings)."""
    items = items_of(manifest)
    return {"version": VERSION, "sha256": _digest(items), "items": items}


def _digest(items: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(items, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "(none)"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """"what: old → new" for every item that differs between two fingerprints (roles first). A role
    only one of them has is not a change: a run without it made none of its records with it (a stage
    that needs it ends `needs_model`, to be finished by a resume that has it). An option repeating a
    stage config's change (agent.episode.max_turns and the agent stage's max_turns) is named once."""
    lines: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    old_roles, new_roles = (old.get("items") or {}).get("roles") or {}, (new.get("items") or {}).get("roles") or {}
    for role in [r for r in new_roles if r in old_roles]:  # a role one run lacks made none of its records
        a, b = old_roles[role], new_roles[role]
        for key in [*b, *(k for k in a if k not in b)]:
            va, vb = a.get(key, _ABSENT), b.get(key, _ABSENT)
            if va != vb:
                lines.append(f"{role} {key}: {_show(va)} → {_show(vb)}")
    for group in ("prompts", "stages", "options"):
        a, b = (old.get("items") or {}).get(group) or {}, (new.get("items") or {}).get(group) or {}
        tolerant = group != "prompts"  # a stage or option key one kbvqa version lacks is not a change
        for key in [*b, *(k for k in a if k not in b)]:
            va, vb = a.get(key, _ABSENT), b.get(key, _ABSENT)
            if va == vb or (tolerant and _ABSENT in (va, vb) and key != "stages"):
                continue
            leaf = key.rsplit(".", 1)[-1].rsplit(" ", 1)[-1]
            sig = (leaf, _show(va), _show(vb))
            if group == "options" and sig in seen:
                continue
            seen.add(sig)
            lines.append(f"{key}: {_show(va)} → {_show(vb)}")
    return lines


def check_resume(prev: Mapping[str, Any] | None, manifest: dict[str, Any], ok_records: int, out: Path,
                 logger: logging.Logger | None = None, where: Path | None = None) -> None:
    """Before a resumed run writes anything: refuse it if the `ok_records` it would keep were made
    under another fingerprint than `manifest["fingerprint"]` (the new run's). The previous fingerprint
    is the one in `prev`, the manifest beside the output (`manifest.read_manifest`, found at `where`),
    which only a run that kept those records (same fingerprint) or replaced them (nothing ok kept) has
    written. A manifest without one (kbvqa before fingerprints, or none at all) is resumed with a
    warning, and the new manifest counts those records as `unverified_records` so a later resume
    warns again."""
    logger = logger or log
    new = manifest["fingerprint"]
    if ok_records == 0:
        return  # nothing kept: every record of the output will be this run's
    old = (prev or {}).get("fingerprint")
    if not isinstance(old, Mapping) or not isinstance(old.get("items"), Mapping) or old.get("version") != VERSION:
        why = ("its manifest was written before fingerprints" if prev and not old else
               "its manifest's fingerprint is of another kbvqa version" if prev else
               f"no readable manifest {where or out}")
        logger.warning("warning: resuming %s: %s, so the setting of its %d ok records cannot be checked "
                       "against this run's", out, why, ok_records)
        new["unverified_records"] = ok_records
        return
    if old.get("sha256") != new["sha256"]:
        diff = changes(old, new)
        if diff:
            shown = "; ".join(diff[:6]) + (f"; and {len(diff) - 6} more" if len(diff) > 6 else "")
            raise SettingChanged(f"{out}: cannot resume: its {ok_records} ok records were made under another "
                                 f"setting ({shown}); use --no-resume (the old output is moved aside) or "
                                 "another --out")
    # a role this run lacks keeps the earlier run's entry: the records it made are still in the journal,
    # so a later resume with another model in that role is still compared against it
    kept = {r: v for r, v in (old["items"].get("roles") or {}).items() if r not in new["items"]["roles"]}
    if kept:
        new["items"]["roles"] = {**new["items"]["roles"], **kept}
        new["sha256"] = _digest(new["items"])
    unverified = old.get("unverified_records")
    if unverified:
        logger.warning("warning: resuming %s: %s of its records were written before fingerprints; their "
                       "setting is unknown", out, unverified)
        new["unverified_records"] = unverified
