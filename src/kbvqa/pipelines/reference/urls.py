"""Stage 1 — which pages contributed: every URL the trajectory touched, scored, top-5 kept (seed 001 C.1).

The rule-based pre-pass (`collect_urls`) emits one entry per tool result of three kinds: `search`
results, `image_search` results (their image kept: it feeds the reverse-search pool) and visited
pages, each visited URL its own entry, split out of the visit observation at the boundary line
"The useful information in {url} for user goal {goal} as follows:" (`kbvqa.tools.base.VISIT_HEADER`).
The same URL from the same tool twice is one entry (counted as merged).

With a model in the stage's role, one text-only call scores every entry on relevance, completeness,
clarity, answer support and necessity (1-5); the sum ranks them and the top 5 are kept. Offline, an
embedded ranker orders the entries by how many of the short reference's content words the entry's
text contains, then by the question's, then visit > search > image_search, then first touched, and
keeps the first 5 distinct pages; it gives no dimension scores (`scores: null`,
`scorer.backend: "rules"`) rather than inventing them.
An item keeps its offline selection on `--resume`; rebuild with `--no-resume` to score it by model.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from kbvqa.data.matching import content_words
from kbvqa.data.urls import canonical_url
from kbvqa.models.prompts.reference import URL_SCORES
from kbvqa.pipelines.funnel import counts, stage_record
from kbvqa.pipelines.reference.common import ReferenceStageConfig
from kbvqa.runner.stage import Context, Invalid
from kbvqa.stages import register_stage
from kbvqa.stages.ask import Ask, OneCallStage
from kbvqa.tools.base import VISIT_HEADER

ENTRY_TYPES = ("search", "image_search", "visit")
DIMENSIONS = ("relevance", "completeness", "clarity", "answer_support", "necessity")
_TYPE_ORDER = {"visit": 0, "search": 1, "image_search": 2}
Score = Annotated[int, Field(ge=1, le=5)]


def _boundary() -> re.Pattern[str]:
    """VISIT_HEADER as a regex: the URL and the goal become groups, the rest is literal."""
    parts = []
    for literal, name, _, _ in string.Formatter().parse(VISIT_HEADER):
        parts.append(re.escape(literal))
        if name == "url":
            parts.append(r"(?P<url>\S+)")
        elif name == "goal":
            parts.append(r"(?P<goal>.*?)")
    return re.compile("".join(parts), re.DOTALL)


BOUNDARY = _boundary()
_VISIT_ERROR = re.compile(r"^\[visit: error\].*$", re.MULTILINE)


def split_visit(text: str) -> list[tuple[str, str, str]]:
    """(url, goal, content) for each page in a visit observation, in order; text before the first
    boundary (or without one) is not a page."""
    marks = list(BOUNDARY.finditer(text or ""))
    out = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        content = _VISIT_ERROR.sub("", text[m.end():end]).strip()
        out.append((m.group("url"), m.group("goal").strip(), content))
    return out


def collect_urls(steps: list[dict[str, Any]], content_chars: int = 1200) -> tuple[list[dict[str, Any]], Counter[str]]:
    """The C.1 pre-pass: (entries, tally). Entries carry id P1.., type, url, content; image_search
    entries also the returned image."""
    entries: list[dict[str, Any]] = []
    index: dict[tuple[str, str], int] = {}
    tally: Counter[str] = Counter()

    def add(kind: str, url: str | None, content: str, **extra: Any) -> None:
        if not url:
            tally["without_url"] += 1
            return
        key = (kind, canonical_url(url))
        if key in index:
            tally["merged_duplicates"] += 1
            return
        index[key] = len(entries)
        entries.append({"id": f"P{len(entries) + 1}", "type": kind, "url": url,
                        "content": " ".join(content.split())[:content_chars], **extra})

    for st in steps:
        tool, ok = st.get("tool"), st.get("status") == "ok"
        if tool not in ENTRY_TYPES:
            tally[f"skipped_{tool}"] += 1
            continue
        if not ok:
            tally["failed_calls"] += 1
            continue
        if tool == "visit":
            pages = split_visit(st.get("observation") or "")
            if not pages:  # an observation without the boundary line: fall back to the items' own text
                pages = [(p, "", t) for it in st.get("items") or [] if not it.get("error")
                         for p, _, t in split_visit(it.get("text") or "")]
            for url, _, content in pages:
                add("visit", url, content)
            continue
        for it in st.get("items") or []:
            text = "\n".join(x for x in (it.get("title"), it.get("text")) if x)
            if tool == "image_search":
                add("image_search", it.get("url"), text, image=it.get("image"), sha256=it.get("sha256"),
                    title=it.get("title", ""))
            else:
                add("search", it.get("url"), text, title=it.get("title", ""))
    return entries, tally


def image_results(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every image an image_search call returned, in order: the reverse-search pool's sources."""
    return [{"image": it["image"], "page_url": it.get("url"), "sha256": it.get("sha256"),
             "context": " — ".join(x for x in (it.get("title"), it.get("text")) if x)[:400]}
            for st in steps if st.get("tool") == "image_search" and st.get("status") == "ok"
            for it in st.get("items") or [] if it.get("image")]


def rules_rank(entries: list[dict[str, Any]], question: str,
               answer: str) -> list[tuple[dict[str, Any], dict[str, int]]]:
    """The offline order (module docstring): answer-term overlap, question-term overlap, tool, order."""
    a_terms, q_terms = content_words(answer), content_words(question)
    scored = []
    for pos, e in enumerate(entries):
        words = content_words(e["content"])
        ev = {"answer_terms": len(a_terms & words), "question_terms": len(q_terms & words)}
        scored.append(((-ev["answer_terms"], -ev["question_terms"], _TYPE_ORDER[e["type"]], pos), e, ev))
    return [(e, ev) for _, e, ev in sorted(scored, key=lambda x: x[0])]


class PageScore(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    relevance: Score
    completeness: Score
    clarity: Score
    answer_support: Score
    necessity: Score
    reason: str


class UrlReply(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pages: list[PageScore] = Field(min_length=1)


class UrlConfig(ReferenceStageConfig):
    role: str = "vision"  # any chat model will do: the call is text-only
    top_k: int = Field(5, ge=1)
    content_chars: int = Field(1200, ge=100)  # of each entry's text shown to the scorer
    observation_chars: int = Field(3000, ge=100)  # of each step's observation kept for the synthesis


def _links_block(entries: list[dict[str, Any]]) -> str:
    return "\n\n".join(f"[ID {e['id']}] type={e['type']} — URL: {e['url']}\n{e['content']}" for e in entries)


@register_stage
class UrlScoring(OneCallStage):
    """Records from `records.intake`; adds `urls` {entries, selected, image_results, scorer}."""

    name = "reference-urls"
    version = "1"
    config_model = UrlConfig
    asks = Ask(URL_SCORES, UrlReply, "URL scoring")

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        c: UrlConfig = self.config  # type: ignore[assignment]
        steps = record.get("steps") or []
        entries, tally = collect_urls(steps, c.content_chars)
        selected: list[dict[str, Any]]
        if not entries:
            selected, scorer = [], {"backend": "none", "note": "the trajectory touched no URL"}
        elif c.role not in ctx.roles:
            selected, pages = [], set()
            for e, ev in rules_rank(entries, record.get("question", ""), record.get("answer", "")):
                if canonical_url(e["url"]) not in pages and len(selected) < c.top_k:
                    pages.add(canonical_url(e["url"]))
                    selected.append({**_public(e), "scores": None, "total": None, "rule_evidence": ev})
            scorer = {"backend": "rules", "rule": "answer-term overlap, question-term overlap, visit>search>image, "
                                                  "first touched; distinct pages"}
        else:
            reply, scorer = await self.call(ctx, question=record.get("question", ""), answer=record.get("answer", ""),
                                            links_raw=_links_block(entries), top_k=c.top_k,
                                            check=lambda r: self._select(r, entries, c.top_k))
            selected = self._select(reply, entries, c.top_k)
        for rank, s in enumerate(selected, 1):
            s["rank"] = rank
        slim = [{k: v for k, v in st.items() if k not in ("items", "observation_source")}
                | {"observation": (st.get("observation") or "")[: c.observation_chars]} for st in steps]
        pool = image_results(steps)
        payload = {"entries": [_public(e) for e in entries], "selected": selected, "image_results": pool,
                   "scorer": scorer}
        by_type = Counter(e["type"] for e in entries)
        tally_out = counts(entries=len(entries), by_type=by_type, selected=len(selected),
                           image_results=len(pool), skipped=tally)
        out = stage_record({**record, "steps": slim}, "urls", payload, tally_out)
        return out

    @staticmethod
    def _select(reply: UrlReply, entries: list[dict[str, Any]], top_k: int) -> list[dict[str, Any]]:
        by_id = {e["id"]: e for e in entries}
        seen: set[str] = set()
        rows = []
        for p in reply.pages:
            pid = p.id.strip().removeprefix("ID ").strip()
            if pid not in by_id:
                raise Invalid(f"URL scoring: the reply names page {p.id!r}, which was not offered "
                              f"(offered {entries[0]['id']}..{entries[-1]['id']})")
            if pid in seen:
                raise Invalid(f"URL scoring: the reply scores page {pid!r} twice")
            seen.add(pid)
            scores = {d: getattr(p, d) for d in DIMENSIONS}
            rows.append({**_public(by_id[pid]), "scores": scores, "total": sum(scores.values()), "reason": p.reason})
        rows.sort(key=lambda r: -r["total"])  # stable: equal totals keep the model's order
        return rows[:top_k]


def _public(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry without its content (the journal keeps URLs, not page text)."""
    return {k: v for k, v in entry.items() if k != "content" and v not in (None, "")}
