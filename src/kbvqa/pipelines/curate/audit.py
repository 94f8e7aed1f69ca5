"""Step 4 of the funnel, auditing (seed 001 §3.1 step 4): translation into English cross-checked by
every configured checker model (their agreement per item and over the run), the final category and intent assignment on the English item, and the human proofreading
sheet (accept / fix / reject) with its import.

The checkers are every model of every `check_roles` role (a role listing two models is two
checkers); with a single checker model the funnel warns (`one_checker_warning`): the paper
cross-checks "with multiple models", and one model's verdict is not that.

A cross-check that finds problems, or a final label that disagrees with the balancing label, does not
drop the item: it flags it, and the proofreading sheet lists flagged items first — the people who read
every item decide. Proofreading is strict like the reference audit: an unknown decision, an id the run
did not produce, a repeated id, a fix without text or an accept with text is an error naming the sheet,
the row (the header is row 1) and the column; a blank decision is `pending`, counted, never accepted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, StrictBool, field_validator, model_validator

from kbvqa.data.errors import DataError
from kbvqa.data.config_tables import renamed_key
from kbvqa.data.jsonl import read_jsonl, write_jsonl
from kbvqa.data.sheets import read_sheet, write_sheet
from kbvqa.models.prompts.curate import TRANSLATE, TRANSLATION_CHECK
from kbvqa.models.replies import NonBlank, Reply
from kbvqa.pipelines.curate.common import CurateStage, ModelStageConfig, Verdict, consult, item, stage_payload
from kbvqa.pipelines.curate.refine import Classify, LabelConfig, QuestionReply
from kbvqa.runner.stage import Context
from kbvqa.stages import register_stage
from kbvqa.stages.ask import gather_all, model_id, require_role


class CheckReply(Reply):
    faithful: StrictBool
    issues: list[NonBlank] = Field(max_length=20)


class TranslateConfig(ModelStageConfig):
    role: str = "repairer"
    #: the cross-check (§3.1: "with multiple models"): every role listed checks every translation, and
    #: all must be configured; their agreement is reported per item and over the run
    check_roles: list[str] = Field(default_factory=lambda: ["checker"], min_length=1)
    max_images: int = Field(0, ge=0, le=16)
    target: str = "en"
    drop_unfaithful: bool = False  # default: flag for the proofreaders instead

    @model_validator(mode="before")
    @classmethod
    def _one_check_role(cls, data: Any) -> Any:
        """`check_role = "x"` (one checker, the old key) is `check_roles = ["x"]`."""
        return renamed_key(data, "check_role", "check_roles", convert=lambda one: [one],
                           conflict="give check_roles (a list) or check_role (one), not both")

    @field_validator("check_roles")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"check_roles lists a role twice: {v}")
        return v


def _same_model(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.get("model") == b.get("model") and a.get("base_url") == b.get("base_url")


def checker_slots(roles: Mapping[str, Any], check_roles: Iterable[str]) -> list[tuple[str, str, int | None]]:
    """(name, role, model index) of every checker: each configured role of `check_roles`, and each
    model of a role that lists several ([[models.checker]] twice: "checker#1", "checker#2"), so two
    configured checker models are two checkers, as §3.1's "multiple models" cross-check reads."""
    out: list[tuple[str, str, int | None]] = []
    for role in check_roles:
        client = roles.get(role)
        if isinstance(client, list):
            out.extend((f"{role}#{i}", role, i - 1) for i in range(1, len(client) + 1))
        elif client is not None:
            out.append((role, role, None))
    return out


def checker_models(roles: Mapping[str, Any], check_roles: Iterable[str]) -> int:
    """How many distinct models (model and server) the configured checkers are."""
    seen = set()
    for _, role, i in checker_slots(roles, check_roles):
        client = roles[role] if i is None else roles[role][i]
        prov = model_id(client)
        seen.add((prov.get("backend"), prov.get("model"), prov.get("base_url")))
    return len(seen)


def one_checker_warning(config: TranslateConfig, roles: Mapping[str, Any]) -> str | None:
    """The funnel's warning when the translation is cross-checked by a single model (seed 001 §3.1
    checks it "with multiple models"); None with two or more, or with none configured (the stage
    then stops with NeedsModel, which the funnel already says)."""
    if not config.enabled:
        return None
    n = checker_models(roles, config.check_roles)
    if n != 1:
        return None
    return (f"translations are cross-checked by one model ({', '.join(config.check_roles)}); seed 001 §3.1 checks "
            "them with multiple models: configure a second ([[models.checker]] listed twice, or "
            "[curate.translate] check_roles = [\"checker\", \"<another role>\"] with that role's model)")


@register_stage
class Translate(CurateStage):
    """Translates a non-English item into English; every checker role cross-checks the translation.
    The item counts as faithful only when every checker says so; a split is flagged for the
    proofreaders with each checker's issues."""

    name = "curate-translate"
    version = "3"
    key = "translate"
    config_model = TranslateConfig
    prompts = (TRANSLATE, TRANSLATION_CHECK)

    async def check(self, record: dict[str, Any], ctx: Context) -> Verdict:
        c: TranslateConfig = self.config  # type: ignore[assignment]
        it = item(record)
        lang = it.get("language") or "und"
        if lang == c.target:
            return Verdict({"translated": False, "language": lang})
        if c.role in ctx.roles:  # no call is spent on a translation that cannot be checked
            for role in c.check_roles:
                require_role(ctx, role, "the translation cross-check")
        src = {"question": it["question"], "answer": it.get("answer") or "(none)"}
        reply, prov = await consult(ctx, c, TRANSLATE, QuestionReply, record, what="translation",
                                    language=lang, **src)
        slots = checker_slots(ctx.roles, c.check_roles)
        checks = await gather_all((consult(ctx, c.model_copy(update={"role": role}), TRANSLATION_CHECK, CheckReply,
                                           record, what=f"translation cross-check ({name})", language=lang,
                                           model_index=i, question_en=reply.question, answer_en=reply.answer, **src)
                                   for name, role, i in slots), "translation cross-checks")
        rows = [{"role": name, **prov2, "faithful": chk.faithful, "issues": chk.issues}
                for (name, _, _), (chk, prov2) in zip(slots, checks)]
        said = [r["faithful"] for r in rows]
        payload = {"translated": True, "from": lang, "source": src, "question": reply.question, "answer": reply.answer,
                   "faithful": all(said), "issues": [f"{r['role']}: {i}" for r in rows for i in r["issues"]],
                   "translator": prov, "checks": rows,
                   "agreement": {"checkers": len(rows), "faithful": sum(said), "unanimous": len(set(said)) == 1,
                                 "distinct_models": len({(r.get("model"), r.get("base_url")) for r in rows})},
                   "same_model": any(_same_model(prov, r) for r in rows)}
        if not payload["faithful"] and c.drop_unfaithful:
            return Verdict(payload, "translation_rejected", "; ".join(payload["issues"]) or "not faithful")
        return Verdict(payload, item={"question": reply.question, "answer": reply.answer, "language": c.target,
                                      "source_language": lang, "source_question": src["question"],
                                      "source_answer": it.get("answer")})


def translation_agreement(payloads: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """How the checkers agreed over a run's translated items: items checked, unanimous faithful,
    unanimous not faithful, split; each checker role's share of "faithful"; and, per pair of roles,
    the share of items on which the two gave the same verdict (raw percent agreement, not chance-
    corrected). Items from before multi-checker runs (one `checker`, no `checks`) count as one check."""
    n = unanimous_yes = unanimous_no = split = 0
    by_role: dict[str, list[bool]] = {}
    pairs: dict[str, list[int]] = {}
    for p in payloads:
        if not p.get("translated"):
            continue
        rows = p.get("checks") or [{"role": "checker", "faithful": p.get("faithful")}]
        said = {r["role"]: bool(r["faithful"]) for r in rows}
        n += 1
        if all(said.values()):
            unanimous_yes += 1
        elif not any(said.values()):
            unanimous_no += 1
        else:
            split += 1
        for role, v in said.items():
            by_role.setdefault(role, []).append(v)
        names = sorted(said)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                got = pairs.setdefault(f"{a}~{b}", [0, 0])
                got[0] += said[a] == said[b]
                got[1] += 1
    return {"items": n, "unanimous_faithful": unanimous_yes, "unanimous_not_faithful": unanimous_no, "split": split,
            "faithful_share": {r: round(sum(v) / len(v), 3) for r, v in by_role.items()},
            "pairwise_agreement": {k: {"same": s, "items": t, "share": round(s / t, 3)} for k, (s, t) in pairs.items()},
            "measured_by": "raw percent agreement between checker verdicts (kbvqa's summary)"}


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
        agree = tr.get("agreement") or {}
        who = (f"{agree['checkers'] - agree['faithful']} of {agree['checkers']} checkers found problems"
               if agree.get("checkers", 1) > 1 else "cross-check")
        flags.append(f"translation ({who}): " + ("; ".join(tr.get("issues") or []) or "not faithful"))
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
