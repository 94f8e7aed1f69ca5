"""Step 4 of the funnel, auditing (seed 001 §3.1 step 4): translation into English cross-checked by a
second model, the final category and intent assignment on the English item, and the human proofreading
sheet (accept / fix / reject) with its import.

A cross-check that finds problems, or a final label that disagrees with the balancing label, does not
drop the item: it flags it, and the proofreading sheet lists flagged items first — the people who read
every item decide. Proofreading is strict like the reference audit: an unknown decision, an id the run
did not produce, a repeated id, a fix without text or an accept with text is an error naming the sheet,
the row (the header is row 1) and the column; a blank decision is `pending`, counted, never accepted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import Field, StrictBool

from kbvqa.data.errors import DataError
from kbvqa.data.jsonl import read_jsonl, write_jsonl
from kbvqa.data.sheets import read_sheet, write_sheet
from kbvqa.models.prompts.curate import TRANSLATE, TRANSLATION_CHECK
from kbvqa.models.replies import NonBlank, Reply
from kbvqa.pipelines.curate.common import CurateStage, ModelStageConfig, Verdict, consult, item, stage_payload
from kbvqa.pipelines.curate.refine import Classify, LabelConfig, QuestionReply
from kbvqa.runner.stage import Context
from kbvqa.stages import register_stage


class CheckReply(Reply):
    faithful: StrictBool
    issues: list[NonBlank] = Field(max_length=20)


class TranslateConfig(ModelStageConfig):
    role: str = "repairer"
    check_role: str = "checker"  # the second model of the cross-check
    max_images: int = Field(0, ge=0, le=16)
    target: str = "en"
    drop_unfaithful: bool = False  # default: flag for the proofreaders instead


@register_stage
class Translate(CurateStage):
    """Translates a non-English item into English; a second model cross-checks the translation."""

    name = "curate-translate"
    version = "2"
    key = "translate"
    config_model = TranslateConfig
    prompts = (TRANSLATE, TRANSLATION_CHECK)

    async def check(self, record: dict[str, Any], ctx: Context) -> Verdict:
        c: TranslateConfig = self.config  # type: ignore[assignment]
        it = item(record)
        lang = it.get("language") or "und"
        if lang == c.target:
            return Verdict({"translated": False, "language": lang})
        src = {"question": it["question"], "answer": it.get("answer") or "(none)"}
        reply, prov = await consult(ctx, c, TRANSLATE, QuestionReply, record, what="translation",
                                    language=lang, **src)
        checker = c.model_copy(update={"role": c.check_role})
        check, prov2 = await consult(ctx, checker, TRANSLATION_CHECK, CheckReply, record, what="translation cross-check",
                                     language=lang, question_en=reply.question, answer_en=reply.answer, **src)
        payload = {"translated": True, "from": lang, "source": src, "question": reply.question, "answer": reply.answer,
                   "faithful": check.faithful, "issues": check.issues, "translator": prov, "checker": prov2,
                   "same_model": prov.get("model") == prov2.get("model") and prov.get("base_url") == prov2.get("base_url")}
        if not check.faithful and c.drop_unfaithful:
            return Verdict(payload, "translation_rejected", "; ".join(check.issues) or "not faithful")
        return Verdict(payload, item={"question": reply.question, "answer": reply.answer, "language": c.target,
                                      "source_language": lang, "source_question": src["question"],
                                      "source_answer": it.get("answer")})


class AssignConfig(LabelConfig):
    trust_post_labels: bool = False  # the final check always asks


@register_stage
class Assign(Classify):
    """The final category and intent assignment on the English item; a change from the balancing
    label is kept and flagged for the proofreaders."""

    name = "curate-assign"
    version = "1"
    key = "assign"
    config_model = AssignConfig


def review_flags(record: dict[str, Any]) -> list[str]:
    """What the proofreaders should look at first."""
    flags = []
    tr = stage_payload(record, "translate")
    if tr.get("translated") and not tr.get("faithful"):
        flags.append("translation: " + ("; ".join(tr.get("issues") or []) or "cross-check says not faithful"))
    if tr.get("same_model"):
        flags.append("translation cross-checked by the translating model itself")
    asg = stage_payload(record, "assign")
    if asg.get("agrees") is False:
        b = asg.get("before") or {}
        flags.append(f"labels changed at the final assignment: {b.get('category')} × {b.get('intent')} → "
                     f"{asg.get('category')} × {asg.get('intent')}")
    return flags


# ---------------------------------------------------------------------------------------- proofreading

SHEET_COLUMNS = ("id", "question", "answer", "category", "intent", "images", "source_language", "source_question",
                 "source_answer", "flags", "decision", "fixed_question", "fixed_answer", "notes")
DECISIONS = ("accept", "fix", "reject")


def export_review(items: str | Path, out: str | Path, *, overwrite: bool = False) -> dict[str, Any]:
    """The proofreaders' CSV for every item of a run (flagged items first); refuses to overwrite a
    sheet (it may hold decisions) unless `overwrite`."""
    items = Path(items)
    if not items.is_file():
        raise DataError("no items: run `kbvqa curate run` first", file=items)
    rows = [obj for _, obj in read_jsonl(items)]
    rows.sort(key=lambda r: not (r.get("curation") or {}).get("review_flags"))

    def sheet_row(r: dict[str, Any]) -> dict[str, Any]:
        cur = r.get("curation") or {}
        return {"id": r["id"], "question": r["question"], "answer": r.get("answer", ""),
                "category": r.get("category", ""), "intent": r.get("intent", ""),
                "images": "\n".join(r.get("images") or []), "source_language": cur.get("source_language", ""),
                "source_question": cur.get("source_question", ""), "source_answer": cur.get("source_answer") or "",
                "flags": "\n".join(cur.get("review_flags") or []), "decision": "", "fixed_question": "",
                "fixed_answer": "", "notes": ""}

    write_sheet(out, SHEET_COLUMNS, map(sheet_row, rows), overwrite=overwrite, who="proofreaders")
    return {"sheet": str(out), "items": len(rows), "flagged": sum(1 for r in rows
                                                                  if (r.get("curation") or {}).get("review_flags"))}


def _cell(row: dict[str, Any], col: str) -> str:
    return (row.get(col) or "").strip()


def import_review(items: str | Path, sheet: str | Path, out: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read the reviewed sheet; write accepted and fixed items to `out` (NoteVQA layout, the decision
    under `curation.review`). Returns (counts, the rejected items as drop lines)."""
    items, sheet, out = Path(items), Path(sheet), Path(out)
    by_id = {obj["id"]: obj for _, obj in read_jsonl(items)}
    decided: list[tuple[dict[str, Any], str, dict[str, Any]]] = []
    counts: Counter[str] = Counter()
    rows = 0
    for n, rid, row in read_sheet(sheet, ("id", "decision", "fixed_question", "fixed_answer"), by_id, source=items,
                                  noun="item", export="kbvqa curate review-export"):
        rows += 1
        decision = _cell(row, "decision").lower()
        fixed = {k: _cell(row, f"fixed_{k}") for k in ("question", "answer")}
        if not decision:
            counts["pending"] += 1
            continue
        if decision not in DECISIONS:
            raise DataError(f"decision {decision!r} is not one of {', '.join(DECISIONS)} (or blank)",
                            file=sheet, row=n, field="decision")
        if decision == "fix" and not any(fixed.values()):
            raise DataError("a fix needs fixed_question and/or fixed_answer", file=sheet, row=n,
                            field="fixed_question")
        if decision != "fix" and any(fixed.values()):
            col = "fixed_question" if fixed["question"] else "fixed_answer"
            raise DataError(f"{decision!r} with a fixed text: use 'fix'", file=sheet, row=n, field=col)
        counts[decision] += 1
        decided.append((by_id[rid], decision, {**fixed, "notes": _cell(row, "notes"), "row": n}))
    counts["not_in_sheet"] = len(by_id) - rows
    kept: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    for obj, decision, d in decided:
        review = {"decision": decision, **({"notes": d["notes"]} if d["notes"] else {})}
        if decision == "reject":
            rejected.append({"id": obj["id"], "stage": "proofread", "step": 4, "reason": "rejected_by_reviewer",
                             "detail": d["notes"] or f"rejected at sheet row {d['row']}"})
            continue
        new = dict(obj)
        if decision == "fix":
            review["before"] = {k: obj.get(k) for k in ("question", "answer") if d[k]}
            new.update({k: d[k] for k in ("question", "answer") if d[k]})
        new["curation"] = {**(obj.get("curation") or {}), "review": review}
        kept.append(new)
    write_jsonl(out, kept)
    return {"sheet": str(sheet), "out": str(out), "written": len(kept), **{k: counts[k] for k in
                                                                              ("accept", "fix", "reject", "pending",
                                                                               "not_in_sheet")}}, rejected


def read_drop_lines(path: Path) -> Iterable[dict[str, Any]]:
    return (obj for _, obj in read_jsonl(path)) if path.is_file() else iter(())
