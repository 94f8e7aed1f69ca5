"""Stage 6 — the human audit (seed 001 §3.2 stage 4): a sheet out, decisions in, references written.

`export_sheet` writes one CSV row per draft (the consistency-check journal: drafts after the
filter, the de-duplication and the check): the item, the draft text with its tags, the images it
cites (index, file under the build folder, source), `flags` for the reviewer's attention (a failed
multimodal consistency check with its issues; an image kept without a five-rule verdict because the
filter call failed), and two columns for the reviewer: `decision` (accept / minor fix / reject) and
`corrected_text` (the fixed draft, for minor fix). `import_sheet`
reads it back and writes only accepted or fixed items as references in the NoteVQA layout
(`kbvqa.data.notevqa`: `reference` = {text, images: [{path, source_url, sha256}]}), with paths
relative to the references file. A fixed text's tags are checked like the generator's (the same
`check_tags`), and the images it no longer cites are dropped.

Strict on purpose: an unknown decision, an id the build has no draft for, a repeated id, a minor
fix without text, an accept with a corrected text, or a corrected text with bad tags is an error
naming the file, the row (the header is row 1) and the column. A blank decision is `pending` and
counted, never read as accept.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from kbvqa.data.errors import DataError
from kbvqa.data.notevqa import write_notevqa
from kbvqa.data.schema import Sample
from kbvqa.data.sheets import read_sheet, write_sheet
from kbvqa.pipelines.reference.synthesis import check_tags, renumber
from kbvqa.runner import read_results

COLUMNS = ("id", "question", "short_answer", "draft", "images", "flags", "decision", "corrected_text", "notes")
DECISIONS = ("accept", "minor fix", "reject")


def _drafts(journal: Path) -> dict[str, dict[str, Any]]:
    if not journal.is_file():
        raise DataError("no journal of drafts: run `kbvqa reference build` first (the drafts go to review "
                        "from its last stage, the consistency check)", file=journal)
    return {line["id"]: line for line in read_results(journal) if line.get("status") == "ok"}


def _image_lines(draft: dict[str, Any], image_dir: str) -> str:
    return "\n".join(f"{im['index']}: {image_dir}/{im['path']} — {im.get('source_url') or im.get('page_url') or ''}"
                     for im in draft["images"])


def review_flags(line: dict[str, Any]) -> list[str]:
    """What a reviewer must look at in this draft: a failed consistency check (with its issues),
    images the five-rule filter could not judge, and image tags the synthesis wrote that could not be
    resolved (removed from the draft: the text around them may speak of a picture that is not there)."""
    flags = []
    cons = line.get("consistency") or {}
    if cons.get("passed") is False:
        issues = "; ".join(f"{i['kind']}" + (f" (tag {i['tag']})" if i.get("tag") else "") + f": {i['detail']}"
                           for i in cons.get("issues") or [])
        flags.append(f"CONSISTENCY CHECK FAILED — {issues}")
    index = {im["sha256"]: im["index"] for im in line["draft"]["images"]}
    for u in (line.get("filter") or {}).get("unchecked") or []:
        if u["sha256"] in index:
            flags.append(f"image {index[u['sha256']]} kept without a five-rule verdict (filter call {u['status']}: "
                         f"{u['reason'][:160]})")
    dropped = line["draft"].get("dropped_tags") or []
    if dropped:
        kinds = ", ".join(f"{k} {n}" for k, n in Counter(v["kind"] for v in dropped).items())
        flags.append(f"{len(dropped)} image tag(s) of the synthesis could not be resolved and were removed ({kinds}); "
                     f"first: {dropped[0]['tag'][:80]}")
    return flags


def export_sheet(journal: str | Path, out: str | Path, *, image_dir: str = "images",
                 overwrite: bool = False) -> dict[str, Any]:
    """The reviewers' CSV for every ok draft in the final journal; refuses to overwrite a sheet (it
    may hold decisions) unless `overwrite`."""
    drafts = _drafts(Path(journal))
    flags = {rid: review_flags(line) for rid, line in drafts.items()}
    write_sheet(out, COLUMNS, ({"id": rid, "question": line.get("question", ""), "short_answer": line.get("answer", ""),
                                "draft": line["draft"]["text"], "images": _image_lines(line["draft"], image_dir),
                                "flags": "\n".join(flags[rid]), "decision": "", "corrected_text": "", "notes": ""}
                               for rid, line in drafts.items()),
                overwrite=overwrite, who="reviewers")
    return {"sheet": str(out), "rows": len(drafts), "decisions": list(DECISIONS),
            "flagged_consistency_failed": sum((drafts[r].get("consistency") or {}).get("passed") is False
                                              for r in drafts),
            "flagged_unjudged_images": sum(sum(f.startswith("image ") for f in fl) for fl in flags.values())}


def _decision(raw: str | None, sheet: Path, row: int) -> str:
    d = " ".join((raw or "").replace("_", " ").replace("-", " ").lower().split())
    if d and d not in DECISIONS:
        raise DataError(f"{raw!r} is not a decision (use one of: {', '.join(DECISIONS)}, or leave it blank)",
                        file=sheet, row=row, field="decision")
    return d or "pending"


def _reference(line: dict[str, Any], text: str, images: list[dict[str, Any]], store: Path, out_dir: Path,
               decision: str, notes: str) -> Sample:
    sample = Sample.model_validate(line["sample"])
    rel = [{"path": Path(os.path.relpath(store / im["path"], out_dir)).as_posix(),
            "source_url": im.get("source_url") if "://" in str(im.get("source_url") or "") else im.get("page_url"),
            "sha256": im["sha256"], **({"page_url": im["page_url"]} if im.get("page_url") else {})} for im in images]
    query = [Path(os.path.relpath(p, out_dir)).as_posix() for p in line.get("query_images") or []]
    extra = {**(sample.meta.get("extra") or {}),
             "reference_audit": {"decision": decision, **({"notes": notes} if notes else {}),
                                 "generator": (line["draft"].get("generator") or {}).get("model")}}
    meta = {**sample.meta, "reference": {"text": text, "images": rel}, "extra": extra}
    return sample.model_copy(update={"meta": meta, "images": query or sample.images})


def import_sheet(journal: str | Path, sheet: str | Path, out: str | Path, *, image_store: str | Path) -> dict[str, Any]:
    """Read the reviewed sheet; write accepted and fixed items to `out` (NoteVQA JSONL); counts."""
    journal, sheet, out = Path(journal), Path(sheet), Path(out)
    drafts = _drafts(journal)
    store = Path(image_store).resolve()
    out_dir = out.resolve().parent
    tally: Counter[str] = Counter()
    seen: set[str] = set()
    refs: list[Sample] = []
    for n, rid, row in read_sheet(sheet, ("id", "decision", "corrected_text"), drafts, source=journal, noun="draft",
                                  export="kbvqa reference audit-export"):
        seen.add(rid)
        decision = _decision(row.get("decision"), sheet, n)
        tally[decision.replace(" ", "_")] += 1
        fixed = (row.get("corrected_text") or "").strip()
        line, draft = drafts[rid], drafts[rid]["draft"]
        if decision == "accept" and fixed:
            raise DataError("decision is accept but corrected_text is filled in: use 'minor fix' for a corrected "
                            "draft", file=sheet, row=n, field="corrected_text")
        if decision == "minor fix" and not fixed:
            raise DataError("decision is minor fix but corrected_text is empty", file=sheet, row=n,
                            field="corrected_text")
        if decision not in ("accept", "minor fix"):
            continue
        text, images = draft["text"], draft["images"]
        if decision == "minor fix":
            used, violations = check_tags(fixed, len(images))
            if violations:
                v = violations[0]
                raise DataError(f"{v['kind']}: {v['tag']} ({v['detail']}; the draft has {len(images)} image(s))",
                                file=sheet, row=n, field="corrected_text")
            text, images = renumber(fixed, used), [{**images[i - 1], "index": j} for j, i in enumerate(used, 1)]
            tally["images_dropped_by_fix"] += len(draft["images"]) - len(images)
        refs.append(_reference(line, text, images, store, out_dir, decision, (row.get("notes") or "").strip()))
    write_notevqa(refs, out)
    return {"out": str(out), "drafts": len(drafts), "rows": len(seen), "accept": tally["accept"],
            "minor_fix": tally["minor_fix"], "reject": tally["reject"], "pending": tally["pending"],
            "not_in_sheet": len(set(drafts) - seen), "references": len(refs),
            "images_dropped_by_fix": tally["images_dropped_by_fix"],
            "reference_images": sum(len(r.meta["reference"]["images"]) for r in refs)}
