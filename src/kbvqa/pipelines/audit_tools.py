"""Tools around the audit: compare two versions of a benchmark, build the entity-unique subset, and
run a human evaluation (export a stratified sheet, import the annotators' sheets and score them).

- `diff_versions(A, B)`: join two versions on id and count question / answer changes. "Changed"
  means different after lower-casing, removing punctuation and collapsing spaces; answers are
  compared as sets of `|` alternatives (so reordering alternatives is not a change). The counts and
  shares are seed 000 Table 6's, by the one definition `kbvqa study modification-rates` uses
  (kbvqa.evaluate.analyses.modification_counts): dropped of the items of A, the change kinds and the
  questions / answers modified of the kept items. Overall, by question type and, when the files
  carry an `audit` object, by audit tag.
- `entity_unique_subset(...)` (`subset_file` from a file to a file): one sample per (entity url, normalised question), as the paper's
  1,924-question InfoSeek subset: the same question about the same entity asked with different
  images is kept once (the first by id, or a seeded random pick).
- `human_export(...)` / `human_import(...)`: the annotators see the final question, answer and
  evidence (never the audit's decision: that goes to a separate key file), say whether the item is
  valid and may write their own answer. Import reports each annotator's agreement with the audit's
  keep/drop decision, mean ± std across annotators, pairwise agreement, Cohen's and Fleiss' kappa.
"""

from __future__ import annotations

import csv
import json
import math
import random
import re
from collections import Counter, defaultdict
from itertools import combinations
from pathlib import Path
from typing import Any, Iterable

from kbvqa.data.schema import Sample
# The per-item comparison of two versions (and the record loader) lives in kbvqa.evaluate.analyses:
# its studies need it and evaluate sits below pipelines. `audit diff` counts the same rows, so the
# diff table and the fix-kind / modification-rate studies always agree.
from kbvqa.evaluate.analyses import (CHANGE_KINDS, MODIFICATION_DENOMINATORS, answer_set, load_records,
                                     modification_counts, norm_text, question_type_of as _qtype, version_changes)

# --------------------------------------------------------------------------------------------- diff

_CATS = CHANGE_KINDS


def _pct(members: list[Any]) -> dict[str, Any]:
    """A group's modification counts (`modification_counts`), with the older key names kept."""
    c = modification_counts(members)
    return {**c, "question_changed": c["question_modified"], "answer_changed": c["answer_modified"]}


def diff_versions(a: str | Path, b: str | Path, *, fmt_a: str | None = None, fmt_b: str | None = None,
                  examples: int = 5) -> dict[str, Any]:
    """Compare version A (before) with version B (after), joined on id. See the module docstring."""
    ch = version_changes(a, b, fmt_a=fmt_a, fmt_b=fmt_b)
    everything = [*ch.items, *ch.only_in_a]  # an item B lacks counts as dropped, as in the study
    by_type: dict[str, list[Any]] = defaultdict(list)
    by_tag: dict[str, list[Any]] = defaultdict(list)
    ex: dict[str, list[dict[str, Any]]] = {c: [] for c in _CATS[:3]}
    for it in everything:
        by_type[it.question_type].append(it)
        for tag in (it.tags or ("(none)",)) if it.tags is not None else ():
            by_tag[tag].append(it)
        cat = it.kind
        if cat in ex and not it.dropped and it.status == "ok" and len(ex[cat]) < examples:
            ex[cat].append({"id": it.id, "question_type": it.question_type, "question_a": it.question_a,
                            "question_b": it.question_b, "answers_a": it.answers_a, "answers_b": it.answers_b})
    only_a = sorted(it.id for it in ch.only_in_a)
    return {"a": str(a), "b": str(b), "joined": len(ch.items), **_pct(everything),
            "denominators": MODIFICATION_DENOMINATORS,
            "by_question_type": {k: _pct(v) for k, v in sorted(by_type.items())},
            "by_tag": {k: _pct(v) for k, v in sorted(by_tag.items(), key=lambda kv: -len(kv[1]))},
            "only_in_a": {"count": len(only_a), "ids": only_a[:examples]},
            "only_in_b": {"count": len(ch.only_in_b), "ids": ch.only_in_b[:examples]},
            "examples": ex}


# ------------------------------------------------------------------------------------------- subset


def subset_key(s: Sample, key: Iterable[str]) -> tuple[str, ...] | None:
    """The grouping key; None when the sample has no entity (it is never merged with others)."""
    parts = []
    for k in key:
        if k == "entity":
            ent = s.entity.url or s.entity.title if s.entity else None
            if not ent:
                return None
            parts.append(ent)
        elif k == "question":
            parts.append(norm_text(s.question))
        elif k == "answer":
            parts.append("|".join(sorted(answer_set(s))))
        else:
            raise ValueError(f"unknown subset key {k!r} (use entity, question, answer)")
    return tuple(parts)


def entity_unique_subset(rows: list[tuple[Sample, dict[str, Any], dict[str, Any]]],
                         key: Iterable[str] = ("entity", "question"),
                         seed: int | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(kept raw records in input order, counts). Within a group the kept one is the smallest id, or
    with `seed` a random pick (Random(seed) over the group sorted by id: reproducible)."""
    key = tuple(key)
    groups: dict[tuple[str, ...], list[int]] = defaultdict(list)
    no_entity = 0
    keep: set[int] = set()
    for i, (s, _, _) in enumerate(rows):
        k = subset_key(s, key)
        if k is None:
            no_entity += 1
            keep.add(i)
        else:
            groups[k].append(i)
    rng = random.Random(seed) if seed is not None else None
    for k in sorted(groups):
        members = sorted(groups[k], key=lambda i: rows[i][0].id)
        keep.add(rng.choice(members) if rng else members[0])
    kept = [rows[i][2] for i in sorted(keep)]
    entities = {k[key.index("entity")] for k in groups} if "entity" in key else set()
    stats = {"input": len(rows), "kept": len(kept), "removed": len(rows) - len(kept), "groups": len(groups),
             "groups_with_duplicates": sum(len(v) > 1 for v in groups.values()), "no_entity": no_entity,
             "entities": len(entities), "key": list(key), "seed": seed,
             "by_question_type": dict(sorted(Counter(_qtype(rows[i][0]) for i in keep).items()))}
    return kept, stats


def subset_file(input: str | Path, out: str | Path, key: Iterable[str] = ("entity", "question"), *,
                seed: int | None = None, fmt: str | None = None) -> dict[str, Any]:
    """`entity_unique_subset` from a file to kbvqa JSONL (audited records keep their audit); the
    counts, with the output path under "out"."""
    from kbvqa.data.jsonl import write_jsonl

    kept, stats = entity_unique_subset(load_records(input, fmt), key, seed=seed)
    write_jsonl(out, kept)
    return {**stats, "out": str(out)}


# ------------------------------------------------------------------------------- human evaluation

SHEET_COLUMNS = ["item", "id", "question_type", "entity", "question", "answer", "evidence",
                 "human_valid", "human_answer", "notes"]
KEY_COLUMNS = ["item", "id", "answer_support", "action", "question_type", "stratum", "audit_valid", "answers"]


def _evidence_text(s: Sample, audit: dict[str, Any], kb: Any, max_chars: int) -> str:
    """The evidence the annotator reads: the sample's own evidence, else the KB sections the
    verifiers found entailing, else the whole article."""
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


def human_export(audited: str | Path, out: str | Path, *, fraction: float = 0.1, seed: int = 0,
                 annotators: int = 2, kb: Any = None, max_evidence_chars: int = 0) -> dict[str, Any]:
    """Write annotator sheet(s) and a key file. Stratified by answer_support × action × question
    type: each stratum contributes round(fraction × size) items, at least one. With several
    annotators every sheet holds the same items in the same (shuffled) order. `kb` (a KB, or a path
    kb.store.open_kb opens) supplies the evidence text. Returns counts and paths."""
    if not 0 < fraction <= 1:
        raise ValueError("fraction must be in (0, 1]")
    if annotators < 1:
        raise ValueError("annotators must be >= 1")
    if isinstance(kb, (str, Path)):
        from kbvqa.kb.store import open_kb
        kb = open_kb(kb)
    rows = load_records(audited)
    strata: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    skipped = 0
    for i, (s, audit, raw) in enumerate(rows):
        if raw.get("status", "ok") != "ok" or not audit:
            skipped += 1  # invalid/error records have no decision to evaluate
            continue
        strata[(audit.get("answer_support", "?"), audit.get("action", "?"), _qtype(s))].append(i)
    rng = random.Random(seed)
    chosen: list[tuple[int, str]] = []
    per_stratum = {}
    for st in sorted(strata):
        members = sorted(strata[st], key=lambda i: rows[i][0].id)
        k = min(len(members), max(1, round(fraction * len(members))))
        pick = rng.sample(members, k)
        per_stratum["/".join(st)] = {"size": len(members), "sampled": k}
        chosen += [(i, "/".join(st)) for i in pick]
    rng.shuffle(chosen)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    sheets = [out] if annotators == 1 else [out.with_name(f"{out.stem}.a{j + 1}{out.suffix}") for j in range(annotators)]
    key_path = out.with_name(f"{out.stem}.key.csv")
    sheet_rows, key_rows = [], []
    for item, (i, st) in enumerate(chosen, 1):
        s, audit, _ = rows[i]
        ent = (s.entity.title or s.entity.url) if s.entity else ""
        sheet_rows.append({"item": item, "id": s.id, "question_type": _qtype(s), "entity": ent or "",
                           "question": s.question, "answer": " | ".join(s.answer_texts),
                           "evidence": _evidence_text(s, audit, kb, max_evidence_chars),
                           "human_valid": "", "human_answer": "", "notes": ""})
        key_rows.append({"item": item, "id": s.id, "answer_support": audit.get("answer_support"),
                         "action": audit.get("action"), "question_type": _qtype(s), "stratum": st,
                         "audit_valid": "no" if audit.get("action") == "drop" else "yes",
                         "answers": json.dumps(s.answer_texts, ensure_ascii=False)})
    for p in sheets:
        _write_csv(p, SHEET_COLUMNS, sheet_rows)
    _write_csv(key_path, KEY_COLUMNS, key_rows)
    return {"input": len(rows), "skipped_not_ok": skipped, "sampled": len(chosen), "fraction": fraction,
            "seed": seed, "strata": per_stratum, "sheets": [str(p) for p in sheets], "key": str(key_path)}


def _write_csv(path: Path, cols: list[str], rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)


_YES = {"yes", "y", "1", "true", "valid", "correct", "ok"}
_NO = {"no", "n", "0", "false", "invalid", "incorrect", "wrong"}


def parse_judgement(v: str | None) -> bool | None:
    t = (v or "").strip().lower()
    if not t:
        return None
    if t in _YES:
        return True
    if t in _NO:
        return False
    raise ValueError(f"cannot read judgement {v!r} (use yes/no)")


def _answer_matches(human: str, answers: list[str]) -> bool:
    from kbvqa.data import matching as mt

    h = mt.norm(human)
    return bool(h) and any(h == mt.norm(a) or mt.contains(human, a) for a in answers)


def cohen_kappa(x: list[Any], y: list[Any]) -> float | None:
    n = len(x)
    if n == 0:
        return None
    po = sum(a == b for a, b in zip(x, y)) / n
    cats = set(x) | set(y)
    pe = sum((x.count(c) / n) * (y.count(c) / n) for c in cats)
    if pe >= 1.0:
        return None  # both raters used one category: kappa undefined
    return (po - pe) / (1 - pe)


def fleiss_kappa(table: list[list[Any]]) -> float | None:
    """Items × raters labels (same number of raters per item, at least 2)."""
    if not table or len(table[0]) < 2:
        return None
    m = len(table[0])
    cats = sorted({c for row in table for c in row}, key=str)
    n = len(table)
    p_j = {c: sum(row.count(c) for row in table) / (n * m) for c in cats}
    p_i = [(sum(row.count(c) ** 2 for c in cats) - m) / (m * (m - 1)) for row in table]
    p_bar = sum(p_i) / n
    pe = sum(v * v for v in p_j.values())
    if pe >= 1.0:
        return None
    return (p_bar - pe) / (1 - pe)


def _mean_std(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"mean": None, "std": None}
    mean = sum(xs) / len(xs)
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return {"mean": round(mean, 4), "std": round(std, 4)}


def _default_key(sheet: Path) -> Path:
    stem = re.sub(r"\.a\d+$", "", sheet.stem)
    return sheet.with_name(f"{stem}.key.csv")


def human_import(sheets: list[str | Path], key: str | Path | None = None) -> dict[str, Any]:
    """Score annotator sheets against the key (default: `<sheet stem without .aN>.key.csv`).

    An annotator's label for an item is `human_valid` (yes/no); when that is blank but
    `human_answer` is filled, the item counts as valid when the answer matches the final answer.
    Accuracy = agreement of that label with the audit's decision (valid unless dropped)."""
    if not sheets:
        raise ValueError("no sheets given")
    sheets = [Path(p) for p in sheets]
    key_path = Path(key) if key else _default_key(sheets[0])
    if not key_path.exists():
        raise FileNotFoundError(f"key file not found: {key_path} (pass --key)")
    with key_path.open(newline="", encoding="utf-8") as f:
        keyrows = {r["id"]: r for r in csv.DictReader(f)}
    labels: dict[str, dict[str, bool]] = {}
    per: dict[str, Any] = {}
    for p in sheets:
        name = p.stem
        if name in labels:
            name = str(p)
        got: dict[str, bool] = {}
        ans_hits = ans_n = unannotated = 0
        with p.open(newline="", encoding="utf-8") as f:
            for lineno, r in enumerate(csv.DictReader(f), 2):
                k = keyrows.get(r.get("id", ""))
                if k is None:
                    raise ValueError(f"{p}:{lineno}: id {r.get('id')!r} is not in the key {key_path}")
                answers = json.loads(k["answers"])
                try:
                    v = parse_judgement(r.get("human_valid"))
                except ValueError as exc:
                    raise ValueError(f"{p}:{lineno}: {exc}") from None
                ha = (r.get("human_answer") or "").strip()
                if ha:
                    ans_n += 1
                    ans_hits += _answer_matches(ha, answers)
                    if v is None:
                        v = _answer_matches(ha, answers)
                if v is None:
                    unannotated += 1
                    continue
                got[k["id"]] = v
        labels[name] = got
        agree = [got[i] == (keyrows[i]["audit_valid"] == "yes") for i in got]
        by_stratum: dict[str, list[bool]] = defaultdict(list)
        for i, ok in zip(got, agree):
            by_stratum[keyrows[i]["answer_support"]].append(ok)
        per[name] = {"annotated": len(got), "unannotated": unannotated,
                     "accuracy": round(sum(agree) / len(agree), 4) if agree else None,
                     "judged_valid": round(sum(got.values()) / len(got), 4) if got else None,
                     "answer_accuracy": round(ans_hits / ans_n, 4) if ans_n else None,
                     "accuracy_by_answer_support": {k: round(sum(v) / len(v), 4) for k, v in sorted(by_stratum.items())}}
    names = list(labels)
    pairs = {}
    for x, y in combinations(names, 2):
        common = sorted(set(labels[x]) & set(labels[y]))
        lx, ly = [labels[x][i] for i in common], [labels[y][i] for i in common]
        kappa = cohen_kappa(lx, ly)
        pairs[f"{x} vs {y}"] = {"items": len(common),
                                "agreement": round(sum(a == b for a, b in zip(lx, ly)) / len(common), 4) if common else None,
                                "cohen_kappa": None if kappa is None else round(kappa, 4)}
    common_all = sorted(set.intersection(*(set(v) for v in labels.values()))) if labels else []
    fk = fleiss_kappa([[labels[n][i] for n in names] for i in common_all]) if len(names) >= 2 else None
    return {"key": str(key_path), "items_in_key": len(keyrows), "annotators": per,
            "accuracy": _mean_std([v["accuracy"] for v in per.values() if v["accuracy"] is not None]),
            "answer_accuracy": _mean_std([v["answer_accuracy"] for v in per.values() if v["answer_accuracy"] is not None]),
            "pairwise": pairs, "fleiss_kappa": None if fk is None else round(fk, 4),
            "items_rated_by_all": len(common_all)}
