"""The fixed split as files (seed 000 §6): from one audited file, the retained rows with their repairs
(fixed) and the same ids with their content before the audit (unfixed), so the two evaluations are
"aligned on the same sample IDs".

- Retained = the audit finished (status ok) and did not drop the row (action keep or repair).
- Fixed rows are the audited samples as the audit left them; unfixed rows are the same samples with
  the question and answers the audit recorded before any stage touched them
  (`audit.question_before` / `audit.answers_before`; the audit changes nothing else but the `history`
  entries of its own stages, which go too), so an unchanged row is written back as the input held it.
- Both files are written in the input's format (the adapters record it in `meta._source`): InfoSeek
  JSONL plus its `<stem>_qtype.jsonl`, E-VQA or ARA CSV, or kbvqa JSONL (also for generic tables and
  Hugging Face exports, whose writers need a column mapping; the summary says so).
- Rows the audit did not finish (error / invalid / needs a model) are in neither file: they have no
  decision. They are counted, with their reasons, like the dropped rows.

`write_split` does the work for `kbvqa audit split` and for `kbvqa demo`'s fixed.jsonl.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

from kbvqa.data.schema import Answer, Sample
from kbvqa.runner.stage import RUNNER_FIELDS

__all__ = ["SPLIT_FORMATS", "split_format", "qtypes_path", "split_samples", "write_split"]

#: Formats whose writer needs nothing but the samples; anything else is written as kbvqa JSONL.
SPLIT_FORMATS = ("kbvqa", "infoseek", "evqa", "ara", "notevqa")
#: what an audited line carries beside the sample: the audit, its error, and the runner's fields
_AUDIT_KEYS = ("audit", "error", *RUNNER_FIELDS)


def split_format(records: Iterable[dict[str, Any]], requested: str | None = None) -> tuple[str, str | None]:
    """(format to write, note or None): `requested`, else the input format the first record's adapter
    recorded (`meta._source.format`), else kbvqa. A source format that cannot be written from samples
    alone becomes kbvqa, said."""
    if requested is not None:
        if requested not in SPLIT_FORMATS:
            raise ValueError(f"cannot write a split as {requested!r}; one of {', '.join(SPLIT_FORMATS)}")
        return requested, None
    for rec in records:
        src = (rec.get("meta") or {}).get("_source")
        fmt = src.get("format") if isinstance(src, dict) else None
        if fmt is None:
            return "kbvqa", None
        if fmt in SPLIT_FORMATS:
            return fmt, None
        return "kbvqa", (f"the input's format {fmt!r} needs a column mapping to be written; the splits are "
                         "kbvqa JSONL (convert them with `kbvqa data convert`)")
    return "kbvqa", None


def qtypes_path(path: str | Path) -> Path:
    """InfoSeek's naming of a split's question-type file: infoseek_val.jsonl -> infoseek_val_qtype.jsonl."""
    p = Path(path)
    return p.with_name(f"{p.stem}_qtype.jsonl")


def _sample(rec: dict[str, Any]) -> Sample:
    try:
        return Sample.model_validate({k: v for k, v in rec.items() if k not in _AUDIT_KEYS})
    except Exception as exc:
        raise ValueError(f"audited record {rec.get('id')!r} is not a valid sample: {exc}") from exc


def _before(s: Sample, audit: dict[str, Any]) -> Sample:
    """The sample as it was before the audit (its question and answers as recorded)."""
    if "question_before" not in audit or "answers_before" not in audit:
        raise ValueError(f"audited record {s.id!r} has no audit.question_before/answers_before: cannot give its "
                         "original content (was it written by `kbvqa audit run`?)")
    answers = [Answer.model_validate(a) for a in audit["answers_before"]]
    stages = set(audit.get("stages") or ())  # the history entries this audit added go too
    history = [h for h in s.history if getattr(h, "stage", None) not in stages]
    return s.model_copy(update={"question": audit["question_before"], "answers": answers, "history": history})


def split_samples(records: Iterable[dict[str, Any]]) -> tuple[list[Sample], list[Sample], dict[str, Any]]:
    """(fixed samples, unfixed samples, counts) from audited records (one per id, as `read_results`
    gives them). Counts: kept / repaired / dropped / not_finished, the reasons of each (audit.reasons,
    flags for the dropped, the runner reason for the unfinished), and what the repairs changed (the
    change kinds every seed-000 analysis uses)."""
    from kbvqa.evaluate.analyses import change_kind

    fixed: list[Sample] = []
    unfixed: list[Sample] = []
    actions: Counter = Counter()
    reasons: dict[str, Counter] = {"repair": Counter(), "drop": Counter(), "not_finished": Counter()}
    drop_flags: Counter = Counter()
    changes: Counter = Counter()
    examples: dict[str, list[str]] = {"drop": [], "not_finished": []}
    n = 0
    for rec in records:
        n += 1
        status = str(rec.get("status", "ok"))
        audit = rec.get("audit") if isinstance(rec.get("audit"), dict) else None
        if status != "ok" or audit is None:
            actions["not_finished"] += 1
            why = f"{status}: {rec.get('reason') or 'no audit'}" if status != "ok" else "no audit object"
            reasons["not_finished"][why[:160]] += 1
            if len(examples["not_finished"]) < 5:
                examples["not_finished"].append(str(rec.get("id")))
            continue
        action = str(audit.get("action", "keep"))
        if action not in ("keep", "repair", "drop"):
            raise ValueError(f"audited record {rec.get('id')!r} has an unknown action {action!r}")
        actions[action] += 1
        if action == "drop":
            reasons["drop"].update(audit.get("reasons") or ["(no reason recorded)"])
            drop_flags.update(audit.get("flags") or [])
            if len(examples["drop"]) < 5:
                examples["drop"].append(str(rec.get("id")))
            continue
        s = _sample(rec)
        b = _before(s, audit)
        if action == "repair":
            reasons["repair"].update(audit.get("reasons") or ["(no reason recorded)"])
        changes[change_kind(b.question, b.answers, s.question, s.answers)] += 1
        fixed.append(s)
        unfixed.append(b)
    counts = {"records": n, "kept": actions["keep"], "repaired": actions["repair"], "dropped": actions["drop"],
              "not_finished": actions["not_finished"], "retained": len(fixed),
              "repair_reasons": dict(reasons["repair"].most_common()),
              "drop_reasons": dict(reasons["drop"].most_common()), "drop_flags": dict(drop_flags.most_common()),
              "not_finished_reasons": dict(reasons["not_finished"].most_common()),
              "changes": {k: changes.get(k, 0) for k in ("question_only", "answer_only", "both", "neither")},
              "examples": examples}
    return fixed, unfixed, counts


def _write(samples: list[Sample], path: Path, fmt: str) -> dict[str, Any]:
    from kbvqa.data.formats import write_samples

    path.parent.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"path": str(path), "rows": 0}
    qt = None
    if fmt == "infoseek":
        missing = sum(1 for s in samples if s.question_type is None and s.answer_type is None)
        if missing:
            out["qtypes"] = None
            out["qtypes_note"] = (f"no question-type file: {missing} rows have no question type (audit the InfoSeek "
                                  "file after `kbvqa data convert --qtypes`, or score with the original qtype file)")
        else:
            qt = qtypes_path(path)
            out["qtypes"] = str(qt)
    out["rows"] = write_samples(samples, path, fmt, qtypes_out=qt)
    return out


def write_split(audited: str | Path, fixed: str | Path | None, unfixed: str | Path | None = None, *,
                fmt: str | None = None, summary: str | Path | None = None) -> dict[str, Any]:
    """Write the fixed split (and the unfixed one, when a path is given) of `audited`, in the input's
    format (or `fmt`), and the counts as JSON at `summary` (default: beside the fixed split,
    `<stem>.split.json`; False-y `summary=""` writes none). Returns the counts with the paths."""
    from kbvqa.runner import read_results

    if fixed is None and unfixed is None:
        raise ValueError("give the fixed split's path, the unfixed one's, or both")
    records = list(read_results(Path(audited)))
    f_rows, u_rows, counts = split_samples(records)
    out_fmt, note = split_format(records, fmt)  # the input's, even when nothing is retained
    res: dict[str, Any] = {"audited": str(audited), "format": out_fmt, **counts}
    if note:
        res["format_note"] = note
    if fixed is not None:
        res["fixed"] = _write(f_rows, Path(fixed), out_fmt)
    if unfixed is not None:
        res["unfixed"] = _write(u_rows, Path(unfixed), out_fmt)
    res["aligned"] = "the fixed and unfixed files hold the same ids in the same order (the retained rows)"
    if summary is None:
        base = Path(fixed if fixed is not None else unfixed)  # type: ignore[arg-type]
        summary = base.with_name(f"{base.stem}.split.json")
    if summary:
        res["summary_path"] = str(summary)
        Path(summary).write_text(json.dumps(res, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return res
