"""What every curation stage shares: the keep/drop contract, the disabled switch, the corpus-level
decisions, and the post fields the prompts read.

**Keep or drop.** A stage returns a `Verdict`: its payload (stored under `curate.<key>` in the record,
whatever the outcome, so a curator sees the scores behind a decision) and, when the post must go, a
reason code and a detail. A drop is an outcome, not a failure: the record ends `ok` in the stage's
journal with `drop = {stage, reason, detail}`, is never re-run on `--resume`, and goes to
`dropped.jsonl`. Failures keep the runner's meaning — a model stage without a model raises
`NeedsModel` (status `needs_model`, reason "NeedsModel: …", retried on `--resume` once a model is
configured), a failed call is `error`, an unusable reply `invalid`; none of them is ever a keep or a
drop.

**Disabled stages** (`enabled = false` in `[curate.<stage>]`) pass every post through with
`{"disabled": true}` as their payload, so a funnel can run without, say, a VLM, and the funnel table
says which stages did not look.

**Corpus stages** (de-duplication, per-tag top-K, balancing) decide over all the posts that reach
them, not one at a time. The pipeline computes their decisions before the stage's job
(`CorpusStage.decide`) and hands them over as a resource; the stage then writes each post's decision
through the runner like any other stage, so those decisions get a journal and a manifest too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import Field

from kbvqa.pipelines.funnel import FunnelStageConfig
from kbvqa.runner.stage import Context, Stage
from kbvqa.stages.ask import OneCallStage, ask

DROP = "drop"
ITEM = "item"


class CurateStageConfig(FunnelStageConfig):
    """`[curate.<stage>]` of a curate.toml: a misspelt key is an error."""

    enabled: bool = True


class ModelStageConfig(CurateStageConfig):
    """A stage that asks a model: which role answers it and how many post images it sees."""

    role: str = "vision"
    max_images: int = Field(4, ge=0, le=16)


@dataclass
class Verdict:
    payload: dict[str, Any] = field(default_factory=dict)
    drop: str | None = None  # a reason code (snake_case); None keeps the post
    detail: str = ""
    item: dict[str, Any] | None = None  # updates to the benchmark item (refinement stages)


def stage_payload(record: dict[str, Any], key: str) -> dict[str, Any]:
    return ((record.get("curate") or {}).get(key)) or {}


def with_verdict(record: dict[str, Any], key: str, verdict: Verdict) -> dict[str, Any]:
    out = {**record, "curate": {**(record.get("curate") or {}), key: verdict.payload}}
    if verdict.item is not None:
        out[ITEM] = {**item(record), **verdict.item}
    if verdict.drop:
        out[DROP] = {"stage": key, "reason": verdict.drop, "detail": verdict.detail}
    return out


class CurateStage(Stage):
    """Subclasses set `key` (the funnel row and the record field) and implement `check`."""

    key: ClassVar[str] = ""
    config_model = CurateStageConfig

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        if record.get(DROP):  # never reached through the pipeline; a hand-fed dropped post stays dropped
            return record
        if not self.config.enabled:
            return with_verdict(record, self.key, Verdict({"disabled": True}))
        return with_verdict(record, self.key, await self.check(record, ctx))

    async def check(self, record: dict[str, Any], ctx: Context) -> Verdict:  # pragma: no cover
        raise NotImplementedError


def decisions_resource(key: str) -> str:
    return f"curate_{key}_decisions"


class CorpusStage(CurateStage):
    """A stage whose decisions depend on every post that reaches it: `decide` runs first, over those
    posts in input order, and returns {id: Verdict}; `check` hands each post its own."""

    def decide(self, records: Iterable[dict[str, Any]]) -> dict[str, Verdict]:  # pragma: no cover
        """Decisions over `records` (streamed once, in input order: keep only what deciding needs)."""
        raise NotImplementedError

    def resources(self, records: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """The job's resource: the decisions as plain dicts (they pickle to Ray actors)."""
        if not self.config.enabled:
            return {decisions_resource(self.key): {}}
        return {decisions_resource(self.key): {rid: {"payload": v.payload, "drop": v.drop, "detail": v.detail}
                                               for rid, v in self.decide(records).items()}}

    async def check(self, record: dict[str, Any], ctx: Context) -> Verdict:
        decisions = ctx.resource(decisions_resource(self.key))
        d = decisions.get(record["id"])
        if d is None:
            raise KeyError(f"the {self.key} stage decided over another set of posts: rerun `curate run` "
                           f"(it recomputes corpus decisions) — no decision for {record['id']!r}")
        return Verdict(d["payload"], d["drop"], d["detail"])


# ------------------------------------------------------------------------------------ post fields


def post_fields(record: dict[str, Any]) -> dict[str, str]:
    """The post's title and text as the prompts take them."""
    return {"title": record.get("title") or "", "text": record.get("text") or ""}


def post_text(record: dict[str, Any]) -> str:
    """Title and text as one string (the title is left out when the text repeats it)."""
    title, text = (record.get("title") or "").strip(), (record.get("text") or "").strip()
    if not title or title in text:
        return text
    return f"{title}\n{text}" if text else title


def ranked_comments(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Comments most liked first (ties keep the posting order)."""
    comments = [c for c in record.get("comments") or [] if (c.get("text") or "").strip()]
    return sorted(comments, key=lambda c: -int(c.get("likes") or 0))


def comment_list(record: dict[str, Any], limit: int = 10, chars: int = 600) -> list[str]:
    return [c["text"].strip()[:chars] for c in ranked_comments(record)[:limit]]


def kept_images(record: dict[str, Any], limit: int | None = None) -> list[str]:
    """Paths of the post's readable images (from the image check), at most `limit`."""
    kept = [im["path"] for im in stage_payload(record, "images").get("kept") or []]
    return kept if limit is None else kept[:limit]


def item(record: dict[str, Any]) -> dict[str, Any]:
    """The benchmark item as refined so far: question, answer, language (and later category, intent).

    Before standardisation (or with it disabled) it is drafted from the post: the question is the
    post's text; the answer is the post's own `answer`, else the comment the plausibility check chose,
    else none — labelled by `answer_source`, never invented; category and intent are the post's own."""
    if record.get(ITEM):
        return dict(record[ITEM])
    answer, source = record.get("answer"), "post"
    if not answer:
        chosen = stage_payload(record, "plausibility").get("comment_text")
        answer, source = (chosen, "plausible_comment") if chosen else (None, None)
    labels = {k: record[k] for k in ("category", "intent") if record.get(k)}  # the post's own, until classified
    return {"question": post_text(record), "answer": answer, "answer_source": source,
            "language": stage_payload(record, "language").get("language") or record.get("language"), **labels}



# ------------------------------------------------------------------------------------ model calls


async def consult(ctx: Context, config: ModelStageConfig, prompt: Any, reply_model: type, record: dict[str, Any], *,
                  what: str, images: bool = True, params: dict[str, Any] | None = None,
                  check: Callable[[Any], None] | None = None, model_index: int | None = None,
                  **values: Any) -> tuple[Any, dict[str, Any]]:
    """One strict-JSON model call for `record` through the reference stages' `ask` (the one place a
    pipeline asks a model: NeedsModel offline, usage counted, `error` / `invalid` on failure); with
    `images`, the post's readable images go with it (at most `max_images`). `check` is the stage's
    contract beyond the reply model: a reply it refuses is `invalid` and never served again from a
    cache (`ask`); `model_index` picks one model of a role that lists several."""
    pics = kept_images(record, config.max_images) if images and config.max_images else []
    return await ask(ctx, config.role, prompt, reply_model, what=f"{what} ({record['id']})", images=pics,
                     params=params, check=check, model_index=model_index, **values)


class AskStage(OneCallStage, CurateStage):
    """A curation stage that is one model call about the post: `asks` declares it (prompt, reply
    model, name, images or not; `prompts` follows, as for every `OneCallStage`), `values` fills the
    prompt (the post's title and text unless the stage says otherwise), and `decide` turns the reply
    and the judge's provenance into a keep or a drop. A stage with its own flow overrides `check` and
    still calls `self.ask`, which sends the post's images and names the post in every reason."""

    config_model = ModelStageConfig

    async def ask(self, record: dict[str, Any], ctx: Context, *, check: Callable[[Any], None] | None = None,
                  **values: Any) -> tuple[Any, dict[str, Any]]:
        a = self.asks
        return await consult(ctx, self.config, a.prompt, a.reply_model, record,  # type: ignore[arg-type]
                             what=a.what, images=a.images, check=check, **values)

    def values(self, record: dict[str, Any]) -> dict[str, Any]:
        return post_fields(record)

    async def check(self, record: dict[str, Any], ctx: Context) -> Verdict:
        reply, judge = await self.ask(record, ctx, **self.values(record))
        return self.decide(reply, judge, record)

    def decide(self, reply: Any, judge: dict[str, Any], record: dict[str, Any]) -> Verdict:  # pragma: no cover
        raise NotImplementedError


class YesNoStage(AskStage):
    """A yes/no check: the reply's `answer_field` true keeps the post, false drops it as `drop_reason`
    with the model's reason as the detail."""

    answer_field: ClassVar[str]
    drop_reason: ClassVar[str]

    def decide(self, reply: Any, judge: dict[str, Any], record: dict[str, Any]) -> Verdict:
        said = getattr(reply, self.answer_field)
        payload = {self.answer_field: said, "reason": reply.reason, "judge": judge}
        return Verdict(payload) if said else Verdict(payload, self.drop_reason, reply.reason)
