"""Entity-type tagging for augmentation: the `augment-entity-type` stage run through the runner.

The vocabulary, the phrase rules, the LLM tagger and the KB fallback are the stage's
(kbvqa.stages.augment.types, re-exported here); this module runs the stage over a benchmark as a Job
and hands back one `TypeTag` per sample, in input order, for the rest of the augment pipeline. So an
LLM tagger run gets what every per-record model job gets: resume after a crash, a manifest (prompt
hash, model, counts), token and cost accounting, and one status per sample.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kbvqa.data.schema import Sample
from kbvqa.data.urls import canonical_url
from kbvqa.runner import manifest_path, read_results
from kbvqa.runner.job import Job
from kbvqa.runner.stage import Context
from kbvqa.stages.augment.types import (AMBIGUOUS_WORDS, INFOSEEK_TYPES, EntityTypeReply, TagEntityType,
                                        TagTypesConfig, TypeMatch, TypeTag, TypeVocabulary, kb_type, llm_type,
                                        plural, tag_of, tag_phrase)

__all__ = ["AMBIGUOUS_WORDS", "INFOSEEK_TYPES", "EntityTypeReply", "TypeMatch", "TypeTag", "TypeVocabulary",
           "kb_type", "llm_type", "plural", "tag_phrase", "tag_samples", "tagging_job"]



def _record(s: Sample) -> dict[str, Any]:
    ent = s.entity
    return {"id": s.id, "question": s.question, "dataset": s.dataset,
            "entity": {"url": ent.url if ent else None, "title": ent.title if ent else None}}


def tagging_job(vocab: TagTypesConfig | TypeVocabulary, *, client: Any = None, kb: Any = None,
                url_types: Mapping[str, str] | None = None) -> Job:
    """The tagging Job: the stage with its config (an augment run's `opts.tagging`, handed to the stage
    as it is; a bare vocabulary gets the stage's default role), the LLM `client` in that role
    (optional), the KB and the url -> type map (keys canonicalised here) for the fallback."""
    config = vocab if isinstance(vocab, TagTypesConfig) else TagTypesConfig.of(vocab)
    resources: dict[str, Any] = {}
    if url_types:
        resources["url_types"] = {canonical_url(k): v for k, v in url_types.items()}
    ctx = Context(roles={config.role: client} if client is not None else {}, kb=kb, resources=resources)
    return Job([TagEntityType(config)], ctx, description="augment: entity types")


def _fingerprint(records: list[dict[str, Any]], job: Job) -> str:
    """What the tags depend on: the input, the vocabulary, the url map, the KB and the tagger model.
    A journal left by a run with another fingerprint is not resumed (its tags could be stale)."""
    kb = job.ctx.kb
    tagger = job.ctx.roles.get(job.stages[0].config.role)
    parts = {"records": records, "config": job.stages[0].config.model_dump(mode="json"),
             "url_types": sorted(job.ctx.resources.get("url_types", {}).items()),
             "kb": None if kb is None else str(getattr(kb, "path", None) or type(kb).__name__),
             "tagger": repr(getattr(tagger, "provenance", tagger))}
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def _same_run(out: Path, fingerprint: str) -> bool:
    try:
        previous = json.loads(manifest_path(out).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (previous.get("run_config") or {}).get("fingerprint") == fingerprint


def tag_samples(samples: Sequence[Sample], vocab: TagTypesConfig | TypeVocabulary, *, client: Any = None,
                kb: Any = None, url_types: Mapping[str, str] | None = None, concurrency: int | None = None,
                out: str | Path | None = None, progress: bool = False,
                run_config: Mapping[str, Any] | None = None) -> list[TypeTag]:
    """Tag every sample (ids unique): phrase -> LLM (if a client is given) -> KB category, through the
    runner. Untyped samples end with `excluded="no_type"`; the LLM is only asked when the question
    names no type. `out` keeps the runner's journal (`types.jsonl`) and manifest; a rerun with the
    same input and settings resumes it (samples already tagged are not asked again), otherwise it
    starts fresh (the old journal is moved aside). Without `out` they go to a temporary folder.
    `run_config` adds to what the tagger's manifest records (an augment run: its options as used)."""
    records = [_record(s) for s in samples]
    job = tagging_job(vocab, client=client, kb=kb, url_types=url_types)
    fp = _fingerprint(records, job)
    with tempfile.TemporaryDirectory(prefix="kbvqa-types-") as tmp:
        journal = Path(out) if out is not None else Path(tmp) / "types.jsonl"
        limits = {} if concurrency is None else {"concurrency": concurrency}  # None: the runner's default
        job.run(records, out=journal, close=False, resume=_same_run(journal, fp), progress=progress,
                run_config={**dict(run_config or {}), "fingerprint": fp, "samples": len(records)}, **limits)
        by_id = {line["id"]: tag_of(line) for line in read_results(journal)}
    return [by_id[s.id] for s in samples]
