"""Cassettes: answer model calls from a recording (CI, exact re-runs of a published run).

A cassette is JSONL, one line per recorded call: {"key", "request": summary, "response": ChatResult}.
The key is `make_key` over the request content only (backend "replay", no model or URL), so a
cassette recorded against one server replays anywhere. In replay mode a miss is an error result,
never a live call; record mode forwards misses to `inner` and appends ok/invalid results (errors are
not recorded, so a re-record retries them) — through the outbox, so inside a record the driver does
the appending, whichever node ran it.

Nothing is locked in by a recording: in record mode a recorded `invalid` reply, or an `ok` one a
stage refused (`ChatResult.reject`, which appends a line {"key", "rejected": reason}), is asked
again and the new reply appended after it. The later line of a key is the one a replay serves, so
the cassette of a run that saw the refused reply (copied before the resume) replays it exactly, and
the cassette after the resume replays what the resumed run saw.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from kbvqa.data.errors import DataError
from kbvqa.data.jsonl import read_jsonl
from kbvqa.data.outbox import append_line
from kbvqa.data.schema import Provenance, Usage
from kbvqa.models.cache import canonical_json, make_key
from kbvqa.models.result import ChatResult, ModelClient


def _summary(messages: list[dict], params: dict[str, Any], prompt_version: str) -> dict[str, Any]:
    """A short human-readable request summary (image data URLs elided)."""
    out = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, list):
            parts = [p.get("text", "") if p.get("type") == "text" else "<image>" for p in c if isinstance(p, dict)]
            c = " ".join(parts)
        out.append({"role": m.get("role"), "content": str(c)[:300]})
    return {"messages": out, "params": json.loads(canonical_json(params)), "prompt_version": prompt_version}


class ReplayClient:
    """ModelClient answering from a cassette (provenance backend="replay")."""

    backend = "replay"

    def __init__(self, cassette_path: str | Path, *, mode: Literal["replay", "record"] = "replay",
                 inner: ModelClient | None = None):
        if mode not in ("replay", "record"):
            raise ValueError(f"mode must be 'replay' or 'record', not {mode!r}")
        if mode == "record" and inner is None:
            raise ValueError("record mode needs an inner client to call")
        self.path = Path(cassette_path)
        self.mode = mode
        self.inner = inner
        inner_model = inner.provenance.model if inner is not None else None
        self.provenance = Provenance(backend="replay", model=inner_model)
        self.total_usage = Usage()
        self._entries: dict[str, ChatResult] = {}
        self._stale: set[str] = set()  # keys whose recorded reply a stage refused: record mode asks again
        self._lock = threading.Lock()  # the append is synchronous; works across event loops
        if self.path.exists():
            self._load()
        elif mode == "replay":
            raise FileNotFoundError(f"cassette not found: {self.path}")

    def __getstate__(self) -> dict[str, Any]:
        """Pickle with the recorded entries (a worker on another node need not see the cassette file)
        but without the lock, which a new process makes afresh."""
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _load(self) -> None:
        try:
            for n, rec in read_jsonl(self.path):
                try:
                    if "rejected" in rec and "response" not in rec:  # a stage refused the reply before it
                        self._stale.add(rec["key"])
                        continue
                    self._entries[rec["key"]] = ChatResult.model_validate(rec["response"])
                    self._stale.discard(rec["key"])
                except (ValueError, KeyError) as e:
                    raise ValueError(f"{self.path}:{n}: bad cassette line ({e})") from None
        except DataError as e:
            raise ValueError(f"{self.path}:{e.row}: bad cassette line ({e.message})") from None

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def key(messages: list[dict], params: dict[str, Any], prompt_version: str,
            schema: type[BaseModel] | dict | None) -> str:
        return make_key("replay", "", "", messages, params, prompt_version, schema)

    async def chat(self, messages: list[dict], *, schema: type[BaseModel] | dict | None = None,
                   prompt_version: str = "", **params: Any) -> ChatResult:
        t0 = time.perf_counter()
        key = self.key(messages, params, prompt_version, schema)
        hit = self._entries.get(key)
        if hit is not None and self.mode == "record" and (key in self._stale or hit.status != "ok"):
            hit = None  # refused or unusable when recorded: never locked in, asked again
        if hit is not None:
            prov = Provenance(backend="replay", model=hit.provenance.model, base_url=hit.provenance.base_url,
                              prompt_version=prompt_version or None)
            res = hit.model_copy(update={"cached": True, "provenance": prov,
                                         "usage": Usage(seconds=time.perf_counter() - t0)})
            if self.mode == "record":
                res.on_reject(functools.partial(self._refused, key))
        elif self.mode == "replay":
            res = ChatResult(status="error", reason=f"not in cassette: {key[:12]} ({self.path.name})",
                             usage=Usage(seconds=time.perf_counter() - t0),
                             provenance=self.provenance.model_copy(update={"prompt_version": prompt_version or None}))
        else:
            assert self.inner is not None
            res = await self.inner.chat(messages, schema=schema, prompt_version=prompt_version, **params)
            if res.status != "error":
                await self._append(key, messages, params, prompt_version, res)
            if res.status == "ok":
                res.on_reject(functools.partial(self._refused, key))
        self.total_usage = self.total_usage.add(res.usage)
        return res

    async def _append(self, key: str, messages: list[dict], params: dict[str, Any], prompt_version: str,
                      res: ChatResult) -> None:
        line = json.dumps({"key": key, "request": _summary(messages, params, prompt_version),
                           "response": res.model_dump(mode="json")}, ensure_ascii=False)
        with self._lock:
            if key in self._entries and key not in self._stale and self._entries[key].status == "ok":
                return
            self._entries[key] = res
            self._stale.discard(key)
        append_line(self.path.resolve(), line)  # the driver appends it (kbvqa.data.outbox), on Ray too

    def _refused(self, key: str, reason: str) -> None:
        """A stage refused the reply recorded under `key`: the line stays (a replay of this run serves
        it), a marker line follows it, and record mode asks again from now on (here and on resume)."""
        with self._lock:
            self._stale.add(key)
        append_line(self.path.resolve(), json.dumps({"key": key, "rejected": reason[:500]}, ensure_ascii=False))

    async def aclose(self) -> None:
        if self.inner is not None and hasattr(self.inner, "aclose"):
            await self.inner.aclose()  # type: ignore[attr-defined]
