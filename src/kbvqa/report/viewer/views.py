"""Per-kind views: the facets a list can be filtered by, a list row, and a record's detail context.

One `KindView` per kind of output (audit, augmentation, retrieval, predictions, agent, judge,
IVR-12, per-item scores, plain records). A view reads records as kbvqa writes them and hands the
templates plain values and segments (kbvqa.report.viewer.text); it never builds HTML itself, except
for the agent's interleaved answer, which goes through the report's own `Interleaved` renderer
(escaped there) so the viewer and `report.html` place image tags the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from kbvqa.data.urls import canonical_url
from kbvqa.report.html import Interleaved, _interleaved
from kbvqa.report.viewer import text as tx
from kbvqa.report.viewer.context import RecordContext

Facets = dict[str, tuple[str, ...]]

#: Facet names as the filter bar shows them.
FACET_TITLES = {"status": "status", "support": "answer support", "action": "action", "tag": "tag",
                "verify": "verification label", "qtype": "question type", "dataset": "dataset",
                "label": "label", "termination": "termination", "tags": "image tags", "producer": "producer",
                "variant_status": "variant status", "type": "entity type", "side": "anchor side",
                "stage": "stage", "gate": "gates", "correct": "correct", "mode": "mode", "category": "category",
                "forced": "forced answer"}


def _s(v: Any) -> str:
    return "" if v is None else str(v)


def _one(v: Any) -> tuple[str, ...]:
    return (str(v),) if v not in (None, "") else ()


def _dataset(r: dict[str, Any]) -> tuple[str, ...]:
    return _one(r.get("dataset") or (r.get("meta") or {}).get("dataset"))


def _qtype(r: dict[str, Any]) -> tuple[str, ...]:
    return _one(r.get("question_type"))


def pretty(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False, default=str)


@dataclass(frozen=True)
class KindView:
    kind: str
    template: str
    facets: Callable[[dict[str, Any]], Facets]
    row: Callable[[dict[str, Any], RecordContext], dict[str, Any]]
    detail: Callable[[dict[str, Any], RecordContext], dict[str, Any]]


# ----------------------------------------------------------------------------------------- audit

def audit_facets(r: dict[str, Any]) -> Facets:
    a = r.get("audit") or {}
    verify = ((a.get("stages") or {}).get("verify") or {}).get("label")
    return {"support": _one(a.get("answer_support")), "action": _one(a.get("action")),
            "tag": tuple(str(t) for t in a.get("tags") or []), "verify": _one(verify),
            "qtype": _qtype(r), "dataset": _dataset(r)}


def _answers(v: Any) -> str:
    if isinstance(v, list):
        return " | ".join(_answers(x) for x in v)
    if isinstance(v, dict):  # a multi-part or numeric answer object
        return str(v.get("text") or v.get("value") or json.dumps(v, ensure_ascii=False))
    return _s(v)


def audit_row(r: dict[str, Any], ctx: RecordContext) -> dict[str, Any]:
    a = r.get("audit") or {}
    badges = [(a.get("action"), f"action-{a.get('action')}"), (a.get("answer_support"), "support")]
    badges += [(t, "tag") for t in a.get("tags") or []]
    return {"title": r.get("question"), "sub": _answers(r.get("answers")), "badges": badges,
            "thumb": ctx.first_image(r.get("images"))}


_STAGE_KEYS = ("label", "rationale", "backend", "model", "version", "settled_by")


def _evidence_for(r: dict[str, Any], source: str, section_id: Any, ctx: RecordContext) -> tuple[str, str] | None:
    """(title, text) of the section a verifier read: the sample's own evidence or the KB article."""
    sid = _s(section_id)
    if source == "sample":
        for e in r.get("evidence") or []:
            if isinstance(e, dict) and _s(e.get("section_id")) == sid:
                return _s(e.get("section_title")), _s(e.get("text"))
        return None
    url = (r.get("entity") or {}).get("url")
    art = ctx.article(url) if url else None
    if art is None:
        return None
    for s in art.sections:
        if _s(s.index) == sid:
            return s.title, s.text
    return None


def audit_detail(r: dict[str, Any], ctx: RecordContext) -> dict[str, Any]:
    a = r.get("audit") or {}
    q_before, q_after = tx.diff(_s(a.get("question_before", r.get("question"))), _s(r.get("question")))
    a_before, a_after = tx.diff(_answers(a.get("answers_before", r.get("answers"))), _answers(r.get("answers")))
    answers = [_answers(x) for x in (a.get("answers_before") or [])] + [_answers(x) for x in r.get("answers") or []]
    stages = []
    for name, st in (a.get("stages") or {}).items():
        if not isinstance(st, dict):
            stages.append({"name": name, "fields": {}, "extra": pretty(st), "verifiers": []})
            continue
        verifiers = []
        for v in st.get("verifiers") or []:
            sections = []
            for sec in v.get("sections") or []:
                found = _evidence_for(r, _s(sec.get("source") or st.get("evidence_source") or "kb"),
                                      sec.get("section_id"), ctx)
                phrases = answers + tx.quoted([sec.get("rationale")]) if sec.get("label") != "not_supported" else []
                sections.append({**sec, "evidence": tx.highlight(found[1], phrases) if found else None,
                                 "evidence_title": found[0] if found else None})
            verifiers.append({"fields": {k: v.get(k) for k in ("verifier", *_STAGE_KEYS) if k in v},
                              "sections": sections})
        extra = {k: v for k, v in st.items() if k not in (*_STAGE_KEYS, "verifiers")}
        stages.append({"name": name, "fields": {k: st.get(k) for k in _STAGE_KEYS if k in st},
                       "extra": pretty(extra) if extra else "", "verifiers": verifiers})
    return {"audit": a, "q_before": q_before, "q_after": q_after, "a_before": a_before, "a_after": a_after,
            "stages": stages, "history": r.get("history") or [], "images": ctx.images(r.get("images")),
            "entity": r.get("entity") or {}}


# ----------------------------------------------------------------------------- predictions / retrieval

def prediction_facets(r: dict[str, Any]) -> Facets:
    p = r.get("producer") or {}
    return {"producer": _one(":".join(str(x) for x in (p.get("backend"), p.get("model")) if x) if p else None)}


def retrieval_facets(r: dict[str, Any]) -> Facets:
    stage = r.get("stage") or (r.get("retrieval") or {}).get("stage")
    return {"stage": _one(stage), "qtype": _qtype(r), "dataset": _dataset(r)}


def _rankings(r: dict[str, Any]) -> list[tuple[str, list[str], list[Any]]]:
    """(stage, urls, scores) for every ranking a record carries: meta.retrieval stages (answers),
    `retrieval` (retrieve records), else the plain `retrieved` list."""
    meta = (r.get("meta") or {}).get("retrieval")
    out = []
    if isinstance(meta, dict):
        for stage, v in meta.items():
            if isinstance(v, dict) and isinstance(v.get("retrieved"), list):
                out.append((stage, v["retrieved"], v.get("scores") or []))
    ret = r.get("retrieval")
    if not out and isinstance(ret, dict) and isinstance(ret.get("retrieved"), list):
        out.append((_s(ret.get("stage") or "retrieved"), ret["retrieved"], ret.get("scores") or []))
    if not out and isinstance(r.get("retrieved"), list):
        out.append((_s(r.get("stage") or "retrieved"), r["retrieved"], r.get("scores") or []))
    return out


def _gold(r: dict[str, Any], sample: dict[str, Any] | None) -> str | None:
    url = (r.get("entity") or {}).get("url") or ((sample or {}).get("entity") or {}).get("url")
    if not url and sample:
        url = (sample.get("source") or {}).get("entity")
    try:
        return canonical_url(url) if url else None
    except ValueError:
        return url


def ranking_context(r: dict[str, Any], sample: dict[str, Any] | None, ctx: RecordContext) -> dict[str, Any]:
    gold = _gold(r, sample)
    rankings = []
    for stage, urls, scores in _rankings(r):
        rows = []
        for i, url in enumerate(urls):
            try:
                canon = canonical_url(url)
            except ValueError:
                canon = url
            art = ctx.article(url)
            thumb = ctx.kb_image(art.image_urls[0]) if art is not None and art.image_urls else None
            rows.append({"rank": i + 1, "url": url, "title": art.title if art is not None else "",
                         "score": scores[i] if i < len(scores) else None, "gold": gold is not None and canon == gold,
                         "thumb": thumb})
        hit = next((x["rank"] for x in rows if x["gold"]), None)
        rankings.append({"stage": stage, "rows": rows, "gold_rank": hit})
    return {"gold": gold, "rankings": rankings}


def _references(sample: dict[str, Any] | None) -> list[str]:
    if not sample:
        return []
    if "answers" in sample:
        return [_answers(a) for a in sample.get("answers") or []]
    return [_s(sample.get("answer"))] if sample.get("answer") else []


def prediction_row(r: dict[str, Any], ctx: RecordContext) -> dict[str, Any]:
    q = (r.get("meta") or {}).get("question") or r.get("question")
    return {"title": q, "sub": f"answer: {_s(r.get('answer')) if r.get('answer') is not None else '(none)'}",
            "badges": [], "thumb": None}


def prediction_detail(r: dict[str, Any], ctx: RecordContext) -> dict[str, Any]:
    sample = ctx.sample(r.get("sample_id") or r.get("id"))
    refs = _references(sample)
    evidence = [{**e, "segments": tx.highlight(_s(e.get("text")), [*refs, _s(r.get("answer"))])}
                for e in r.get("evidence_used") or [] if isinstance(e, dict)]
    return {"question": (r.get("meta") or {}).get("question") or (sample or {}).get("question"),
            "query_images": ctx.images((sample or {}).get("images")),
            "references": refs, "sample_known": sample is not None, "evidence": evidence,
            "verdicts": ctx.verdicts(r.get("sample_id") or r.get("id")), **ranking_context(r, sample, ctx)}


def retrieval_row(r: dict[str, Any], ctx: RecordContext) -> dict[str, Any]:
    ranks = _rankings(r)
    top = ranks[0][1][0] if ranks and ranks[0][1] else None
    return {"title": r.get("question") or "", "sub": f"top-1: {top}" if top else "(nothing retrieved)",
            "badges": [], "thumb": ctx.first_image(r.get("images"))}


def retrieval_detail(r: dict[str, Any], ctx: RecordContext) -> dict[str, Any]:
    sample = ctx.sample(r.get("id")) if not r.get("entity") else None
    images = r.get("images") or (sample or {}).get("images")
    return {"question": r.get("question") or (sample or {}).get("question"),
            "query_images": ctx.images(images),
            "references": _references(r if "answers" in r else sample), "sample_known": True, "evidence": [],
            "verdicts": [], **ranking_context(r, sample, ctx)}


# -------------------------------------------------------------------------------------------- agent

def agent_facets(r: dict[str, Any]) -> Facets:
    meta = r.get("meta") or {}
    prov = meta.get("provenance") or {}
    tags = "no tags" if not prov.get("tags") else ("violations" if prov.get("violations") else "all valid")
    return {"termination": _one(meta.get("termination")), "tags": (tags,) if prov else (),
            "forced": _one({True: "yes", False: "no"}.get(meta.get("forced_answer")))}


def agent_row(r: dict[str, Any], ctx: RecordContext) -> dict[str, Any]:
    meta = r.get("meta") or {}
    prov = meta.get("provenance") or {}
    badges = [(meta.get("termination"), "termination")]
    if meta.get("forced_answer"):
        badges.append(("forced answer", "bad"))
    if prov:
        badges.append((f"tags {prov.get('valid', 0)}/{prov.get('tags', 0)} valid",
                       "bad" if prov.get("violations") else "good"))
    return {"title": meta.get("question"), "sub": _s(r.get("short_answer") or r.get("answer"))[:200],
            "badges": badges, "thumb": None}


def agent_answer(r: dict[str, Any], ctx: RecordContext) -> Markup:
    """The interleaved answer through `report.html`'s Interleaved renderer (every text escaped
    there): each resolved tag's image in place, an unresolved tag shown as such."""
    prov = (r.get("meta") or {}).get("provenance") or {}
    images = {}
    for res in prov.get("resolved") or []:
        link = ctx.image(res.get("image"))
        if link.url:
            images[(str(res.get("query")), int(res.get("idx")))] = ctx.href_image(link)
    return Markup(_interleaved(Interleaved(text=r.get("answer") or "", images=images)))


def agent_detail(r: dict[str, Any], ctx: RecordContext) -> dict[str, Any]:
    meta = r.get("meta") or {}
    sample = ctx.sample(r.get("sample_id") or r.get("id"))
    ref = (sample or {}).get("reference") if sample else None
    steps = []
    for s in r.get("trajectory") or []:
        items = [{**it, "link": ctx.image(it.get("image"))} for it in s.get("items") or []
                 if isinstance(it, dict) and it.get("image")]
        written = s.get("arguments_as_written", s.get("arguments"))  # as the model wrote them (case kept)
        steps.append({**s, "args": pretty(written) if written is not None else "",
                      "args_folded": pretty(s["arguments"]) if "arguments_as_written" in s else "",
                      "image_items": items, "observation_full": ctx.observation(s.get("observation_file"))})
    prov = meta.get("provenance") or {}
    return {"meta": meta, "prov": prov, "answer_html": agent_answer(r, ctx) if r.get("answer") else None,
            "resolved": [{**x, "link": ctx.image(x.get("image"))} for x in prov.get("resolved") or []],
            "steps": steps, "question": meta.get("question") or (sample or {}).get("question"),
            "query_images": ctx.images((sample or {}).get("images")),
            "sample_known": sample is not None,
            "reference": tx.reference_pieces(_s(ref.get("text")), ref.get("images") or [],
                                             ctx.image)
            if isinstance(ref, dict) else None,
            "short_reference": (sample or {}).get("answer"), "verdicts": ctx.verdicts(r.get("sample_id") or r.get("id"))}


# ------------------------------------------------------------------------------------ judge, IVR-12

def judge_facets(r: dict[str, Any]) -> Facets:
    v = r.get("verdict") or {}
    label = v.get("label") if r.get("status", "ok") == "ok" else r.get("status")
    return {"label": _one(label if label is not None else "error")}


def judge_row(r: dict[str, Any], ctx: RecordContext) -> dict[str, Any]:
    v = r.get("verdict") or {}
    label = v.get("label") if r.get("status", "ok") == "ok" else r.get("status")
    return {"title": r.get("question"), "sub": f"prediction: {_s(r.get('prediction'))} — target: {_s(r.get('target'))}",
            "badges": [(label, f"label-{label}")], "thumb": None}


def judge_detail(r: dict[str, Any], ctx: RecordContext) -> dict[str, Any]:
    return {"verdict": r.get("verdict") or {}, "prediction_href": ctx.related_record("predictions", r.get("id"))}


def judge_figures(labels: Any) -> dict[str, Any]:
    """The judge listing's headline from its label counts, as `score judge` gives it: seed 001's
    accuracy (correct / all responses in the file) and kbvqa's over graded verdicts (correct,
    incorrect, not_attempted), with n graded / invalid / error beside them (kbvqa.evaluate.judge)."""
    c = {k: int(v) for k, v in dict(labels or {}).items()}
    graded = sum(c.get(k, 0) for k in ("correct", "incorrect", "not_attempted"))
    n, correct = sum(c.values()), c.get("correct", 0)
    return {"n": n, "graded": graded, "correct": correct, "invalid": c.get("invalid", 0),
            "error": c.get("error", 0), "accuracy": correct / n if n else None,
            "accuracy_graded": correct / graded if graded else None}


def ivr12_facets(r: dict[str, Any]) -> Facets:
    iv = r.get("ivr12") or {}
    gate = "gate failed" if iv.get("gate_failed") else "gates passed"
    return {"mode": _one(iv.get("mode")), "gate": (gate,) if iv else (), "category": _one(r.get("category"))}


def _num(v: Any) -> str:
    return "n/a" if v is None else (f"{v:.2f}" if isinstance(v, float) else str(v))


def ivr12_row(r: dict[str, Any], ctx: RecordContext) -> dict[str, Any]:
    iv = r.get("ivr12") or {}
    why = f" ({iv['mean_reason']})" if iv.get("mean_reason") else ""
    return {"title": r.get("question"), "sub": f"overall {_num(iv.get('mean'))}, gated {_num(iv.get('gated_mean'))}{why}",
            "badges": [("gate failed", "bad")] if iv.get("gate_failed") else [], "thumb": None}


def ivr12_detail(r: dict[str, Any], ctx: RecordContext) -> dict[str, Any]:
    iv = r.get("ivr12") or {}
    rules = iv.get("rules") or {}
    dims = []
    for key, d in (iv.get("dimensions") or {}).items():
        why = d.get("rationale") or (d.get("na") and f"n/a: {d['na']}") or ""
        detail = (rules.get(key) or {}).get("detail")
        by = d.get("measured_by") or {"judge": "judge", "rules": "rule"}.get(d.get("label")) or d.get("label")
        dims.append({"key": key + (" (rule)" if by == "rule" else ""), "group": d.get("group"), "label": by,
                     "score": _num(d.get("score")),
                     "gated": _num(d.get("gated")), "rationale": why, "rationales": d.get("rationales") or [],
                     "detail": pretty(detail) if detail else ""})
    gates = [{"key": k, "label": g.get("decided_by") or g.get("label"),
              "pass": "n/a" if g.get("pass") is None else ("pass" if g["pass"] else "fail"),
              "reason": g.get("reason") or g.get("rationale") or ""} for k, g in (iv.get("gates") or {}).items()]
    groups = [{"group": g, "mean": _num(v.get("mean")), "gated": _num(v.get("gated_mean")), "reason": v.get("reason") or ""}
              for g, v in (iv.get("groups") or {}).items()]
    return {"iv": iv, "dims": dims, "gates": gates, "groups": groups, "mean": _num(iv.get("mean")),
            "gated_mean": _num(iv.get("gated_mean")), "mean_reason": iv.get("mean_reason") or "",
            "pieces": tx.numbered_pieces(_s(r.get("text")), r.get("embedded") or [], ctx.image),
            "query_images": ctx.images(r.get("query_images")),
            "episode_href": ctx.related_record("predictions", r.get("id"))}


# ------------------------------------------------------------------------------------- augmentation

_VARIANTS = (("intra", "method1"), ("inter", "method2"), ("blank", "blank"), ("double", "double"))


def augment_facets(r: dict[str, Any]) -> Facets:
    return {"type": _one(r.get("anchor_entity_type")), "side": _one(r.get("target_side"))}


def augment_row(r: dict[str, Any], ctx: RecordContext) -> dict[str, Any]:
    thumbs = [ctx.image(r.get(f"{m}_composite_image_path")) for _, m in _VARIANTS[:2] if r.get(f"{m}_composite_image_path")]
    return {"title": r.get("anchor_question"), "sub": f"{_s(r.get('anchor_entity'))} ({_s(r.get('target_side'))})",
            "badges": [(r.get("anchor_entity_type"), "type")], "thumb": thumbs[0] if thumbs else None,
            "thumbs": thumbs}


def augment_detail(r: dict[str, Any], ctx: RecordContext) -> dict[str, Any]:
    anchor = ctx.sample(f"{r.get('anchor_data_id')}__anchor")
    variants = []
    for name, m in _VARIANTS:
        path = r.get(f"{m}_composite_image_path")
        if not path and not r.get(f"{m}_image_status"):
            continue
        query = r.get(f"{m}_query") or r.get(f"{name}_query")
        variants.append({"name": name, "prefix": m, "image": ctx.image(path) if path else None,
                         "status": r.get(f"{m}_image_status"), "query": query,
                         "distractor": r.get(f"{m}_pair_entity"), "basis": r.get(f"{m}_similarity_basis"),
                         "layout": r.get(f"{m}_composite_layout"), "errors": r.get(f"{m}_query_errors") or [],
                         "q_diff": tx.diff(_s(r.get("anchor_question")), _s(query))[1] if query else []})
    anchor_images = (anchor or {}).get("images") or [r.get("anchor_image_path")]
    return {"variants": variants, "anchor_images": ctx.images(anchor_images)}


# ---------------------------------------------------------------------------------- scores, records

def score_facets(r: dict[str, Any]) -> Facets:
    if "correct" in r:
        return {"correct": _one(r.get("correct")), "qtype": _one(r.get("question_type"))}
    return {"label": _one(r.get("label"))}


def plain_facets(r: dict[str, Any]) -> Facets:
    return {}


def plain_row(r: dict[str, Any], ctx: RecordContext) -> dict[str, Any]:
    title = r.get("question") or r.get("anchor_question") or ""
    sub = r.get("reason") or (f"correct: {r['correct']}" if "correct" in r else "") or \
        (f"label: {r['label']}" if "label" in r else "")
    return {"title": title, "sub": sub, "badges": [], "thumb": ctx.first_image(r.get("images"))}


def plain_detail(r: dict[str, Any], ctx: RecordContext) -> dict[str, Any]:
    return {"images": ctx.images(r.get("images"))}


VIEWS: dict[str, KindView] = {v.kind: v for v in (
    KindView("audit", "record_audit.html", audit_facets, audit_row, audit_detail),
    KindView("predictions", "record_ranked.html", prediction_facets, prediction_row, prediction_detail),
    KindView("retrieval", "record_ranked.html", retrieval_facets, retrieval_row, retrieval_detail),
    KindView("agent", "record_agent.html", agent_facets, agent_row, agent_detail),
    KindView("judge", "record_judge.html", judge_facets, judge_row, judge_detail),
    KindView("ivr12", "record_ivr12.html", ivr12_facets, ivr12_row, ivr12_detail),
    KindView("augmentation", "record_augment.html", augment_facets, augment_row, augment_detail),
    KindView("scores", "record_plain.html", score_facets, plain_row, plain_detail),
    KindView("records", "record_plain.html", plain_facets, plain_row, plain_detail),
)}
