"""Image-to-image KB retrieval as a stage: writes the ranked, entity-deduplicated article urls.

The record gains `retrieved` (ranked canonical urls) and `retrieval` (stage "initial", the ranking,
its scores and the encoder name): the retrieval-record shape the Recall@K scorer reads
({id, retrieved, stage}). A sample without an image, or whose image is missing or undecodable,
fails this stage (ValueError, FileNotFoundError, the decoder's error), which the runner records as
an `error` line; the run goes on.

The stage handles one record; encoding and search are batched across the records in flight by a
`MicroBatcher` (`retrieval_batcher`): the `image_batcher` resource when the job gives one (`kbvqa
retrieve` sizes it with --batch-size), otherwise one made on first use and kept in the context.

Helpers shared by the answer stages turn a record's retrieval trail and per-record usage into
prediction fields, so every prediction carries what was retrieved, reranked and spent.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from kbvqa.data.schema import Usage
from kbvqa.models.image_encoders import ENCODE_BATCH, ImageEncoder, encode_batch
from kbvqa.runner.stage import Context, Stage, StageConfig
from kbvqa.stages import register_stage
from kbvqa.stages.batcher import MicroBatcher

Ranking = list[tuple[str, float]]


class RetrieveConfig(StageConfig):
    k: int = Field(20, ge=1)  # articles kept


def search_batch(index: Any, encoder: ImageEncoder, queries: list[tuple[Path, int]]) -> list[Ranking | Exception]:
    """Encode a batch of query images in one encoder call and search the index with them in one
    call: per query its top-k (url, score) ranking, or the exception that kept its image out."""
    results: list[Any] = encode_batch(encoder, [path for path, _ in queries])
    encoded = [i for i, r in enumerate(results) if not isinstance(r, Exception)]
    for k in sorted({queries[i][1] for i in encoded}):  # one k per job in practice
        rows = [i for i in encoded if queries[i][1] == k]
        for i, ranked in zip(rows, index.search(np.stack([results[i] for i in rows]), k=k)):
            results[i] = ranked
    return results


def retrieval_batcher(index: Any, encoder: ImageEncoder, *, batch_size: int = ENCODE_BATCH,
                      max_wait: float = 0.005) -> MicroBatcher:
    """The batcher ImageRetrieve submits (image path, k) to. One batch runs at a time: a neural
    encoder already uses every core or the GPU, and one batched search reads a flat index once for
    the whole batch instead of once per query."""
    return MicroBatcher(functools.partial(search_batch, index, encoder), max_batch=batch_size, max_wait=max_wait,
                        name=f"retrieve ({encoder.name})")


@register_stage
class ImageRetrieve(Stage):
    """Reads ctx resources `image_index`, `image_encoder`, (optional) `image_root` and `image_batcher`."""

    name = "retrieve-image"
    version = "2"
    config_model = RetrieveConfig

    def __init__(self, config: RetrieveConfig | None = None):
        super().__init__(config)

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        index, encoder = ctx.resource("image_index"), ctx.resource("image_encoder")
        if index.encoder != encoder.name:
            raise ValueError(f"index was built with {index.encoder!r} but the encoder is {encoder.name!r}")
        images = record.get("images") or []
        if not images:
            raise ValueError(f"sample {record.get('id')!r} has no image to retrieve with")
        path = ctx.image_path(images[0])
        batcher = ctx.resource("image_batcher", None)
        if batcher is None:  # a job that did not size one: every record of it shares this one
            batcher = ctx.resources.setdefault("image_batcher", retrieval_batcher(index, encoder))
        ranked = await batcher.submit((path, self.config.k))
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
