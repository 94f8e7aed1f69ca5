"""Image-to-image KB retrieval as a stage: writes the ranked, entity-deduplicated article urls.

The record gains `retrieved` (ranked canonical urls) and `retrieval` (stage "initial", the ranking,
its scores and the encoder name): the retrieval-record shape the Recall@K scorer reads
({id, retrieved, stage}). A sample whose image is missing fails this stage with FileNotFoundError,
which the runner records as an `error` line; the run goes on.

Helpers shared by the answer stages turn a record's retrieval trail and per-record usage into
prediction fields, so every prediction carries what was retrieved, reranked and spent.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from kbvqa.data.images import resolve_image
from kbvqa.data.schema import Usage
from kbvqa.kb.image_index import ImageIndex
from kbvqa.models.image_encoders import ImageEncoder
from kbvqa.runner.stage import Context, Stage, StageConfig, error_reason
from kbvqa.stages import register_stage


class RetrieveConfig(StageConfig):
    k: int = 20


#: Neural encoders run one batch at a time (torch already uses every core); the histogram baseline is
#: plain numpy and may run in parallel threads. One lock per encoder object, made on first use.
_ENCODER_LOCKS: "weakref.WeakKeyDictionary[Any, threading.Lock]" = weakref.WeakKeyDictionary()


def _encoder_lock(encoder: Any) -> Any:
    if getattr(encoder, "baseline", False):
        return contextlib.nullcontext()
    try:
        return _ENCODER_LOCKS.setdefault(encoder, threading.Lock())
    except TypeError:  # not weak-referenceable: serialise on a lock kept on the class
        return _ENCODER_LOCKS.setdefault(type(encoder), threading.Lock())


@register_stage
class ImageRetrieve(Stage):
    """Reads ctx resources `image_index`, `image_encoder` and (optional) `image_root`."""

    name = "retrieve-image"
    version = "2"
    config_model = RetrieveConfig

    def __init__(self, config: RetrieveConfig | None = None):
        super().__init__(config)

    def _encode_search(self, index: ImageIndex, encoder: ImageEncoder, path: Path) -> list[tuple[str, float]]:
        with _encoder_lock(encoder):
            vec = encoder.encode([path])
        return index.search(vec, k=self.config.k)[0]

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        index, encoder = ctx.resource("image_index"), ctx.resource("image_encoder")
        if index.encoder != encoder.name:
            raise ValueError(f"index was built with {index.encoder!r} but the encoder is {encoder.name!r}")
        images = record.get("images") or []
        if not images:
            raise ValueError(f"sample {record.get('id')!r} has no image to retrieve with")
        path = ctx.image_path(images[0])
        ranked = await asyncio.to_thread(self._encode_search, index, encoder, path)
        urls = [u for u, _ in ranked]
        return {**record, "retrieved": urls,
                "retrieval": {"stage": "initial", "encoder": encoder.name, "retrieved": urls,
                              "scores": [round(s, 6) for _, s in ranked]}}


def add_record_usage(record: dict[str, Any], usage: Usage | None) -> dict[str, Any]:
    """Accumulate a stage's model usage on the record (`_usage`), for the prediction to report."""
    if usage is None:
        return record
    prev = Usage.model_validate(record.get("_usage") or {})
    return {**record, "_usage": prev.add(usage).model_dump()}


def record_usage(record: dict[str, Any]) -> Usage:
    return Usage.model_validate(record.get("_usage") or {})


def retrieval_trail(record: dict[str, Any]) -> dict[str, Any]:
    """{"initial": {...}, "post": {...}, "identify": {...}}: whichever retrieval steps ran."""
    out: dict[str, Any] = {}
    if isinstance(record.get("image_retrieval"), dict):  # image retrieval that ran before identify
        r = dict(record["image_retrieval"])
        out[r.pop("stage", "initial")] = r
    if isinstance(record.get("retrieval"), dict):
        r = dict(record["retrieval"])
        stage = r.pop("stage", "initial")
        if stage == "identify" and isinstance(record.get("identify"), dict):
            r = {**record["identify"], **r}
        out[stage] = r
    if isinstance(record.get("rerank"), dict):
        out["post"] = record["rerank"]
    return out


def retrieval_records(prediction: dict[str, Any]) -> list[dict[str, Any]]:
    """Recall@K records ({id, retrieved, stage}) from one prediction line: one per retrieval stage.

    A failed line (status error/invalid) still yields an empty `initial` record, so it counts as a
    miss rather than vanishing from the denominator."""
    pid = prediction.get("id") or prediction.get("sample_id")
    trail = (prediction.get("meta") or {}).get("retrieval") or retrieval_trail(prediction)
    recs = [{"id": pid, "retrieved": list(v.get("retrieved") or []), "stage": stage}
            for stage, v in trail.items() if isinstance(v, dict) and "retrieved" in v]
    if not recs:
        recs = [{"id": pid, "retrieved": list(prediction.get("retrieved") or []), "stage": "initial"}]
    return recs


def batch_retrieve(records: Iterable[dict[str, Any]], index: ImageIndex, encoder: ImageEncoder, *,
                   image_root: Path | None = None, k: int = 20, batch_size: int = 64,
                   on_batch: Callable[[int], None] | None = None) -> Iterator[dict[str, Any]]:
    """Retrieval records for many samples, encoding query images `batch_size` at a time (a neural
    encoder is several times faster batched than one image per call).

    Yields one line per input record, in input order: {id, retrieved, stage, scores, encoder,
    status}; a sample without an image or with a missing / undecodable one gets status "error", an
    empty ranking and the reason, so it counts as a miss and is never dropped."""
    from kbvqa.models.image_encoders import encode_files

    if index.encoder != encoder.name:
        raise ValueError(f"index was built with {index.encoder!r} but the encoder is {encoder.name!r}")

    def flush(batch: list[tuple[str, Path | None, str]]) -> Iterator[dict[str, Any]]:
        paths = [p for _, p, _ in batch if p is not None]
        vecs, kept, failed = encode_files(encoder, paths, batch_size=max(1, len(paths)))
        results = index.search(vecs, k=k) if len(vecs) else []
        by_path: dict[int, Any] = dict(zip(kept, results))
        j = 0
        for rid, p, err in batch:
            line: dict[str, Any] = {"id": rid, "retrieved": [], "stage": "initial", "scores": [],
                                    "encoder": encoder.name, "status": "error"}
            if p is None:
                line["reason"] = err
            else:
                if j in by_path:
                    ranked = by_path[j]
                    line.update(retrieved=[u for u, _ in ranked], scores=[round(s, 6) for _, s in ranked],
                                status="ok")
                else:
                    line["reason"] = failed.get(j, "not encoded")
                j += 1
            yield line
        if on_batch:
            on_batch(len(batch))

    batch: list[tuple[str, Path | None, str]] = []
    seen: set[str] = set()
    for rec in records:
        rid = str(rec.get("id"))
        if rid in seen:
            raise ValueError(f"duplicate sample id {rid!r} in the retrieval input")
        seen.add(rid)
        images = rec.get("images") or []
        if not images:
            batch.append((rid, None, f"ValueError: sample {rid!r} has no image to retrieve with"))
        else:
            try:
                batch.append((rid, resolve_image(images[0], image_root), ""))
            except (ValueError, FileNotFoundError) as exc:
                batch.append((rid, None, error_reason(exc)))
        if len(batch) >= batch_size:
            yield from flush(batch)
            batch = []
    if batch:
        yield from flush(batch)
