"""Identify-then-rank (IBA-like): a vision model names the entity, the KB resolves the names.

The `vision` role sees the image and question and replies {"entities": ["name", ...]} (most likely
first; a blank name or the prompt's own example makes the reply invalid, and the call counts in the
run's usage whatever its outcome). Each name is resolved to a KB article: a url as given, the Wikipedia url the name implies
(E-VQA and InfoSeek KBs key articles by en.wikipedia urls), then a title match among FTS hits, then
the best FTS hit (marked `fuzzy`). Unresolved names are kept on the record. The resolved urls become
the record's `retrieved` ranking (stage "identify"); with `keep_image_retrieval` the image ranking
that ran before is appended after them.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, ClassVar

from pydantic import Field

from kbvqa.data.urls import canonical_url, title_to_url
from kbvqa.models.prompts.answer import IDENTIFY_ENTITY
from kbvqa.models.replies import NonBlank, Reply
from kbvqa.models.result import call_model
from kbvqa.runner.stage import Context, Stage, StageConfig
from kbvqa.stages import register_stage
from kbvqa.stages.answer.retrieve import add_record_usage


class EntityGuess(Reply):
    """`entities` is required; each name must be a real name (not blank, not the prompt's example
    "title" or "..."). An empty list is a valid "cannot tell": the image ranking then stands alone."""

    entities: list[NonBlank]
    placeholder_examples: ClassVar[tuple[str, ...]] = ("title", "name", "entity", "wikipedia article title")


def _norm(title: str) -> str:
    t = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode().lower()
    t = re.sub(r"\s*\([^)]*\)\s*", " ", t)  # "Mercury (planet)" ~ "mercury"
    return " ".join(re.findall(r"\w+", t))


def resolve_entity(kb: Any, name: str, fts_k: int = 20) -> tuple[str | None, str]:
    """(canonical url or None, method): url | wiki-url | title | fuzzy | unresolved."""
    name = name.strip()
    if not name:
        return None, "unresolved"
    if "://" in name:
        return (canonical_url(name), "url") if name in kb else (None, "unresolved")
    try:
        guess: str | None = title_to_url(name)
    except ValueError:  # nothing of the name survives as a title ("_"): only the search can place it
        guess = None
    if guess is not None and guess in kb:
        return guess, "wiki-url"
    hits = kb.search(name, k=fts_k)
    want = _norm(name)
    titles: dict[str, str] = {}
    for h in hits:
        titles.setdefault(h.url, h.title)
    for url, title in titles.items():
        if _norm(title) == want:
            return canonical_url(url), "title"
    for url, title in titles.items():
        nt = _norm(title)
        if nt and (want in nt or nt in want):
            return canonical_url(url), "title-partial"
    if titles:
        return canonical_url(next(iter(titles))), "fuzzy"
    return None, "unresolved"


class IdentifyConfig(StageConfig):
    candidates: int = Field(3, ge=1)
    keep_image_retrieval: bool = True
    send_image: bool = True


@register_stage
class IdentifyEntities(Stage):
    name = "identify-entity"
    version = "1"
    config_model = IdentifyConfig
    prompts = (IDENTIFY_ENTITY,)

    def __init__(self, config: IdentifyConfig | None = None, role: str = "vision"):
        super().__init__(config)
        self.role = role

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        if ctx.kb is None:
            raise ValueError("identify needs a KB to resolve entity names (ctx.kb)")
        images = record.get("images") or []
        paths = []
        if self.config.send_image and images:
            paths = [ctx.image_path(images[0])]
        question = record.get("question") or ""
        messages = IDENTIFY_ENTITY.messages(paths, question_raw=question, n=self.config.candidates)
        client = ctx.role(self.role)
        kwargs = ({"payload": {"id": record.get("id"), "question": question, "image": str(paths[0]) if paths else None}}
                  if getattr(client, "backend", "") == "rules" else {})
        guess, result = await call_model(client, messages, EntityGuess, ctx=ctx, who=self.role,
                                         prompt_version=IDENTIFY_ENTITY.id, **kwargs)
        names = guess.entities[: self.config.candidates]
        resolved, unresolved, methods = [], [], {}
        for n in names:
            url, how = resolve_entity(ctx.kb, n)
            if url is None:
                unresolved.append(n)
                continue
            methods[n] = {"url": url, "method": how}
            if url not in resolved:
                resolved.append(url)
        ranking = list(resolved)
        if self.config.keep_image_retrieval:
            ranking += [u for u in record.get("retrieved") or [] if u not in resolved]
        scores = [round(1.0 - i / max(1, len(ranking)), 6) for i in range(len(ranking))]
        out = {**record, "retrieved": ranking,
               "identify": {"names": names, "resolved": methods, "unresolved": unresolved, "retrieved": ranking,
                            "model": result.provenance.model},
               "retrieval": {"stage": "identify", "retrieved": ranking, "scores": scores}}
        if isinstance(record.get("retrieval"), dict):
            out["image_retrieval"] = record["retrieval"]
        return add_record_usage(out, result.usage)
