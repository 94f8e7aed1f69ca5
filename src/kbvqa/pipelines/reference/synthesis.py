"""Stage 5 — write the interleaved draft (seed 001 C.2): one multimodal call, tags resolved.

The call receives, in order, the query image and up to 10 candidates (Image 1..N: the scored top-k
and the entity-search images together, `common.fill_pool`), then the question, the short reference,
the trajectory (thought, call and observation per step, each observation capped at 3,000
characters) and each candidate's scores. The model cites a picture as
`<image>{"candidate_images": N}</image>`.

As App. C.2 does, the draft keeps the candidates its tags cite: `salvage` keeps every tag it can
resolve (exactly that JSON, 1 ≤ N ≤ the number shown, first citation of that image) and removes the
others from the text — malformed, out-of-range and repeated tags, and unpaired <image> markers —
each counted by kind (`dropped_tags`), never repaired by guessing what an index meant. A draft is
`invalid` only when nothing usable remains (no prose once those tags are gone); such a reply is
rejected (`ChatResult.reject`), so `--resume` asks the model again instead of reading it back from a
cache. The candidates the draft uses are renumbered 1..M in order of first use and the rest are
dropped (counted), so the draft's `images` list is exactly what its tags cite: the NoteVQA
reference layout.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from pydantic import Field

from kbvqa.data.notevqa import _TAG, _TAG_PARTS, candidate_tag, reference_tags  # the one tag grammar
from kbvqa.models.prompts.reference import SYNTHESIS
from kbvqa.pipelines.reference.candidates import DIMENSIONS, query_image
from kbvqa.pipelines.funnel import counts, stage_record
from kbvqa.pipelines.reference.common import Placement, ReferenceStageConfig, synthesis_pool
from kbvqa.runner.stage import Context, Invalid
from kbvqa.stages import register_stage
from kbvqa.stages.ask import Ask, OneCallStage, require_role

NO_CANDIDATES = "(no candidate picture survived harvesting and filtering: write a text-only answer, with no tags)"


def check_tags(text: str, n: int) -> tuple[list[int], list[dict[str, Any]]]:
    """(indices cited, in order of first use; violations) by kbvqa.data.notevqa.reference_tags:
    malformed_tag | idx_out_of_range | duplicate_image, each {kind, tag, detail}."""
    tags, violations = reference_tags(text, n)
    return [t.index for t in tags], violations


def renumber(text: str, used: list[int]) -> str:
    """Rewrite each valid tag to the candidate's position among the used ones (1..M), canonically spelled."""
    new = {old: i for i, old in enumerate(used, 1)}

    tags, _ = reference_tags(text)
    out, pos = [], 0
    for t in tags:
        out += [text[pos:t.start], candidate_tag(new[t.index])]
        pos = t.end
    return "".join(out) + text[pos:]


def cut(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` without the (start, end) spans; a span alone on its line takes the line with it."""
    out, pos = [], 0
    for start, end in sorted(spans):
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", end)
        line_end = len(text) if line_end < 0 else line_end
        if not text[line_start:start].strip() and not text[end:line_end].strip():  # the tag's own line
            start, end = max(line_start - 1, 0), line_end
        out.append(text[pos:max(pos, start)])
        pos = max(pos, end)
    return "".join(out) + text[pos:]


def drop_tags(text: str, drop: set[int]) -> str:
    """`text` without the tags citing an index in `drop` (a tag alone on its line takes the line
    with it); the remaining tags keep their indices (renumber afterwards)."""
    tags, _ = reference_tags(text)
    return cut(text, [(t.start, t.end) for t in tags if t.index in drop])


def salvage(text: str, n: int) -> tuple[str, list[int], list[dict[str, Any]]]:
    """(the text without the tags that cannot be resolved, the indices cited in order of first use,
    the dropped tags as `check_tags` reports them: {kind, tag, detail}). Resolvable: a well-formed
    tag with 1 ≤ N ≤ `n` citing that image for the first time; everything else that looks like a tag
    goes, unpaired <image> / </image> markers included. The kept tags keep their indices."""
    tags, violations = reference_tags(text, n)
    good = {(t.start, t.end) for t in tags}
    clean = cut(text, [(m.start(), m.end()) for m in _TAG.finditer(text) if (m.start(), m.end()) not in good])
    paired = [(m.start(), m.end()) for m in _TAG.finditer(clean)]
    stray = [(m.start(), m.end()) for m in _TAG_PARTS.finditer(clean)
             if not any(a <= m.start() < b for a, b in paired)]
    return cut(clean, stray), [t.index for t in tags], violations


def usable(text: str, n: int) -> None:
    """Refuse a draft with nothing usable once its unresolvable tags are gone: no prose left."""
    clean, _, violations = salvage(text, n)
    if _TAG.sub("", clean).strip():
        return
    if not violations:
        raise Invalid("synthesis: nothing usable remains: the reply is image tags only, with no text")
    kinds = ", ".join(sorted({v["kind"] for v in violations}))
    raise Invalid(f"synthesis: nothing usable remains: no text once the {len(violations)} unresolvable image "
                  f"tag(s) ({kinds}) are removed; first: {violations[0]['tag']!r}: {violations[0]['detail']}")


def keep_images(draft: dict[str, Any], keep: list[int]) -> dict[str, Any]:
    """The draft citing only the images whose (current) indices are in `keep`, renumbered 1..M in
    order of use: what the post-synthesis filter and de-duplication leave of a draft."""
    kept = [i for i in (t.index for t in reference_tags(draft["text"])[0]) if i in set(keep)]
    text = renumber(drop_tags(draft["text"], {im["index"] for im in draft["images"]} - set(kept)), kept)
    by_index = {im["index"]: im for im in draft["images"]}
    return {**draft, "text": text, "images": [{**by_index[old], "index": new} for new, old in enumerate(kept, 1)]}


def tag_context(text: str, index: int, window: int = 200, limit: int = 300) -> str:
    """The text around the tag citing image `index` (seed 001 C.2: ±`window` characters, truncated
    to `limit`, the text before the tag first: the sentence a tag illustrates comes before it). The
    tag itself reads [this image], any other tag [another image]."""
    tags, _ = reference_tags(text)
    parts, pos, here = [], 0, 0
    for t in tags:
        parts.append(text[pos:t.start])
        if t.index == index:
            here = sum(len(p) for p in parts)
        else:
            parts.append("[another image]")
        pos = t.end
    plain = "".join(parts) + text[pos:]
    ctx = f"{plain[max(0, here - window):here]} [this image] {plain[here:here + window]}"
    return " ".join(ctx.split())[:limit]


def trajectory_text(steps: list[dict[str, Any]], observation_chars: int = 3000) -> str:
    lines = []
    for st in steps:
        args = json.dumps(st.get("arguments"), ensure_ascii=False)
        head = f"Step {st.get('turn')}: {st.get('tool')} {args} -> {st.get('status')}"
        thought = " ".join(str(st.get("thought") or "").split())
        obs = (st.get("observation") or st.get("reason") or "")[:observation_chars]
        lines.append("\n".join(x for x in (head, f"Thought: {thought}" if thought else "", obs) if x))
    return "\n\n".join(lines) or "(the agent made no tool calls)"


def candidate_block(cands: list[dict[str, Any]]) -> str:
    """Seed 001 Table 13's content, one block per candidate: overall and per-dimension scores,
    the pool and where the picture came from."""
    if not cands:
        return NO_CANDIDATES
    blocks = []
    for i, x in enumerate(cands, 1):
        dims = "; ".join(f"{d.replace('_', ' ')} {x['scores'][d]['score']}/5" for d in DIMENSIONS)
        source = x.get("source_url") or x.get("page_url") or "(unknown)"
        blocks.append(f"Image {i}: overall {x['overall']}/5 — {dims}\n  pool: {x['pool']}; source: {source}\n"
                      f"  why it may help: {x['scores']['information_content']['reason']}")
    return "\n".join(blocks)


class SynthesisConfig(ReferenceStageConfig):
    role: str = "vision"
    placement: Placement = "after_synthesis"  # filled from [reference] filter_placement
    #: candidates shown at most, entity-search images included (C.2: "up to ten"; `common.fill_pool`)
    max_candidates: int = Field(10, ge=0)
    observation_chars: int = Field(3000, ge=100)
    max_reply_tokens: int = Field(2048, ge=64)


@register_stage
class Synthesis(OneCallStage):
    """Reads the synthesis pool (`common.synthesis_pool`: `dedup.kept` before, or `candidates.kept` +
    `entities.added` when the filter runs after) and `steps`; adds `draft` {text, images, unused,
    generator}."""

    name = "reference-synthesis"
    version = "2"  # 2: unresolvable tags dropped and counted, not the whole draft; at most ten shown in all
    config_model = SynthesisConfig
    asks = Ask(SYNTHESIS, None, "synthesis")  # plain text: the draft with its tags

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        c: SynthesisConfig = self.config  # type: ignore[assignment]
        require_role(ctx, c.role, "the interleaved synthesis (a multimodal call)")
        store = ctx.resource("image_store")
        cands, left_out = synthesis_pool(record, c.placement, c.max_candidates)
        query = query_image(record, "synthesis")
        raw, prov = await self.call(ctx, params={"max_tokens": c.max_reply_tokens},
                                    images=[query, *(store.path(x["path"]) for x in cands)],
                                    question_raw=record.get("question", ""), answer_raw=record.get("answer", ""),
                                    trajectory_raw=trajectory_text(record.get("steps") or [], c.observation_chars),
                                    candidates_raw=candidate_block(cands), check=lambda text: usable(text, len(cands)))
        text, used, violations = salvage(raw, len(cands))
        images = [{"index": i, **{k: cands[old - 1].get(k) for k in ("sha256", "path", "source_url", "page_url",
                                                                      "pool", "overall", "entity")
                                  if k != "entity" or cands[old - 1].get(k)}}
                  for i, old in enumerate(used, 1)]
        unused = [x["sha256"] for j, x in enumerate(cands, 1) if j not in used]
        payload = {"text": renumber(text, used), "images": images, "unused": unused, "raw": raw, "generator": prov,
                   **({"dropped_tags": violations} if violations else {}),
                   **({"not_shown": [{"sha256": x["sha256"], "pool": x.get("pool")} for x in left_out]}
                      if left_out else {})}
        tally = counts(candidates_shown=len(cands), shown_by_pool=Counter(x.get("pool") for x in cands),
                       not_shown_over_cap=Counter(x.get("pool") for x in left_out),
                       tags=len(used) + len(violations), used=len(used),
                       dropped_tags=Counter(v["kind"] for v in violations),
                       drafts_with_dropped_tags=int(bool(violations)),
                       drafts_all_tags_dropped=int(bool(violations) and not used),
                       dropped={"unused": len(unused)})
        return stage_record(record, "draft", payload, tally)
