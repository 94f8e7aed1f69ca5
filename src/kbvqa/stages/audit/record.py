"""Record helpers every audit stage shares.

The `audit` object lives beside the Sample fields in a record (so the audited file is still a
benchmark file), and is split off before validation and joined back after each stage.
"""

from __future__ import annotations

from typing import Any

from kbvqa.data.evqa import EVQA_DATASETS, EVQA_QUESTION_TYPES
from kbvqa.data.schema import Sample

_ACTION_RANK = {"keep": 0, "repair": 1, "drop": 2}


def split_record(record: dict[str, Any]) -> tuple[Sample, dict[str, Any]]:
    """(Sample, audit dict) from a record; the audit dict is created on first use and remembers the
    question and answers as they were before any audit stage touched them."""
    rec = dict(record)
    audit = dict(rec.pop("audit", None) or {})
    rec.pop("status", None)
    rec.pop("error", None)
    try:
        sample = Sample.model_validate(rec)
    except Exception as exc:  # a malformed record is an input error with its id, not a label
        raise ValueError(f"record {record.get('id')!r} is not a valid Sample: {exc}") from exc
    if "question_before" not in audit:
        audit["question_before"] = sample.question
        audit["answers_before"] = [a.model_dump(mode="json") for a in sample.answers]
        audit.setdefault("action", "keep")
        audit.setdefault("tags", [])
        audit.setdefault("reasons", [])
        audit.setdefault("stages", {})
    return sample, audit


def join_record(sample: Sample, audit: dict[str, Any]) -> dict[str, Any]:
    out = sample.dump()
    out["audit"] = audit
    return out


def escalate(audit: dict[str, Any], action: str, reason: str | None = None) -> None:
    """Raise the sample's action (keep < repair < drop); never lowers it."""
    if _ACTION_RANK[action] > _ACTION_RANK[audit.get("action", "keep")]:
        audit["action"] = action
    if reason and reason not in audit["reasons"]:
        audit["reasons"].append(reason)


KEEP_ALL = "keep_all: E-VQA's fixed split keeps every question (seed 000 §4.2)"


def is_evqa(sample: Sample) -> bool:
    """An E-VQA sample: its dataset_name (iNaturalist / Google Landmarks) or question type says so."""
    return (str(sample.dataset or "").lower() in EVQA_DATASETS
            or str(sample.question_type or "").lower() in EVQA_QUESTION_TYPES)


def apply_policy(sample: Sample, audit: dict[str, Any], keep_all: bool) -> None:
    """Record the per-dataset drop policy on the sample's audit (`audit.policy`) when it is E-VQA's."""
    if keep_all and is_evqa(sample):
        audit["policy"] = KEEP_ALL


def drop(audit: dict[str, Any], reason: str) -> None:
    """Remove the sample for `reason`, unless its dataset's policy keeps every row: then it stays as
    it is, tagged `kept_by_dataset_policy`, with the reason it would have been removed for."""
    if audit.get("policy") == KEEP_ALL:
        add_tag(audit, "kept_by_dataset_policy")
        audit.setdefault("would_drop", [])
        if reason not in audit["would_drop"]:
            audit["would_drop"].append(reason)
        return
    escalate(audit, "drop", reason)


def add_tag(audit: dict[str, Any], tag: str) -> None:
    if tag not in audit["tags"]:
        audit["tags"].append(tag)


def provenance(stage: Any) -> dict[str, Any]:
    return {"backend": "rules", "model": None, "version": f"{stage.name}@{stage.version}"}


# Flags: every reason the audit questions a sample's answer. `truncated_evidence` is inconclusive (the
# answer may be in the part of the evidence that was cut off): listed, but not a decided flag.
INCONCLUSIVE_FLAGS = frozenset({"truncated_evidence"})
_FLAG_TAGS = ("distinct_alternatives", "final_unsupported", "not_answerable")


def _answer_key(answers: list[Any]) -> list[tuple[str, tuple[str, ...]]]:
    """(text, parts) of each answer, whether an Answer, its dump (a bare string or a dict) or a number."""
    out = []
    for a in answers:
        if isinstance(a, str):
            text, parts = a, []
        elif isinstance(a, dict):
            text, parts = str(a.get("text", "")), a.get("parts") or []
        elif hasattr(a, "text"):
            text, parts = a.text, a.parts
        else:
            text, parts = str(a), []
        out.append((text.strip(), tuple(p.strip() for p in parts)))
    return out


def update_flags(sample: Sample, audit: dict[str, Any]) -> list[str]:
    """Set `audit.flags` (why the answer is questioned: answer_mismatch, the unsupported reason
    (not_in_evidence / missing_kb / truncated_evidence ...), answer_rewritten for any change to the
    answers, distinct_alternatives, final_unsupported, not_answerable) and `audit.flagged` (any flag
    that is not inconclusive)."""
    flags: list[str] = []
    support = audit.get("answer_support")
    if support == "mismatched":
        flags.append("answer_mismatch")
    elif support == "unsupported":
        flags.append(audit.get("stages", {}).get("derive", {}).get("reason") or "unsupported")
    if "answers_before" in audit and _answer_key(audit["answers_before"]) != _answer_key(sample.answers):
        flags.append("answer_rewritten")
    flags += [t for t in _FLAG_TAGS if t in audit.get("tags", [])]
    audit["flags"] = flags
    audit["flagged"] = any(f not in INCONCLUSIVE_FLAGS for f in flags)
    return flags
