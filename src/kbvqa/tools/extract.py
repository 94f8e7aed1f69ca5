"""Goal-directed extraction for `visit`: what a page says about the agent's goal.

With an `extractor` role configured (an OpenAI-compatible model; the answerer role when no extractor
is set), the page text and the goal go to the model, which must reply with strict JSON
{"rational", "evidence", "summary"} (the Tongyi DeepResearch visit contract). Offline, the rules
extractor keeps the sentences that share the most content words with the goal. Either way the item
text starts with seed 001's boundary line ("The useful information in {url} for user goal {goal} as
follows:"), which reference construction splits trajectories on.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ConfigDict

from kbvqa.data.matching import content_words
from kbvqa.data.schema import Usage
from kbvqa.models.prompts.agent import VISIT_EXTRACT
from kbvqa.models.replies import Reply
from kbvqa.tools.base import VISIT_HEADER

PAGE_CHARS = 24_000  # of page text sent to an extraction model
_SENT = re.compile(r"(?<=[.!?。！？])\s+|\n+")  # a line break ends a sentence too (titles, list items)


class Extraction(Reply):
    """All three keys required, nothing else; a placeholder copied from the prompt's template ("...",
    "<the relevant passages, quoted>") is refused by `Reply`. Empty evidence is a valid "nothing here"."""

    model_config = ConfigDict(extra="forbid")
    rational: str
    evidence: str
    summary: str


class ExtractionFailed(RuntimeError):
    """The extraction model could not be used (HTTP failure or an unusable reply); `usage` is what
    the failed call still cost, so the record's accounting stays complete."""

    def __init__(self, reason: str, usage: Usage):
        super().__init__(reason)
        self.usage = usage


def rules_extract(text: str, goal: str, max_sentences: int = 4) -> Extraction:
    """The sentences sharing the most content words with the goal, in page order."""
    cues = content_words(goal)
    sents = [s.strip() for s in _SENT.split(text) if s.strip()]
    scored = sorted(((len(cues & content_words(s)), i) for i, s in enumerate(sents)), key=lambda x: (-x[0], x[1]))
    keep = sorted(i for n, i in scored[:max_sentences] if n > 0)
    evidence = " ".join(sents[i] for i in keep)
    summary = sents[keep[0]] if keep else ""
    return Extraction(rational=f"{len(keep)} sentence(s) share words with the goal", evidence=evidence,
                      summary=summary)


def visit_text(url: str, goal: str, ext: Extraction) -> str:
    body = (f"Evidence in page:\n{ext.evidence}\n\nSummary:\n{ext.summary}" if ext.evidence or ext.summary
            else "Nothing on this page addresses the goal.")
    return VISIT_HEADER.format(url=url, goal=goal) + "\n" + body


async def extract(text: str, url: str, goal: str, ctx: Any, role: str | None) -> tuple[Extraction, str, Usage]:
    """(extraction, backend, usage). `role` None (or not configured) → the rules extractor."""
    client = ctx.roles.get(role) if role and ctx is not None else None
    if client is None:
        return rules_extract(text, goal), "rules", Usage()
    res = await client.chat(VISIT_EXTRACT.messages(url=url, goal=goal, page=text[:PAGE_CHARS]), schema=Extraction,
                            prompt_version=VISIT_EXTRACT.id)
    ctx.add_usage(res.usage)
    if res.status != "ok":
        raise ExtractionFailed(f"extractor {res.status}: {res.reason}", res.usage)
    try:
        return Extraction.model_validate(res.data), f"{res.provenance.backend}:{res.provenance.model}", res.usage
    except ValueError as exc:
        raise ExtractionFailed(f"extractor reply unusable: {exc}", res.usage) from None
