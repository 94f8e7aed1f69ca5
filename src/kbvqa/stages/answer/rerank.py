"""Section rerank stage: from retrieved articles to the few KB sections an answerer should read.

Takes the top `articles` urls of the record's ranking (image retrieval or identified entities),
collects their sections, scores them with a reranker (BM25, dense, cross-encoder or LLM; see
`kbvqa.models.rerank`) and keeps the best `sections`. Like EchoSight, the final order fuses the
reranker score with the article's retrieval score: `alpha * retrieval + (1 - alpha) * rerank`, both
min-max scaled over the candidates so neither scale dominates by accident (alpha=0 is rerank only).

Writes `sections` (the kept candidates, best first) and `rerank` ({retrieved: articles re-ordered by
their best section, scores, reranker}); the latter is the "post" stage of the retrieval record.
An article url the KB lacks is listed under `rerank.missing_articles`, not silently skipped.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from kbvqa.models.rerank import Reranker, SectionCandidate
from kbvqa.runner.stage import Context, Stage, StageConfig
from kbvqa.stages import register_stage
from kbvqa.stages.answer.retrieve import add_record_usage


class RerankConfig(StageConfig):
    articles: int = Field(5, ge=1)  # retrieved articles whose sections are candidates
    sections: int = Field(5, ge=1)  # sections kept for the answerer
    max_sections_per_article: int = Field(64, ge=1)  # very long articles: the first N sections
    alpha: float = Field(0.5, ge=0, le=1)  # weight of the retrieval score in the fused order
    store_chars: int = Field(4000, ge=0)  # section text kept on the record


def _minmax(xs: list[float]) -> list[float]:
    if not xs:
        return []
    lo, hi = min(xs), max(xs)
    return [1.0 if hi == lo else (x - lo) / (hi - lo) for x in xs]


@register_stage
class SectionRerank(Stage):
    """Reads the ctx resource `reranker` (a kbvqa.models.rerank.Reranker) and the KB."""

    name = "rerank-sections"
    version = "1"
    config_model = RerankConfig

    def __init__(self, config: RerankConfig | None = None):
        super().__init__(config)

    def candidates(self, record: dict[str, Any], ctx: Context) -> tuple[list[SectionCandidate], list[str]]:
        urls = list(record.get("retrieved") or [])[: self.config.articles]
        scores = list((record.get("retrieval") or {}).get("scores") or [])
        out, missing = [], []
        for rank, url in enumerate(urls):
            art = ctx.kb.get(url) if ctx.kb is not None else None
            if art is None:
                missing.append(url)
                continue
            visual = scores[rank] if rank < len(scores) else None
            for s in art.sections[: self.config.max_sections_per_article]:
                if not (s.text or "").strip():
                    continue
                out.append(SectionCandidate(url=art.url, title=art.title, section_index=s.index,
                                            section_title=s.title, text=s.text, visual=visual, article_rank=rank))
        return out, missing

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        if ctx.kb is None:
            raise ValueError("section rerank needs a KB (ctx.kb)")
        question = record.get("question") or ""
        cands, missing = self.candidates(record, ctx)
        reranker: Reranker = ctx.resource("reranker")
        ranked, usage = await reranker.rerank(question, cands, ctx)
        rr = _minmax([c.score for c in ranked])
        n_art = max(1, self.config.articles)
        vis_raw = [c.visual if c.visual is not None else 1.0 - c.article_rank / n_art for c in ranked]
        vis = _minmax(vis_raw)
        a = self.config.alpha
        for c, r, v in zip(ranked, rr, vis):
            c.fused = round(a * v + (1 - a) * r, 6)
        ranked.sort(key=lambda c: (-c.fused, c.article_rank, c.section_index))
        best: dict[str, float] = {}
        for c in ranked:
            best.setdefault(c.url, c.fused)
        order = list(best)
        order += [u for u in record.get("retrieved") or [] if u not in best]  # unread articles keep their order
        kept = ranked[: self.config.sections]
        out = {**record, "sections": [c.dump(self.config.store_chars) for c in kept],
               "rerank": {"reranker": reranker.name, "retrieved": order,
                          "scores": [best.get(u) for u in order], "alpha": a, "candidates": len(cands),
                          **({"missing_articles": missing} if missing else {})}}
        return add_record_usage(out, usage)
