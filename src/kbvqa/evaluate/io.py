"""Fast, loud readers for prediction, reference and retrieval files.

The scorers must handle 300k-line files in a few seconds, so these readers use `orjson` when it is
installed (plain `json` otherwise), keep records as small slotted objects and never go through
pydantic. Every malformed line raises `ScoreInputError` naming the file, the 1-based line and the
field.
"""

from __future__ import annotations

import csv
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from kbvqa.data import jsonl as data_jsonl
from kbvqa.data.errors import DataError
from kbvqa.data.jsonl import gc_paused
from kbvqa.evaluate.normalize import NormMemo, infoseek_normalize, number_words_to_digits
from kbvqa.evaluate.numeric import parse_numeric

__all__ = [
    "ScoreInputError", "PredictionRecord", "InfoSeekRef", "read_jsonl", "read_csv",
    "GRADED_TEXTS", "load_predictions", "load_infoseek_references", "load_qtypes", "ref_norm_aliases",
    "DroppedRows", "including_dropped",
]

_QTYPES = {"string": "String", "numerical": "Numerical", "time": "Time"}


class ScoreInputError(ValueError):
    """Bad scorer input: always names the file, the 1-based line (or CSV row) and the field."""

    def __init__(self, path: str | Path, line: int | None, field: str | None, message: str):
        self.path, self.line, self.field = str(path), line, field
        where = f"{path}" + (f":{line}" if line is not None else "")
        what = f" field {field!r}" if field else ""
        super().__init__(f"{where}:{what} {message}".replace(": :", ":"))


def read_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """kbvqa.data.jsonl.read_jsonl, with a bad line reported as a ScoreInputError (file, line)."""
    try:
        yield from data_jsonl.read_jsonl(path)
    except DataError as exc:
        raise ScoreInputError(path, exc.row, exc.field, exc.message) from None


def read_csv(path: str | Path) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield (row_number, row) with row 1 = the first data row after the header (line 2 of the file).
    The ARA augmented manifest (one row per anchor) gives its anchor / intra / inter references
    instead (`kbvqa.data.ara.augmented_reference_rows`), so it is read wherever references are."""
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None:
            raise ScoreInputError(path, 1, None, "empty CSV (no header)")
        if "anchor_data_id" in reader.fieldnames and "data_id" not in reader.fieldnames:
            from kbvqa.data.ara import augmented_reference_rows

            try:
                yield from augmented_reference_rows(path)
            except DataError as exc:
                raise ScoreInputError(path, exc.row, exc.field, exc.message) from None
            return
        for row in reader:
            yield reader.line_num, row


# --------------------------------------------------------------------------------------------------
# predictions


@dataclass(slots=True)
class PredictionRecord:
    """One prediction line. `prediction` None = the system gave no answer (scored as wrong)."""

    data_id: str
    prediction: str | None
    line: int
    status: str = "ok"  # a kbvqa runner line that ended error / invalid: no answer, counted as such


#: What text of a kbvqa Prediction a scorer reads (`load_predictions(graded_text=...)`).
GRADED_TEXTS = {
    "full": "the whole answer, image tags removed (as a SimpleQA-style grader sees a response)",
    "short": "the short answer: the prediction's `short_answer` (an agent answer's first sentence), else its answer",
}


@gc_paused()
def load_predictions(path: str | Path, graded_text: str = "short") -> list[PredictionRecord]:
    """Read predictions: {"data_id","prediction"} lines or kbvqa Prediction {"sample_id","answer"}.
    Every line a kbvqa job writes is readable: an abstention is `answer: null`; a record that ended
    error or invalid is a prediction of nothing with that `status`, which scorers count (and score as
    wrong).

    `graded_text` chooses the text of a Prediction line (see GRADED_TEXTS): "short" (the default:
    the exact-match scorers compare a short string) reads `short_answer` when the line has one, else
    `answer`; "full" reads the whole `answer` with image tags removed (the judge's default). A
    {data_id, prediction} line has one text, read as it is in both.

    Order and duplicates are kept; the scorers decide what duplicates mean (official InfoSeek counts
    them twice, the other modes keep the last one and report the count).
    """
    if graded_text not in GRADED_TEXTS:
        raise ValueError(f"graded_text must be one of {', '.join(GRADED_TEXTS)}, not {graded_text!r}")
    full = graded_text == "full"
    if full:
        from kbvqa.stages.agent.tags import strip_tags
    out: list[PredictionRecord] = []
    append = out.append
    for ln, obj in read_jsonl(path):
        status = obj.get("status", "ok")
        if status in ("error", "invalid") and isinstance(obj.get("id", obj.get("sample_id")), str):
            # a record the answering job could not finish: scored as no answer, counted by status
            append(PredictionRecord(obj.get("sample_id") or obj["id"], None, ln, status))
            continue
        if "data_id" in obj:
            did, pred, pfield = obj["data_id"], obj.get("prediction", _MISSING), "prediction"
        elif "sample_id" in obj:
            pfield = "short_answer" if not full and obj.get("short_answer") is not None else "answer"
            did, pred = obj["sample_id"], obj.get(pfield, _MISSING)
            if full and isinstance(pred, str):
                pred = strip_tags(pred)
        else:
            raise ScoreInputError(path, ln, "data_id", "missing (expected data_id/prediction or sample_id/answer)")
        if pred is _MISSING and "status" in obj:  # a kbvqa runner line from before answers were always written
            pred = None
        if pred is _MISSING:
            raise ScoreInputError(path, ln, pfield, "missing (use null for 'no answer')")
        if isinstance(did, int) and not isinstance(did, bool):
            did = str(did)
        if not isinstance(did, str) or not did:
            raise ScoreInputError(path, ln, "data_id", f"must be a non-empty string, got {did!r}")
        if pred is not None and not isinstance(pred, str):
            if isinstance(pred, (int, float)) and not isinstance(pred, bool):
                pred = str(pred)
            else:
                raise ScoreInputError(path, ln, pfield, f"must be a string or null, got {type(pred).__name__}")
        append(PredictionRecord(did, pred, ln))
    return out


def prediction_status_counts(preds: list[PredictionRecord]) -> dict[str, int]:
    """How many prediction lines were abstentions, errors and invalid replies (for every summary)."""
    out = {"n_abstained": 0, "n_error_lines": 0, "n_invalid_lines": 0}
    for p in preds:
        if p.status == "error":
            out["n_error_lines"] += 1
        elif p.status == "invalid":
            out["n_invalid_lines"] += 1
        elif p.prediction is None:
            out["n_abstained"] += 1
    return out


def last_prediction_per_id(preds: list[PredictionRecord], refs: Any) -> tuple[dict[str, str | None], int, int]:
    """One prediction per reference id, the last line winning; returns (map, n_unknown, n_duplicates).
    The strict, reward and E-VQA scorers share this so they count duplicates and unknown ids alike."""
    by_id: dict[str, str | None] = {}
    unknown = dup = 0
    for p in preds:
        if p.data_id not in refs:
            unknown += 1
            continue
        if p.data_id in by_id:
            dup += 1
        by_id[p.data_id] = p.prediction
    return by_id, unknown, dup


def kbvqa_alternatives(answers: Any, path: str | Path, ln: int) -> list[str]:
    """A kbvqa `answers` list as alternative strings; a multi-part answer becomes "a&&b" (E-VQA's
    spelling, which the E-VQA scorer and answer-in-text recall split again)."""
    if not isinstance(answers, list):
        raise ScoreInputError(path, ln, "answers", f"expected a list, got {answers!r}")
    alts = []
    for a in answers:
        if isinstance(a, str):
            alts.append(a)
        elif isinstance(a, dict) and isinstance(a.get("text"), str):
            parts = a.get("parts") or []
            alts.append("&&".join(parts) if len(parts) > 1 else a["text"])
        else:
            raise ScoreInputError(path, ln, "answers", f"each answer must be a string or {{text,...}}, got {a!r}")
    return alts


def add_reference(refs: dict[str, Any], ref: Any, path: str | Path) -> None:
    """Insert `ref` (anything with data_id and line) or fail naming both lines of a duplicate id."""
    if ref.data_id in refs:
        raise ScoreInputError(path, ref.line, "data_id",
                              f"duplicate reference id {ref.data_id!r} (first on line {refs[ref.data_id].line})")
    refs[ref.data_id] = ref


_MISSING = object()


# --------------------------------------------------------------------------------------------------
# audited references: the rows the audit dropped are not references

#: Whether reference loaders accept an audited file's dropped rows (`including_dropped`, the
#: --include-dropped of `kbvqa score` / `kbvqa study`); a loader's own `include_dropped=` wins.
_INCLUDE_DROPPED: ContextVar[bool] = ContextVar("kbvqa_include_dropped", default=False)


@contextmanager
def including_dropped(flag: bool = True) -> Iterator[None]:
    """Within the block, reference loaders read an audited file's `drop` rows as references instead of
    refusing the file (what --include-dropped asks for)."""
    token = _INCLUDE_DROPPED.set(flag)
    try:
        yield
    finally:
        _INCLUDE_DROPPED.reset(token)


class DroppedRows:
    """Counts the lines of a reference file the audit dropped (`audit.action == "drop"`), and at the
    end refuses the file when there are any: seed 000 scores the retained rows only (the fixed split),
    so a "fixed" figure over an audited file would otherwise include rows the audit removed, with
    their unrepaired answers."""

    __slots__ = ("path", "n", "first")

    def __init__(self, path: str | Path):
        self.path, self.n, self.first = path, 0, None

    def see(self, obj: dict[str, Any], ln: int) -> None:
        audit = obj.get("audit")
        if type(audit) is dict and audit.get("action") == "drop":
            self.n += 1
            if self.first is None:
                self.first = ln

    def check(self, include_dropped: bool | None = None) -> None:
        allowed = _INCLUDE_DROPPED.get() if include_dropped is None else include_dropped
        if self.n and not allowed:
            raise ScoreInputError(self.path, self.first, "audit.action",
                                  f"references hold {self.n} dropped rows; use the fixed split (kbvqa audit split "
                                  f"{self.path} --fixed FIXED --unfixed UNFIXED), or pass --include-dropped "
                                  "(kbvqa score|study --include-dropped ...) to read every row as it stands")


# --------------------------------------------------------------------------------------------------
# InfoSeek references


@dataclass(slots=True)
class InfoSeekRef:
    """One InfoSeek reference in the form all three scoring modes need.

    `aliases`: accepted surface forms (String/Time; for Numerical the raw `answer` strings, which the
    reward mode parses). `range`: the accepted numeric interval for official/strict scoring.
    """

    data_id: str
    qtype: str  # String | Numerical | Time
    split: str | None
    aliases: list[str]
    range: tuple[float, float] | None
    line: int
    source: str
    # InfoSeek-normalised aliases for official/strict string match; filled at load when keep_raw=False,
    # else lazily by the scorer (see `ref_norm_aliases`)
    norm_aliases: tuple[str, ...] = ()


_QTYPE_SEEN: dict[str, str] = {}


def _canon_qtype(value: Any, path: str | Path, ln: int, fld: str) -> str:
    q = _QTYPE_SEEN.get(value) if type(value) is str else None
    if q is not None:
        return q
    q = _QTYPES.get(str(value).strip().lower()) if isinstance(value, str) else None
    if q is not None:
        _QTYPE_SEEN[value] = q
    if q is None:
        raise ScoreInputError(path, ln, fld, f"unknown question type {value!r} (expected String, Numerical or Time)")
    return q


@gc_paused()
def load_qtypes(path: str | Path) -> dict[str, str]:
    """InfoSeek question-type JSONL: {"data_id", "question_type"} -> {id: String|Numerical|Time}."""
    out: dict[str, str] = {}
    for ln, obj in read_jsonl(path):
        did = obj.get("data_id")
        if type(did) is not str or not did:
            raise ScoreInputError(path, ln, "data_id", f"must be a non-empty string, got {did!r}")
        if "question_type" not in obj:
            raise ScoreInputError(path, ln, "question_type", "missing")
        out[did] = _canon_qtype(obj["question_type"], path, ln, "question_type")
    return out


def _num_range(obj: Any, path: str | Path, ln: int, fld: str) -> tuple[float, float]:
    """Official numeric answer_eval: [{"wikidata": v, "range": [lo, hi]}] or that dict alone."""
    item = obj[0] if isinstance(obj, list) and obj else obj
    if not isinstance(item, dict) or "range" not in item:
        raise ScoreInputError(path, ln, fld, f"numerical answer_eval needs a 'range', got {obj!r}")
    rng = item["range"]
    if not isinstance(rng, (list, tuple)) or len(rng) < 2:
        raise ScoreInputError(path, ln, fld, f"range must hold two numbers, got {rng!r}")
    try:
        # the official scorer goes through str() then float(); for JSON numbers that is the same value
        return float(str(rng[0])), float(str(rng[1]))
    except ValueError:
        raise ScoreInputError(path, ln, fld, f"range values must be numbers, got {rng!r}") from None


def _str_list(value: Any, path: str | Path, ln: int, fld: str) -> list[str]:
    if type(value) is list:
        try:
            "".join(value)  # one C pass: succeeds only when every item is a str (JSON makes no subclasses)
        except TypeError:
            pass
        else:
            return value
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        return [str(v) for v in value]
    raise ScoreInputError(path, ln, fld, f"expected a string or a list of strings, got {value!r}")


@gc_paused()
def load_infoseek_references(path: str | Path, qtypes: dict[str, str] | None = None,
                             qtypes_path: str | Path | None = None, *,
                             keep_raw: bool = True, include_dropped: bool | None = None) -> dict[str, InfoSeekRef]:
    """Read InfoSeek references in any of the accepted formats.

    * official JSONL (`answer_eval`, `data_split`; question type from the line or the qtypes file);
    * kbvqa JSONL (`Sample.dump()`: `id`, `answers` as strings or {text, value, range}, `answer_type`,
      `split`);
    * ARA CSV (`data_id`, `answer` with `|` alternatives, `question_type`; no split column).

    A reference whose question type cannot be found is an error (the official script crashed with a
    bare KeyError there).

    `keep_raw=False` drops the raw alias strings once normalised (official/strict scoring need only
    `norm_aliases`; the reward mode needs the raw ones): it keeps 300k-item runs under 400 MB.

    An audited kbvqa file with `drop` rows is refused (`DroppedRows`) unless `include_dropped` (or
    `including_dropped()` around the call).
    """
    own_qtypes = qtypes is None and qtypes_path is not None
    if own_qtypes:
        qtypes = load_qtypes(qtypes_path)  # type: ignore[arg-type]
    memo = NormMemo(infoseek_normalize)  # each distinct alias normalised once per load
    refs: dict[str, InfoSeekRef] = {}
    csv_file = str(path).lower().endswith(".csv")
    rows: Iterator[tuple[int, Any]] = read_csv(path) if csv_file else read_jsonl(path)
    dropped = DroppedRows(path)
    for ln, obj in rows:
        if csv_file:
            kind = "ara-csv"
        elif "answer_eval" in obj:
            kind = "official"
        elif "answers" in obj:
            kind = "kbvqa"
            dropped.see(obj, ln)
        else:
            raise ScoreInputError(path, ln, "answer_eval", "missing (expected InfoSeek answer_eval or kbvqa answers)")
        ref = _parse_ref(obj, kind, path, ln, qtypes)
        if own_qtypes:
            qtypes.pop(ref.data_id, None)  # type: ignore[union-attr]  # frees memory as we go
        if not keep_raw:
            if ref.qtype != "Numerical":  # official/strict judge numbers by the range alone
                ref_norm_aliases(ref, memo)
            ref.aliases = []
        add_reference(refs, ref, path)
    dropped.check(include_dropped)
    return refs


def _parse_ref(obj: dict[str, Any], kind: str, path: str | Path, ln: int,
               qtypes: dict[str, str] | None) -> InfoSeekRef:
    id_field = "id" if kind == "kbvqa" else "data_id"
    did = obj.get(id_field)
    if not isinstance(did, str) or not did:
        raise ScoreInputError(path, ln, id_field, f"must be a non-empty string, got {did!r}")
    # question type: the qtypes file wins (official behaviour), then the line itself
    qtype = qtypes.get(did) if qtypes is not None else None
    if qtype is None:
        qfield = "answer_type" if kind == "kbvqa" and obj.get("answer_type") else "question_type"
        raw_q = obj.get(qfield)
        if raw_q is None:
            where = " or in the qtypes file" if qtypes is not None else " (pass --qtypes)"
            raise ScoreInputError(path, ln, qfield, f"no question type for {did!r} on the line{where}")
        qtype = _canon_qtype(raw_q, path, ln, qfield)
    rng: tuple[float, float] | None = None
    if kind == "official":
        split = obj.get("data_split")
        ae = obj["answer_eval"]
        if qtype == "Numerical":
            rng = _num_range(ae, path, ln, "answer_eval")
            # the raw `answer` strings feed the reward mode; without them it uses the range itself
            aliases = _str_list(obj["answer"], path, ln, "answer") if "answer" in obj else []
        elif isinstance(ae, str):
            from kbvqa.data.infoseek import answer_eval_string

            raise ScoreInputError(path, ln, "answer_eval", answer_eval_string(ae))
        else:
            aliases = _str_list(ae, path, ln, "answer_eval")
    elif kind == "kbvqa":
        split = obj.get("split")
        answers = obj["answers"]
        aliases = kbvqa_alternatives(answers, path, ln)
        for a in answers:  # the first numeric range (or value) any alias carries
            if rng is not None or not isinstance(a, dict):
                continue
            if a.get("range") is not None:
                r = a["range"]
                try:
                    rng = (float(r[0]), float(r[1]))
                except (TypeError, ValueError, IndexError):
                    raise ScoreInputError(path, ln, "answers.range", f"bad range {r!r}") from None
            elif isinstance(a.get("value"), (int, float)):
                rng = (float(a["value"]), float(a["value"]))
        if qtype == "Numerical" and rng is None:
            rng = _range_from_texts(aliases, path, ln)
    else:  # ARA CSV
        split = obj.get("data_split") or obj.get("split") or None
        raw = obj.get("answer")
        if raw is None:
            raise ScoreInputError(path, ln, "answer", "missing column")
        aliases = [a for a in raw.split("|")]
        if qtype == "Numerical":
            rng = _range_from_texts(aliases, path, ln)
    if not aliases and rng is None:
        raise ScoreInputError(path, ln, "answer_eval" if kind == "official" else "answers", "no accepted answers")
    if split is not None:
        if not isinstance(split, str):
            raise ScoreInputError(path, ln, "data_split", f"must be a string, got {split!r}")
        split = sys.intern(split)  # a handful of distinct values over 300k lines
    return InfoSeekRef(did, qtype, split, aliases, rng, ln, kind)


def ref_norm_aliases(ref: InfoSeekRef, memo: dict[str, str] | None = None) -> tuple[str, ...]:
    """The reference's InfoSeek-normalised aliases, computed once and kept on the record (`memo`:
    a mapping alias -> normalised alias to look up first, as `NormMemo`)."""
    norm = ref.norm_aliases
    if not norm and ref.aliases:
        f = infoseek_normalize if memo is None else memo.__getitem__
        norm = ref.norm_aliases = tuple(dict.fromkeys(map(f, ref.aliases)))
    return norm


def _range_from_texts(aliases: list[str], path: str | Path, ln: int) -> tuple[float, float] | None:
    """A numeric reference written as text ("1,234", "6 - 7", "six to seven months"): parsed with the
    official parser, number words first turned into digits when the text has no digits; a scalar v
    becomes [v, v]; several aliases give the hull of what they parse to. None when no alias holds a
    number: the scorers then refuse that reference, naming its id, instead of the loader failing."""
    lo, hi = float("inf"), float("-inf")
    for a in aliases:
        v = parse_numeric(a, strict=True)
        if v is None:
            v = parse_numeric(number_words_to_digits(a), strict=True)
        if v is None:
            continue
        a_lo, a_hi = (v[0], v[1]) if isinstance(v, list) else (v, v)
        lo, hi = min(lo, a_lo), max(hi, a_hi)
    return (lo, hi) if lo <= hi else None
