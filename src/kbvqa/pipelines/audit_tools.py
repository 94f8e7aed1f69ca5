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
- the human evaluation (`human_export(...)` / `human_import(...)`) is kbvqa.pipelines.human_eval.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
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
# The paper's human evaluation (annotators answer from the evidence; their answer accuracy is the
# figure) is kbvqa.pipelines.human_eval; the agreement statistics are kbvqa.evaluate.agreement's.
from kbvqa.evaluate.agreement import cohen_kappa, fleiss_kappa  # noqa: E402,F401  (the older import path)
