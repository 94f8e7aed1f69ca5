"""Identify-then-rank (IBA-like): a vision model names the entity, the KB resolves the names.

The `vision` role sees the image and question and replies {"entities": ["name", ...]} (most likely
first). Each name is resolved to a KB article: a url as given, the Wikipedia url the name implies
(E-VQA and InfoSeek KBs key articles by en.wikipedia urls), then a title match among FTS hits, then
the best FTS hit (marked `fuzzy`). Unresolved names are kept on the record. The resolved urls become
the record's `retrieved` ranking (stage "identify"); with `keep_image_retrieval` the image ranking
that ran before is appended after them.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from kbvqa.data.urls import canonical_url
from kbvqa.models.images import user_message
from kbvqa.stages.base import Context, Invalid, Stage, StageConfig
from kbvqa.stages.retrieve import add_record_usage

PROMPT_VERSION = "identify-entity-v1"
SYSTEM = (
    "Identify the specific entity shown in the image (a species, building, landmark, artwork, vehicle "
    "model, ...) as a Wikipedia article title. Reply with JSON only: {\"entities\": [\"title\", ...]} "
    "with up to {n} candidates, most likely first."
)


class EntityGuess(BaseModel):
    entities: list[str]


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
    guess = "https://en.wikipedia.org/wiki/" + name.replace(" ", "_")
    if guess in kb:
        return canonical_url(guess), "wiki-url"
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
    candidates: int = 3
    keep_image_retrieval: bool = True
    send_image: bool = True


class IdentifyEntities(Stage):
    name = "identify-entity"
    version = "1"
    config_model = IdentifyConfig

    def __init__(self, config: IdentifyConfig | None = None, image_root: Path | None = None, role: str = "vision"):
        super().__init__(config)
        self.image_root, self.role = image_root, role

    def _system(self) -> str:
        return SYSTEM.replace("{n}", str(self.config.candidates))

    def prompt_versions(self) -> dict[str, str]:
        import hashlib

        return {PROMPT_VERSION: hashlib.sha256(SYSTEM.encode()).hexdigest()}

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        if ctx.kb is None:
            raise ValueError("identify needs a KB to resolve entity names (ctx.kb)")
        images = record.get("images") or []
        paths = []
        if self.config.send_image and images:
            p = Path(images[0])
            p = p if p.is_absolute() or self.image_root is None else Path(self.image_root) / p
            if not p.is_file():
                raise FileNotFoundError(f"image not found: {p}")
            paths = [p]
        question = record.get("question") or ""
        messages = [{"role": "system", "content": self._system()},
                    user_message(f"Question about the image: {question}\nWhich entity is shown?", paths)]
        client = ctx.role(self.role)
        kwargs = ({"payload": {"id": record.get("id"), "question": question, "image": str(paths[0]) if paths else None}}
                  if getattr(client, "backend", "") == "rules" else {})
        result = await client.chat(messages, schema=EntityGuess, prompt_version=PROMPT_VERSION, **kwargs)
        if result.status == "error":
            raise RuntimeError(f"vision call failed: {result.reason}")
        if result.status == "invalid":
            raise Invalid(f"vision reply unusable: {result.reason}")
        names = [n for n in result.as_model(EntityGuess).entities if isinstance(n, str)][: self.config.candidates]
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
