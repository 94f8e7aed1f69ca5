"""The embedded extractive answerer: answers from KB text with no language model.

It reads the top retrieved article, picks the sentence that best matches the question, and extracts a
span of the kind the question asks for (a number, a year/date, or a name/phrase). It is an honest
baseline for offline runs and tests, not a competitor to an LLM answerer; predictions name it as
their producer so nobody mistakes its numbers for a model's.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field

from kbvqa.data.matching import NUMBER_WORDS
from kbvqa.data.schema import Article, Evidence, Prediction, Provenance, Sample, Section
from kbvqa.runner.stage import Context, Stage, StageConfig
from kbvqa.stages import register_stage
from kbvqa.stages.answer.retrieve import record_usage, retrieval_trail

_STOP = set("""a an the of in on at to for from by with and or is are was were be been this that these those
what which who whom whose when where why how does do did has have had it its their there about as into
than then can could would should may might many much long tall big large high wide far old over under
usually typically usual each all any some kind type""".split())
_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9])")
_TOKEN = re.compile(r"[A-Za-z][A-Za-z'-]*|\d[\d,]*(?:\.\d+)?")
_NUMBER = re.compile(r"\b\d{1,3}(?:,\d{3})+(?:\.\d+)?\b|\b\d+(?:\.\d+)?\b")
_RANGE = re.compile(r"\b(\d+(?:\.\d+)?)\s*(?:-|–|to)\s*(\d+(?:\.\d+)?)\b")
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})\b|\bAD\s+(\d{1,4})\b")
_CENTURY = re.compile(r"\b\d{1,2}(?:st|nd|rd|th) century\b")
_NUMBER_WORD = re.compile(r"\b(" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True)) + r")\b", re.I)


def question_kind(question: str) -> str:
    """'number', 'time' or 'string' from the question's wording (the answer type is not peeked at)."""
    q = question.lower()
    if re.search(r"\b(what|which|in what|in which) (year|century|decade)\b|^when\b|\bwhat date\b", q):
        return "time"
    if re.search(r"\bhow (many|much|tall|high|long|old|far|wide|big|heavy|deep)\b|\bwhat (is the )?(height|length|"
                 r"number|population|area|weight|width|depth)\b|\bweigh\b", q):
        return "number"
    return "string"


def _stem(word: str) -> str:
    """Crude suffix stripping so 'retired'/'retire' and 'engines'/'engine' meet."""
    w = word.lower()
    for suffix in ("ing", "ed", "es", "s", "e"):
        if len(w) > len(suffix) + 3 and w.endswith(suffix):
            return w[: -len(suffix)]
    return w


def _content_words(text: str) -> set[str]:
    return {_stem(w) for w in _TOKEN.findall(text) if w.lower() not in _STOP and not w[0].isdigit()}


def _sentences(sample: Sample, article: Any) -> list[tuple[str, str, str]]:
    """(sentence, section title, section id) for the article, or the sample's own evidence."""
    out = []
    if article is not None:
        for s in article.sections:
            out += [(t, s.title, str(s.index)) for t in _SENT.split(s.text) if t.strip()]
    return out


def _number_candidates(sentence: str, qwords: set[str]) -> list[tuple[str, float]]:
    cands = []
    for m in _RANGE.finditer(sentence):
        cands.append((f"{m.group(1)} - {m.group(2)}", m.start()))
    for m in _NUMBER.finditer(sentence):
        if not _YEAR.fullmatch(m.group(0)) or "year" in qwords:
            cands.append((m.group(0).replace(",", ""), m.start()))
    for m in _NUMBER_WORD.finditer(sentence):
        cands.append((str(NUMBER_WORDS[m.group(1).lower()]), m.start()))
    scored = []
    for text, pos in cands:
        following = _content_words(sentence[pos:pos + 40])
        scored.append((text, 1.0 + 2.0 * len(following & qwords) + (0.5 if " - " in text else 0.0)))
    return scored


def _time_candidates(sentence: str, question: str) -> list[tuple[str, float]]:
    if "century" in question.lower():
        return [(m.group(0), 2.0) for m in _CENTURY.finditer(sentence)]
    return [(m.group(1) or m.group(2), 1.0) for m in _YEAR.finditer(sentence)]


def _string_candidates(sentence: str, qwords: set[str], question: str) -> list[tuple[str, float]]:
    """Maximal runs of tokens that are neither stopwords nor question words, scored by shape and
    by closeness to the words the sentence shares with the question."""
    tokens = [(m.group(0), m.start()) for m in _TOKEN.finditer(sentence)]
    qlow = question.lower()
    anchor_pos = [p for t, p in tokens if _stem(t) in qwords]
    runs, cur = [], []
    for tok, pos in tokens:
        low = tok.lower()
        if low in _STOP or _stem(low) in qwords or low in qlow.split() or tok[0].isdigit():
            if cur:
                runs.append(cur)
            cur = []
        else:
            cur.append((tok, pos))
    if cur:
        runs.append(cur)
    cands = []
    for run in runs:
        run = run[:4]
        text = " ".join(t for t, _ in run)
        start = run[0][1]
        dist = min((abs(start - p) for p in anchor_pos), default=60)
        capital = all(t[0].isupper() for t, _ in run)
        score = 1.0 + (1.0 if capital else 0.0) + max(0.0, 1.5 - dist / 30.0) - 0.1 * len(run)
        if start == 0 and len(run) == 1 and not capital:
            score -= 0.5
        cands.append((text, score))
    return cands


def extract_answer(sample: Sample, article: Any) -> tuple[str | None, Evidence | None, str]:
    """(answer, evidence sentence, kind); answer None when nothing of the asked kind is found."""
    kind = question_kind(sample.question)
    qwords = _content_words(sample.question)
    best: tuple[float, str, Evidence] | None = None
    for sentence, title, sid in _sentences(sample, article):
        overlap = len(_content_words(sentence) & qwords)
        if kind == "number":
            cands = _number_candidates(sentence, qwords)
        elif kind == "time":
            cands = _time_candidates(sentence, sample.question)
        else:
            cands = _string_candidates(sentence, qwords, sample.question)
        for text, score in cands:
            total = 3.0 * overlap + score
            if best is None or total > best[0]:
                ev = Evidence(text=sentence, section_id=sid, section_title=title,
                              url=getattr(article, "url", None))
                best = (total, text.strip(" ,.;:"), ev)
    if best is None:
        return None, None, kind
    return best[1], best[2], kind


class ExtractiveConfig(StageConfig):
    top_articles: int = Field(1, ge=1)  # how many retrieved articles to read, best first


def articles_from_sections(sections: list[dict[str, Any]]) -> list[Article]:
    """Group reranked section candidates (best first) into per-article views, in first-seen order."""
    by_url: dict[str, Article] = {}
    for c in sections:
        art = by_url.setdefault(c["url"], Article(url=c["url"], title=c.get("title") or ""))
        art.sections.append(Section(index=int(c.get("section_index", 0)), title=c.get("section_title") or "",
                                    text=c.get("text") or ""))
    return list(by_url.values())


@register_stage
class ExtractiveAnswer(Stage):
    """Reads the reranked `sections` when a rerank stage ran, else the top `retrieved` article (or,
    without retrieval, the sample's entity url: an oracle setting that the output records) and writes
    a Prediction carrying the retrieval trail."""

    name = "answer-extractive"
    version = "2"
    config_model = ExtractiveConfig

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        sample = Sample.model_validate({k: v for k, v in record.items()
                                        if k in Sample.model_fields})
        urls = record.get("retrieved") or []
        setting = "retrieved"
        if record.get("sections"):
            articles: list[Any] = articles_from_sections(record["sections"])[: self.config.top_articles]
            setting = "reranked-sections"
        else:
            if not urls and sample.entity and sample.entity.url:
                urls, setting = [sample.entity.url], "oracle-entity"
            articles = [ctx.kb.get(url) if ctx.kb is not None else None for url in urls[: self.config.top_articles]]
        answer, evidence = None, None
        for article in articles:
            answer, evidence, kind = extract_answer(sample, article)
            if answer:
                break
        meta: dict[str, Any] = {"setting": setting, "question": sample.question}
        trail = retrieval_trail(record)
        if trail:
            meta["retrieval"] = trail
        pred = Prediction(sample_id=sample.id, answer=answer, retrieved=list(record.get("retrieved") or []),
                          evidence_used=[evidence] if evidence else [], usage=record_usage(record),
                          producer=Provenance(backend="rules", model=f"{self.name}-v{self.version}"),
                          meta=meta)
        return pred.record()
