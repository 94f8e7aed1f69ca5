"""The run manifest: what ran, with which code, prompts and models, and what came out.

Written beside the output as `<out>.manifest.json` (`side_path`: `p.jsonl` -> `p.manifest.json`)
when a run starts, rewritten when it finishes, and rewritten (best effort) when it is interrupted or
fails, so a reader can always tell how a file of results was produced. It never holds credentials:
config values under key-like names are redacted and model clients contribute only their provenance
(backend, model, base URL).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import json
import os
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kbvqa.models.config import redact as _redact
from kbvqa.models.config import redact_url as _redact_url
from kbvqa.runner.fingerprint import fingerprint
from kbvqa.runner.lock import legacy_side_path, side_path

REDACTED = "***redacted***"


def manifest_path(out: Path) -> Path:
    """`<out>.manifest.json` named by the one side-file rule (kbvqa.runner.lock.side_path)."""
    return side_path(Path(out), ".manifest.json")


def read_manifest(out: Path) -> tuple[Path | None, dict[str, Any]]:
    """The manifest of output `out` and where it was found, or (None, {}). An output written before
    side files were named after the whole output (`p.json` then wrote `p.manifest.json`) is read from
    the old name when that manifest says it describes `out`."""
    out = Path(out)
    for path in dict.fromkeys((manifest_path(out), legacy_side_path(out, ".manifest.json"))):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        describes_out = Path(str(data.get("output", ""))).name == out.name if isinstance(data, dict) else False
        if isinstance(data, dict) and (path == manifest_path(out) or describes_out):
            return path, data
    return None, {}


def redact(value: Any) -> Any:
    """`kbvqa.models.config.redact` (the one redactor) with the manifest's marker, which is easy to
    grep for in a JSON file."""
    return _redact(value, marker=REDACTED)


def redact_url(url: str) -> str:
    """`kbvqa.models.config.redact_url` with the manifest's marker."""
    return _redact_url(url, marker=REDACTED)


def _git(cwd: Path, *args: str) -> str | None:
    try:
        r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


@functools.lru_cache(maxsize=None)
def git_info(package_dir: Path | None = None) -> dict[str, Any]:
    """The kbvqa code a run used, wherever the command was started: `commit`, `dirty` and `source`.

    `checkout`: kbvqa is imported from a git checkout (an editable install) whose repository tracks
    this very file — not merely any repository around the install, such as the user's project with
    a virtual environment inside it. `pip-vcs`: installed by pip from a git URL (the commit pip
    recorded in direct_url.json). `release`: an installed release, identified by its version alone."""
    here = Path(package_dir or Path(__file__).resolve().parents[1])
    init = here / "__init__.py"
    if init.is_file() and _git(here, "ls-files", "--error-unmatch", str(init)) is not None:
        commit = _git(here, "rev-parse", "HEAD")
        if commit:
            status = _git(here, "status", "--porcelain", "--untracked-files=no")
            return {"commit": commit, "dirty": bool(status) if status is not None else None, "source": "checkout"}
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        raw = distribution("kbvqa").read_text("direct_url.json")
        vcs = (json.loads(raw) if raw else {}).get("vcs_info") or {}
        if vcs.get("commit_id"):
            return {"commit": vcs["commit_id"], "dirty": False, "source": "pip-vcs"}
    except (PackageNotFoundError, ValueError, OSError):
        pass
    return {"commit": None, "dirty": None, "source": "release"}


def kbvqa_version() -> str:
    try:
        from kbvqa import __version__
        return __version__
    except Exception:  # pragma: no cover - only when the package is half-installed
        from importlib.metadata import version
        return version("kbvqa")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def describe_stage(stage: Any) -> dict[str, Any]:
    """Name, version, class, redacted config and prompt hashes of one stage."""
    info: dict[str, Any] = {"name": getattr(stage, "name", type(stage).__name__),
                            "version": str(getattr(stage, "version", "")),
                            "class": f"{type(stage).__module__}.{type(stage).__qualname__}"}
    config = getattr(stage, "config", None)
    if config is not None and hasattr(config, "model_dump"):
        try:
            info["config"] = redact(config.model_dump(mode="json"))
        except Exception as exc:  # a config that cannot be dumped must not stop the run
            info["config_error"] = f"{type(exc).__name__}: {exc}"
    prompts = stage.prompt_versions() if hasattr(stage, "prompt_versions") else {}
    info["prompt_hashes"] = {str(k): sha256(str(v)) for k, v in (prompts or {}).items()}
    return info


def describe_client(client: Any) -> dict[str, Any]:
    """A model client's provenance (backend, model, base URL, prompt version): never its keys."""
    prov = getattr(client, "provenance", None)
    if callable(prov) and not hasattr(prov, "model_dump"):
        prov = prov()
    if prov is None:
        return {"backend": None, "class": type(client).__name__}
    if hasattr(prov, "model_dump"):
        prov = prov.model_dump(mode="json", exclude_none=True)
    if not isinstance(prov, Mapping):
        return {"backend": str(prov), "class": type(client).__name__}
    keep = ("backend", "model", "base_url", "prompt_version")
    out = {k: prov[k] for k in keep if k in prov and prov[k] is not None}
    # the limits a run was made under (they shape its results and its speed): recorded, never guessed
    limits = {k: getattr(client, attr) for k, attr in _LIMITS if getattr(client, attr, None) is not None}
    cache = getattr(client, "cache", None)
    if limits:
        out["limits"] = limits
    params = getattr(client, "extra_params", None)  # request params beyond the limits (a seed, top_p): they shape replies
    if isinstance(params, Mapping) and params:
        out["params"] = dict(params)
    if cache is not None and getattr(cache, "path", None) is not None:
        out["cache"] = str(cache.path)
    return redact(out)


_LIMITS = (("concurrency", "concurrency"), ("read_timeout", "timeout"), ("connect_timeout", "connect_timeout"),
           ("deadline", "deadline"), ("max_retries", "max_retries"), ("structured_output", "structured_output"),
           ("temperature", "temperature"), ("max_tokens", "max_tokens"))


def describe_roles(roles: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, client in roles.items():
        if isinstance(client, Sequence) and not isinstance(client, (str, bytes)):
            out[name] = [describe_client(c) for c in client]
        else:
            out[name] = describe_client(client)
    return out


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def base_manifest(*, stages: Sequence[Any], roles: Mapping[str, Any], run_config: Mapping[str, Any] | None,
                  description: str, out: Path, fmt: str, concurrency: int, resume: bool,
                  limit: int | None, executor: Mapping[str, Any] | None = None,
                  record_deadline: float | None = None) -> dict[str, Any]:
    """The parts of the manifest known when the run starts, with the fingerprint of what shapes its
    records (kbvqa.runner.fingerprint: derived from the roles, stages and options recorded here)."""
    manifest = {
        "kbvqa_version": kbvqa_version(),
        "git": git_info(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "description": description,
        "state": "running",
        "started": now_iso(),
        "finished": None,
        "wall_seconds": None,
        "output": str(out),
        "format": fmt,
        "runner": {"executor": dict(executor or {"name": "local"}), "concurrency": concurrency, "resume": resume,
                   "limit": limit, "record_deadline": record_deadline},
        "run_config": redact(dict(run_config or {})),
        "stages": [describe_stage(s) for s in stages],
        "roles": describe_roles(roles),
    }
    manifest["fingerprint"] = fingerprint(manifest)
    return manifest


def write_manifest(path: Path, manifest: dict[str, Any], *, reserve: int = 0) -> None:
    """Write atomically (temp file + os.replace) so a crash never leaves half a manifest; a write that
    fails (a full disk) removes its temporary file and raises.

    `reserve` bytes of trailing spaces (valid JSON whitespace) keep room in the file: when the disk
    is full, the temporary file cannot be made, and the manifest is then overwritten in place within
    the bytes it already has, so a run that fails on a full disk can still say `failed` with counts."""
    path = Path(path)
    data = (json.dumps(manifest, indent=2, ensure_ascii=False, default=str) + "\n").encode("utf-8")
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data + b" " * reserve + (b"\n" if reserve else b""))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if not (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT) and _overwrite(path, data)):
            raise


def _overwrite(path: Path, data: bytes) -> bool:
    """Rewrite `path` in place with `data`, padded with spaces to its present size, when it fits
    (nothing new to allocate on a full disk). False when it does not fit or cannot be written."""
    try:
        size = path.stat().st_size
        if len(data) + 1 > size:
            return False
        with open(path, "r+b") as f:
            f.write(data + b" " * (size - len(data) - 1) + b"\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        return False
    return True
