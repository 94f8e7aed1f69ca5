"""Human evaluation as seed 000 runs it: annotators answer from the oracle evidence, and the figure is
their answer accuracy against the reference (§4.2: 92.9 ± 1.1 on fixed E-VQA, 91.5 ± 2.1 on fixed
InfoSeek; §5.2: 87.5 ± 2.1 / 96.0 ± 1.4 on E-VQA intra / inter, 86.0 ± 1.4 / 89.5 ± 3.5 on InfoSeek).

- `human_export(...)` writes one sheet per annotator and a key. A sheet shows the question, the
  image and the evidence of the target entity (the sample's own evidence, else the KB sections the
  verifiers found entailing, else the whole article), never the answer or the audit's decision;
  the annotator writes `human_answer`, may say whether the evidence answers the question at all
  (`human_valid`, yes/no) and may report an evident `flaw` (the paper's flaw reports on augmented
  items). From an audited file the sample is stratified by answer support × action × question type
  (round(fraction × size) per stratum, at least one); `fixed_only` keeps the retained rows alone (the
  paper's 10% of the fixed split), otherwise dropped rows come too, so the audit's keep/drop
  decision can be checked. From an augmented set (`kbvqa augment`'s samples.jsonl) it draws
  `per_variant` intra and `per_variant` inter items (the paper: 100 each). Any other reference file
  (a fixed split) is sampled by question type. Beside the key goes `<stem>.references.jsonl`, the
  sampled items as references, so the import scores with the ordinary scorers.
- `human_import(...)` scores each annotator's answers with the benchmark's metric (InfoSeek: the
  official VQA accuracy, the paper's; E-VQA: BEM with `bem_dir`, else exact match, named as "not
  BEM") against the fixed reference, over the items the audit retained, per split (fixed / intra /
  inter). The headline is mean ± sample standard deviation across annotators (n − 1: the reading
  that reproduces the paper's pairs, kbvqa.evaluate.agreement.mean_std). Second figures: each
  annotator's agreement with the audit's keep/drop decision (their yes/no, else whether their
  answer was right), pairwise and Fleiss' κ, and the flaw reports.

An item left blank (no answer, no yes/no) is unannotated: counted, never scored. An item the
annotator marks unanswerable without an answer is a wrong answer, as in the paper's accuracy.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

from kbvqa.data.schema import Sample
from kbvqa.data.sheets import read_sheet, write_sheet
from kbvqa.evaluate.agreement import cohen_kappa, fleiss_kappa, mean_std
from kbvqa.evaluate.analyses import load_records, question_type_of

__all__ = ["KEY_COLUMNS", "SHEET_COLUMNS", "human_export", "human_import", "parse_judgement"]

SHEET_COLUMNS = ["item", "id", "split", "question_type", "entity", "question", "image", "evidence",
                 "human_answer", "human_valid", "flaw", "notes"]
KEY_COLUMNS = ["item", "id", "split", "answer_support", "action", "question_type", "stratum", "audit_valid",
               "answers"]
SPLITS = ("fixed", "intra", "inter")
EXPORT = "kbvqa audit human-export"


def _split_of(s: Sample) -> str:
    """fixed, or the augmented variant (intra / inter / anchor / blank / double)."""
    aug = (s.meta or {}).get("augmented") if isinstance(s.meta, dict) else None
    return str(aug.get("variant")) if isinstance(aug, dict) and aug.get("variant") else "fixed"


def _evidence_text(s: Sample, audit: dict[str, Any], kb: Any, max_chars: int) -> str:
    """The oracle evidence the annotator reads: the sample's own, else the KB sections the verifiers
    found entailing, else the whole article of the target entity."""
    texts = [e.text for e in s.evidence if e.text.strip()]
    if not texts and kb is not None and s.entity and s.entity.url:
        art = kb.get(s.entity.url)
        if art is not None:
            ent = {sid for src, sid in (audit.get("stages", {}).get("verify", {}).get("entailed_sections") or [])
                   if src == "kb"}
            secs = [sec for sec in art.sections if str(sec.index) in ent] or art.sections
            texts = [f"[{sec.title}] {sec.text}" if sec.title else sec.text for sec in secs]
    text = "\n\n".join(texts)
    return text[:max_chars] if max_chars else text


def _image_cell(s: Sample, images_root: Path | None) -> str:
    if images_root is None:
        return " | ".join(s.images)
    from kbvqa.data.images import resolve_image

    cells = []
    for ref in s.images:
        try:
            cells.append(str(resolve_image(ref, images_root)))
        except (OSError, ValueError) as exc:  # named in the cell: the annotator sees what is missing
            cells.append(f"{ref} (not found: {exc})")
    return " | ".join(cells)


def _draw(rows: list[tuple[Sample, dict[str, Any], dict[str, Any]]], *, fraction: float, per_variant: int,
          fixed_only: bool, rng: random.Random) -> tuple[list[tuple[int, str]], dict[str, Any], int, bool]:
    """(chosen (row index, stratum), per-stratum sizes, rows skipped, augmented?)."""
    augmented = any(_split_of(s) in ("intra", "inter") for s, _, _ in rows)
    strata: dict[tuple[str, ...], list[int]] = defaultdict(list)
    skipped = 0
    for i, (s, audit, raw) in enumerate(rows):
        if raw.get("status", "ok") != "ok":
            skipped += 1  # an invalid/error record holds no decision to evaluate
            continue
        if augmented:
            if _split_of(s) in ("intra", "inter"):
                strata[(_split_of(s),)].append(i)
            continue
        if audit:
            if fixed_only and audit.get("action") == "drop":
                continue
            strata[(audit.get("answer_support", "?"), audit.get("action", "?"), question_type_of(s))].append(i)
        else:
            strata[("fixed", question_type_of(s))].append(i)
    chosen: list[tuple[int, str]] = []
    sizes: dict[str, Any] = {}
    for st in sorted(strata):
        members = sorted(strata[st], key=lambda i: rows[i][0].id)
        k = min(len(members), per_variant) if augmented else min(len(members), max(1, round(fraction * len(members))))
        sizes["/".join(st)] = {"size": len(members), "sampled": k}
        chosen += [(i, "/".join(st)) for i in rng.sample(members, k)]
    rng.shuffle(chosen)
    return chosen, sizes, skipped, augmented


def human_export(source: str | Path, out: str | Path, *, fraction: float = 0.1, seed: int = 0, annotators: int = 2,
                 kb: Any = None, max_evidence_chars: int = 0, fixed_only: bool = False, per_variant: int = 100,
                 images_root: str | Path | None = None, overwrite: bool = False) -> dict[str, Any]:
    """Write the annotators' sheets (several: OUT's stem `.a1`, `.a2`, ...; every sheet the same
    items in the same seeded order), the key `<stem>.key.csv` and `<stem>.references.jsonl`. `kb`
    (a KB, or a path kb.store.open_kb opens) supplies evidence a sample lacks; `images_root` writes
    resolved image paths. Returns the counts and paths."""
    if not 0 < fraction <= 1:
        raise ValueError("fraction must be in (0, 1]")
    if annotators < 1 or per_variant < 1:
        raise ValueError("annotators and per_variant must be >= 1")
    if isinstance(kb, (str, Path)):
        from kbvqa.kb.store import open_kb

        kb = open_kb(kb)
    rows = load_records(source)
    chosen, sizes, skipped, augmented = _draw(rows, fraction=fraction, per_variant=per_variant, fixed_only=fixed_only,
                                              rng=random.Random(seed))
    out = Path(out)
    sheets = [out] if annotators == 1 else [out.with_name(f"{out.stem}.a{j + 1}{out.suffix}") for j in range(annotators)]
    key_path, refs_path = out.with_name(f"{out.stem}.key.csv"), out.with_name(f"{out.stem}.references.jsonl")
    root = Path(images_root) if images_root is not None else None
    sheet_rows, key_rows, refs = [], [], []
    for item, (i, st) in enumerate(chosen, 1):
        s, audit, _ = rows[i]
        split = _split_of(s)
        ent = (s.entity.title or s.entity.url) if s.entity else ""
        sheet_rows.append({"item": item, "id": s.id, "split": split, "question_type": question_type_of(s),
                           "entity": ent or "", "question": s.question, "image": _image_cell(s, root),
                           "evidence": _evidence_text(s, audit, kb, max_evidence_chars),
                           "human_answer": "", "human_valid": "", "flaw": "", "notes": ""})
        key_rows.append({"item": item, "id": s.id, "split": split, "answer_support": audit.get("answer_support", ""),
                         "action": audit.get("action", ""), "question_type": question_type_of(s), "stratum": st,
                         "audit_valid": ("no" if audit.get("action") == "drop" else "yes") if audit else "",
                         "answers": json.dumps(s.answer_texts, ensure_ascii=False)})
        refs.append(s.dump())
    who = "the annotators"
    for p in sheets:
        write_sheet(p, SHEET_COLUMNS, sheet_rows, overwrite=overwrite, who=who)
    write_sheet(key_path, KEY_COLUMNS, key_rows, overwrite=overwrite, who=who)
    from kbvqa.data.jsonl import write_jsonl

    write_jsonl(refs_path, refs)
    return {"input": len(rows), "skipped_not_ok": skipped, "sampled": len(chosen), "augmented": augmented,
            "fraction": None if augmented else fraction, "per_variant": per_variant if augmented else None,
            "fixed_only": fixed_only, "seed": seed, "strata": sizes, "sheets": [str(p) for p in sheets],
            "key": str(key_path), "references": str(refs_path),
            "by_split": dict(Counter(r["split"] for r in key_rows)),
            "without_evidence": sum(1 for r in sheet_rows if not r["evidence"].strip())}


_YES = {"yes", "y", "1", "true", "valid", "correct", "ok"}
_NO = {"no", "n", "0", "false", "invalid", "incorrect", "wrong"}


def parse_judgement(v: str | None) -> bool | None:
    """yes/no (and their usual spellings) as True/False, blank as None; anything else a ValueError."""
    t = (v or "").strip().lower()
    if not t:
        return None
    if t in _YES:
        return True
    if t in _NO:
        return False
    raise ValueError(f"cannot read judgement {v!r} (use yes/no)")


def _default_key(sheet: Path) -> Path:
    return sheet.with_name(f"{re.sub(r'[.]a[0-9]+$', '', sheet.stem)}.key.csv")


def _scorer(refs_path: Path, scorer: str | None, bem_dir: str | Path | None) -> tuple[str, Any]:
    """(scorer name, backend): the benchmark's metric as the paper has it where kbvqa can run it."""
    from kbvqa.evaluate.scorers import PAPER_SCORERS, benchmark_of, semantic_backend

    if scorer is None:
        bench = benchmark_of(refs_path)
        if bench is None:
            raise ValueError(f"{refs_path}: cannot tell whether the items are InfoSeek or E-VQA; pass --scorer")
        scorer = PAPER_SCORERS[bench] if bench != "evqa" or bem_dir is not None else "evqa"
    return scorer, semantic_backend(scorer, bem_dir=bem_dir)


def _score_answers(answers: dict[str, str], refs_path: Path, scorer: str, backend: Any) -> tuple[dict[str, bool], str]:
    """Each answered id -> correct, by the study scorer `scorer` on the sampled references."""
    from kbvqa.evaluate.io import PredictionRecord, including_dropped
    from kbvqa.evaluate.scorers import SCORERS

    entry = SCORERS.get(scorer)
    with including_dropped():
        refs = entry.load(refs_path, None)
    preds = [PredictionRecord(data_id=i, prediction=a, line=n) for n, (i, a) in enumerate(answers.items(), 1)]
    items, _, name = entry.score(preds, refs, backend)
    return {r["data_id"]: bool(r["correct"]) for r in items if r["data_id"] in answers}, name


def human_import(sheets: Sequence[str | Path], key: str | Path | None = None, *, scorer: str | None = None,
                 bem_dir: str | Path | None = None) -> dict[str, Any]:
    """Score the annotators' sheets against the key (default: beside the first sheet) and the sampled
    references; see the module docstring for every figure."""
    if not sheets:
        raise ValueError("no sheets given")
    paths = [Path(p) for p in sheets]
    key_path = Path(key) if key else _default_key(paths[0])
    keyrows = {rid: row for _, rid, row in read_sheet(key_path, KEY_COLUMNS[:-1] + ["answers"], _Any(),
                                                      source=key_path, noun="item", export=EXPORT)}
    refs_path = key_path.with_name(key_path.name.removesuffix(".key.csv") + ".references.jsonl")
    if not refs_path.is_file():
        from kbvqa.data.errors import DataError

        raise DataError(f"the sampled references are missing (write the sheets again with `{EXPORT}`)", file=refs_path)
    name_of, backend = _scorer(refs_path, scorer, bem_dir)
    per: dict[str, Any] = {}
    labels: dict[str, dict[str, bool]] = {}
    correct_by: dict[str, dict[str, bool]] = {}
    flaws: dict[str, list[dict[str, str]]] = defaultdict(list)
    reported = name_of
    for p in paths:
        name = p.stem if p.stem not in per else str(p)
        answers: dict[str, str] = {}
        valid: dict[str, bool] = {}
        unannotated = 0
        for n, rid, row in read_sheet(p, ["id", "human_answer", "human_valid"], keyrows, source=key_path,
                                      noun="item", export=EXPORT):
            try:
                v = parse_judgement(row.get("human_valid"))
            except ValueError as exc:
                raise ValueError(f"{p}:{n}: {exc}") from None
            a = (row.get("human_answer") or "").strip()
            if (row.get("flaw") or "").strip():
                flaws[keyrows[rid].get("split") or "fixed"].append({"annotator": name, "id": rid,
                                                                    "flaw": row["flaw"].strip()})
            if not a and v is None:
                unannotated += 1
                continue
            if a:
                answers[rid] = a
            if v is not None:
                valid[rid] = v
        scored, reported = _score_answers(answers, refs_path, name_of, backend) if answers else ({}, name_of)
        rated = set(answers) | set(valid)
        correct = {rid: scored.get(rid, False) for rid in rated}  # unanswerable without an answer: wrong
        correct_by[name] = correct
        # the annotator's keep/drop reading: their yes/no, else whether their answer was right
        labels[name] = {rid: valid[rid] if rid in valid else correct[rid] for rid in rated}
        by_split: dict[str, Any] = {}
        for split in SPLITS:
            ids = [rid for rid in rated if (keyrows[rid].get("split") or "fixed") == split
                   and keyrows[rid].get("audit_valid") != "no"]
            if ids:
                k = sum(correct[rid] for rid in ids)
                by_split[split] = {"rated": len(ids), "correct": k, "accuracy": round(k / len(ids), 4)}
        audited = [rid for rid in rated if keyrows[rid].get("audit_valid") in ("yes", "no")]
        agree = [labels[name][rid] == (keyrows[rid]["audit_valid"] == "yes") for rid in audited]
        dropped = [rid for rid in rated if keyrows[rid].get("audit_valid") == "no"]
        per[name] = {"rated": len(rated), "unannotated": unannotated, "answered": len(answers),
                     "accuracy": by_split,
                     "agreement_with_audit": round(sum(agree) / len(agree), 4) if agree else None,
                     "judged_valid": round(sum(labels[name].values()) / len(rated), 4) if rated else None,
                     "dropped_items_rated": len(dropped),
                     "flaws": sum(1 for fs in flaws.values() for f in fs if f["annotator"] == name)}
    names = list(per)
    if not any(per[n]["rated"] for n in names):
        raise ValueError(f"no item is annotated in {', '.join(str(p) for p in paths)} (fill human_answer, or "
                         "human_valid yes/no)")
    headline = {split: {**mean_std([per[n]["accuracy"][split]["accuracy"] for n in names if split in per[n]["accuracy"]]),
                        "annotators": sum(1 for n in names if split in per[n]["accuracy"])}
                for split in SPLITS if any(split in per[n]["accuracy"] for n in names)}
    pairs = {}
    for x, y in combinations(names, 2):
        common = sorted(set(labels[x]) & set(labels[y]))
        lx, ly = [labels[x][i] for i in common], [labels[y][i] for i in common]
        kappa = cohen_kappa(lx, ly)
        cx, cy = [correct_by[x][i] for i in common], [correct_by[y][i] for i in common]
        pairs[f"{x} vs {y}"] = {"items": len(common),
                                "agreement": round(sum(a == b for a, b in zip(lx, ly)) / len(common), 4) if common else None,
                                "cohen_kappa": None if kappa is None else round(kappa, 4),
                                "answers_agree": round(sum(a == b for a, b in zip(cx, cy)) / len(common), 4) if common else None}
    common_all = sorted(set.intersection(*(set(v) for v in labels.values()))) if labels else []
    fk = fleiss_kappa([[labels[n][i] for n in names] for i in common_all]) if len(names) >= 2 else None
    return {"key": str(key_path), "references": str(refs_path), "items_in_key": len(keyrows), "scorer": reported,
            "accuracy": headline, "annotators": per,
            "agreement_with_audit": mean_std([per[n]["agreement_with_audit"] for n in names
                                              if per[n]["agreement_with_audit"] is not None]),
            "pairwise": pairs, "fleiss_kappa": None if fk is None else round(fk, 4),
            "items_rated_by_all": len(common_all),
            "flaws": {split: {"reports": len(fs), "items": len({f["id"] for f in fs}), "examples": fs[:5]}
                      for split, fs in sorted(flaws.items())}}



class _Any:
    """Every id is known (the key is the source of ids, not checked against another file)."""

    def __contains__(self, item: object) -> bool:
        return True
