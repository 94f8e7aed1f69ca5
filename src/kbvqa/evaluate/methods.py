"""Adapters from published methods' output files to kbvqa prediction lines.

Every adapter yields `ConvertedPrediction(data_id, prediction, method, parse_rule)`; `parse_rule`
says how the answer was found (which key, which CoMEM extraction rule, where the id came from), so a
surprising score can be traced back to the parsing. `align()` then checks the ids against the
references: duplicates are an error unless a policy (`last` / `first`) is chosen explicitly, and
missing and unknown ids are counted and listed in an `AlignmentReport`. Nothing is resolved silently.

Accepted inputs (ara-protocol §3 "Parsing predictions"; the shapes are those of the authors'
release, VAN-QIAN/ECCV26-ARA outputs/generated_methods/):

* **iba** – JSONL ``{data_id, prediction}`` (``sample_answers.jsonl``). With ``dataset="evqa"`` the
  answer is the first present of ``prediction``, ``answer``, ``final_answer``, ``raw_response``,
  ``answers`` (a list: its first element). The IBA ``evqa_answer.log`` regex fallback is not
  implemented.
* **echosight** – JSONL ``{data_id, prediction}``, or the reranker file as released
  (``sample_reranker_k3.json``: one JSON object, data_id -> {retrieved_entries, reranked_entries,
  reranked_sections, ...}). That file holds retrieval only: its lines get a null prediction with
  ``parse_rule="echosight-reranker:no-answer"`` and a warning, and keep their retrieval stages.
* **reflectiva** – a JSON file, or a directory whose ``*.json`` files (sorted by name; the InfoSeek
  layout) are read in turn. Each file is a JSON list of objects, or an object mapping id -> answer.
  In an object the id is the first present of ``data_id``, ``question_id``, ``id`` and the answer the
  first present of ``prediction``, ``answer``, ``output``, ``generated_answer``, ``response``.
* **wikiprf** – ``*_generation_details.jsonl`` (a file or a directory holding them): one object per
  line, id and answer keys as for ReflectiVA (plus ``final_answer``). Legacy JSON
  ``{"data_id": [...], "results": [...]}``: ids zipped with results when both are present and of the
  same length; otherwise ids come from a ``*_raw_outputs.jsonl`` file (given, or the single one next
  to the input); the original code's last resort, **GT row order** (the i-th result belongs to the
  i-th reference row), runs only with ``allow_gt_order=True`` and marks every line
  ``parse_rule="id:gt-row-order"`` plus a warning. The released legacy file (``*_topk3.json_0.json``)
  is a JSON object followed by ``Total Time:`` / recall summary lines; as the authors' loader does,
  the first JSON object is decoded and the rest ignored (``parse_rule`` starts ``doc:first-object``,
  and a warning says how many characters were left).
* **comem** – JSONL with an id key as above and the generated text under ``prediction``, ``output``,
  ``response``, ``raw_output``, ``generated_text`` or ``answer``. kbvqa's extraction (``rules="kbvqa"``,
  the default): the content of the last ``\\boxed{...}``, else of the last ``<answer>...</answer>``,
  else the first line after the last "final answer:", else the stripped raw text (`parse_rule` boxed /
  answer-tag / final-answer / raw). The authors' (``rules="authors"``, `extract_comem_authors`): the
  last ``\\boxed`` only, else the *first* answer tag, else *everything* after the *first* "final
  answer:", a ``\\boxed`` inside either winning (`parse_rule` authors:boxed / ...). Under kbvqa's rules
  a warning counts the answers the authors' extraction would read differently.

Retrieval stages: every reader keeps the stages a method's own fields hold (`method_stages`):
EchoSight ``retrieved_entries`` (initial) and ``reranked_entries`` (post); IBA ``candidate_urls``
(initial), ``reranked_urls`` (reranked) and ``selected_url`` (post, the entity the answer read);
Wiki-PRF ``retrieved_urls.{initial, caption, grounding, flip, aggregate_initial_plus_tools}`` under
those names, the aggregate also as post (the evidence pool the answer read), with the authors'
``hits.<stage>.top1/top3`` flags kept beside them. A converted line carries them as
``meta.retrieval`` (kbvqa's trail shape), so `kbvqa study grounded` and `kbvqa score retrieval` read
converted files as they read kbvqa's own runs.
* **generic** – JSONL with configurable ``id_key`` / ``answer_key`` (dotted paths such as
  ``output.answer`` reach into nested objects) and an optional ``extract="comem"``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping, get_args

from kbvqa.data.jsonl import write_jsonl
from kbvqa.evaluate.io import ScoreInputError, read_csv, read_jsonl
from kbvqa.registry import Registry

__all__ = [
    "METHODS", "DATASETS", "DUPLICATE_POLICIES", "RULES", "ReadOptions", "method_stages", "stage_fields",
    "read_records", "extract_comem_authors", "ConvertedPrediction", "AlignmentReport",
    "ConversionResult", "DuplicateIdError", "extract_comem", "reference_ids", "align", "convert", "write_predictions",
]

DuplicatePolicy = Literal["error", "last", "first"]
DUPLICATE_POLICIES: tuple[str, ...] = get_args(DuplicatePolicy)
#: Whose parsing rules a reader follows where kbvqa's and the authors' scoring scripts differ.
RULES = ("kbvqa", "authors")
DATASETS = ("infoseek", "evqa")  # which benchmark the outputs answer (IBA reads more keys for evqa)

ID_KEYS = ("data_id", "question_id", "id")
ANSWER_KEYS = ("prediction", "answer", "output", "generated_answer", "response")
IBA_EVQA_KEYS = ("prediction", "answer", "final_answer", "raw_response", "answers")
WIKIPRF_KEYS = ("prediction", "answer", "final_answer", "output", "generated_answer", "response")
COMEM_TEXT_KEYS = ("prediction", "output", "response", "raw_output", "generated_text", "answer")
_LIST_SHOWN = 20  # ids listed in a report; the counts are always complete


class DuplicateIdError(ValueError):
    """Several predictions share an id and no duplicate policy was chosen."""


@dataclass(slots=True)
class ConvertedPrediction:
    data_id: str
    prediction: str | None
    method: str
    parse_rule: str
    source: str = ""  # file:line (or file[index]) the line came from
    retrieval: dict[str, dict[str, Any]] | None = None  # stage -> {retrieved, from[, hits]}: `method_stages`

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"data_id": self.data_id, "prediction": self.prediction, "method": self.method,
                               "parse_rule": self.parse_rule}
        if self.retrieval:
            out["meta"] = {"retrieval": self.retrieval}
        return out


@dataclass
class AlignmentReport:
    """How the converted ids line up with the reference ids."""

    n_input: int = 0
    n_output: int = 0
    n_references: int | None = None
    duplicate_policy: str = "error"
    duplicates: dict[str, int] = field(default_factory=dict)  # id -> number of lines
    n_missing: int = 0
    missing_ids: list[str] = field(default_factory=list)  # first few
    n_unknown: int = 0
    unknown_ids: list[str] = field(default_factory=list)  # first few; dropped from the output
    n_null_predictions: int = 0

    @property
    def n_duplicate_lines(self) -> int:
        return sum(c - 1 for c in self.duplicates.values())

    @property
    def clean(self) -> bool:
        return not self.duplicates and not self.n_missing and not self.n_unknown

    def to_json(self) -> dict[str, Any]:
        return {"n_input": self.n_input, "n_output": self.n_output, "n_references": self.n_references,
                "duplicate_policy": self.duplicate_policy, "n_duplicate_ids": len(self.duplicates),
                "n_duplicate_lines": self.n_duplicate_lines,
                "duplicate_ids": sorted(self.duplicates)[:_LIST_SHOWN],
                "n_missing": self.n_missing, "missing_ids": self.missing_ids,
                "n_unknown": self.n_unknown, "unknown_ids": self.unknown_ids,
                "n_null_predictions": self.n_null_predictions, "clean": self.clean}


@dataclass
class ConversionResult:
    method: str
    predictions: list[ConvertedPrediction]
    alignment: AlignmentReport
    parse_rules: dict[str, int]
    warnings: list[str] = field(default_factory=list)
    rules: str = "kbvqa"  # whose parsing rules were applied where kbvqa's and the authors' differ

    def summary(self) -> dict[str, Any]:
        return {"method": self.method, "rules": self.rules, "parse_rules": self.parse_rules,
                "n_with_retrieval": sum(1 for p in self.predictions if p.retrieval),
                "alignment": self.alignment.to_json(), "warnings": self.warnings}


# --------------------------------------------------------------------------------------------------
# helpers


def _as_id(value: Any, where: str, key: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value.strip():
        raise ScoreInputError(where, None, key, f"id must be a non-empty string, got {value!r}")
    return value


def _as_answer(value: Any, where: str, key: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise ScoreInputError(where, None, key, f"answer must be a string, number or null, got {type(value).__name__}")


def _first_key(obj: dict[str, Any], keys: Iterable[str]) -> str | None:
    for k in keys:
        if k in obj:
            return k
    return None


def _dig(obj: Any, dotted: str) -> tuple[bool, Any]:
    cur = obj
    for part in dotted.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return False, None
    return True, cur


def _pick(obj: dict[str, Any], id_keys: Iterable[str], ans_keys: Iterable[str], where: str,
          method: str, *, rule_prefix: str = "key") -> tuple[str, str | None, str]:
    """(id, answer, parse_rule) from one object; loud error naming the keys it looked for."""
    ik = _first_key(obj, id_keys)
    if ik is None:
        raise ScoreInputError(where, None, "/".join(id_keys), f"{method}: no id key (looked for {list(id_keys)})")
    ak = _first_key(obj, ans_keys)
    if ak is None:
        raise ScoreInputError(where, None, "/".join(ans_keys),
                              f"{method}: no answer key (looked for {list(ans_keys)}; got keys {sorted(obj)[:12]})")
    val = obj[ak]
    rule = f"{rule_prefix}:{ak}"
    if isinstance(val, list):
        val = val[0] if val else None
        rule = f"{rule_prefix}:{ak}[0]"
    return _as_id(obj[ik], where, ik), _as_answer(val, where, ak), rule


# --------------------------------------------------------------------------------------------------
# CoMEM answer extraction

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_FINAL_ANSWER = re.compile(r"final answer\s*(?:is)?\s*[:：]", re.IGNORECASE)


def _last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...}, with nested braces balanced; None if there is none."""
    start = text.rfind("\\boxed{")
    while start != -1:
        i = start + len("\\boxed{")
        depth = 1
        j = i
        while j < len(text) and depth:
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
            j += 1
        if depth == 0:
            return text[i:j - 1]
        start = text.rfind("\\boxed{", 0, start)  # unbalanced: try the previous one
    return None


def extract_comem(text: str | None) -> tuple[str | None, str]:
    """CoMEM's answer extraction: (answer, rule) with rule in boxed / answer-tag / final-answer / raw."""
    if text is None:
        return None, "null"
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed.strip(), "boxed"
    tags = _ANSWER_TAG.findall(text)
    if tags:
        return tags[-1].strip(), "answer-tag"
    marks = list(_FINAL_ANSWER.finditer(text))
    if marks:
        rest = text[marks[-1].end():].strip()
        return rest.splitlines()[0].strip() if rest else "", "final-answer"
    return text.strip(), "raw"


def extract_comem_authors(text: str | None) -> tuple[str | None, str]:
    """The ARA scoring scripts' CoMEM extraction, for reproducing their numbers: the last
    ``\\boxed`` (unbalanced or empty: none), else the first ``<answer>`` tag, else everything after
    the first "final answer:" (a ``\\boxed`` inside either wins), else the stripped text. Rule names
    carry an ``authors:`` prefix."""
    if text is None:
        return None, "authors:null"
    text = text.strip()

    def last_boxed(t: str) -> str | None:
        at = t.rfind("\\boxed")
        brace = t.find("{", at) if at >= 0 else -1
        if brace < 0:
            return None
        depth = 0
        for i in range(brace, len(t)):
            depth += {"{": 1, "}": -1}.get(t[i], 0)
            if depth == 0:
                return t[brace + 1:i].strip()
        return None

    boxed = last_boxed(text)
    if boxed:
        return boxed, "authors:boxed"
    tag = re.search(r"<answer>\s*(.*?)\s*</answer>", text, re.IGNORECASE | re.DOTALL)
    if tag:
        inner = tag.group(1).strip()
        return last_boxed(inner) or inner, "authors:answer-tag"
    final = re.search(r"final answer\s*[:：]\s*(.+)$", text, re.IGNORECASE | re.DOTALL)
    if final:
        inner = final.group(1).strip()
        return last_boxed(inner) or inner, "authors:final-answer"
    return text, "authors:raw"


# --------------------------------------------------------------------------------------------------
# retrieval stages in the methods' own fields

#: (stage, dotted field, whose field): where each method writes what it retrieved. A stage may be
#: fed by several methods' fields; a record holds one method's. `post` is the final evidence the
#: answer was conditioned on (seed 000 Table 3's post-retrieval stage).
STAGE_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("initial", "retrieved_entries", "EchoSight"),
    ("post", "reranked_entries", "EchoSight"),
    ("initial", "candidate_urls", "IBA"),
    ("reranked", "reranked_urls", "IBA"),
    ("post", "selected_url", "IBA"),
    *((st, f"retrieved_urls.{st}", "Wiki-PRF") for st in ("initial", "caption", "grounding", "flip",
                                                            "aggregate_initial_plus_tools")),
    ("post", "retrieved_urls.aggregate_initial_plus_tools", "Wiki-PRF"),
)


#: Fields that hold an aggregated evidence pool rather than a ranking: the answer read all of it, so its
#: post-retrieval recall counts the whole pool (seed 000 §6: "the aggregated evidence pool contains the
#: correct target entity"), not its first entry.
POOL_FIELDS = frozenset({"retrieved_urls.aggregate_initial_plus_tools"})


def is_pool(stage_record: Mapping[str, Any]) -> bool:
    """Whether a stage record (`method_stages`, or a kbvqa trail entry) is an aggregated pool: marked
    `pool`, or read from one of POOL_FIELDS (files converted before the mark existed)."""
    return bool(stage_record.get("pool")) or stage_record.get("from") in POOL_FIELDS


def stage_fields(stage: str) -> list[str]:
    """The fields that hold `stage`, as '<method> <field>' (what a refusal names)."""
    return [f"{who} {f}" for st, f, who in STAGE_FIELDS if st == stage]


def method_stages(obj: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """stage -> {"retrieved": [urls], "from": field[, "hits": {"top1": bool, ...}]} from a method
    record's own fields (STAGE_FIELDS). A field that is present but null (IBA found no entity) is an
    empty stage, not a missing one; a field that is absent gives no stage. Wiki-PRF's `hits` flags
    (computed by its own code against its own gold url) ride along on the stage they belong to."""
    out: dict[str, dict[str, Any]] = {}
    for stage, dotted, _ in STAGE_FIELDS:
        if stage in out:
            continue
        found, val = _dig(obj, dotted)
        if not found:
            continue
        if val is None:
            urls: list[str] = []
        elif isinstance(val, str):
            urls = [val]
        elif isinstance(val, list) and all(isinstance(u, str) for u in val):
            urls = list(val)
        else:
            continue  # not a url list: not a stage
        rec: dict[str, Any] = {"retrieved": urls, "from": dotted}
        if dotted in POOL_FIELDS:
            rec["pool"] = True
        if dotted.startswith("retrieved_urls."):
            ok, hits = _dig(obj, "hits." + dotted.split(".", 1)[1])
            if ok and isinstance(hits, dict):
                rec["hits"] = {k: bool(v) for k, v in hits.items() if isinstance(v, (int, bool))}
        out[stage] = rec
    return out


def _first_json_value(path: Path) -> tuple[Any, str]:
    """(first JSON value of the file, what follows it stripped): the authors' loader reads the Wiki-PRF
    legacy file this way, since a `Total Time:` line follows the object."""
    text = path.read_text(encoding="utf-8")
    try:
        value, end = json.JSONDecoder().raw_decode(text.lstrip())
    except ValueError as exc:
        raise ScoreInputError(path, None, None, f"not valid JSON ({exc})") from None
    return value, text.lstrip()[end:].strip()


def read_records(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, record with a data_id) from a method's output as released: JSONL (`.jsonl`), or one
    JSON document: a list of records, or an object mapping data_id -> record (EchoSight's reranker
    file). A Wiki-PRF legacy results file ({data_id: [...], results: [...]}) holds answers only and
    is refused here, naming what it lacks; JSON lines under another suffix are read as JSONL. What the
    readers and `kbvqa study grounded` share."""
    path = Path(path)
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        yield from _jsonl_objects(path)
        return
    data, _ = _first_json_value(path)
    if isinstance(data, list):
        for i, obj in enumerate(data):
            if not isinstance(obj, dict):
                raise ScoreInputError(f"{path}[{i}]", None, None, f"expected an object, got {type(obj).__name__}")
            yield f"{path}[{i}]", obj
    elif isinstance(data, dict) and isinstance(data.get("results"), list):
        raise ScoreInputError(path, None, "retrieved_urls", "a Wiki-PRF legacy results file ({data_id, results}) "
                              "holds answers only, no retrieval stage; read the *_generation_details.jsonl or "
                              "*_recall_details.jsonl beside it")
    elif isinstance(data, dict) and any(k in data for k in (*ID_KEYS, "sample_id")):
        yield from _jsonl_objects(path)  # JSON lines under another suffix
    elif isinstance(data, dict) and data and all(isinstance(v, dict) for v in data.values()):
        for k, v in data.items():
            yield f"{path}[{k!r}]", {**v, "data_id": v.get("data_id", k)}
    else:
        raise ScoreInputError(path, None, None, "expected JSONL, a JSON list of records or an object mapping "
                                                "data_id -> record")


# --------------------------------------------------------------------------------------------------
# readers (each yields ConvertedPrediction in file order)


def _jsonl_objects(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    for ln, obj in read_jsonl(path):
        yield f"{path}:{ln}", obj


def _read_simple(path: Path, method: str, ans_keys: tuple[str, ...], id_keys: tuple[str, ...] = ("data_id",)
                 ) -> Iterator[ConvertedPrediction]:
    for where, obj in _jsonl_objects(path):
        did, ans, rule = _pick(obj, id_keys, ans_keys, where, method)
        yield ConvertedPrediction(did, ans, method, rule, where, method_stages(obj) or None)


def _read_echosight(path: Path, warnings: list[str]) -> Iterator[ConvertedPrediction]:
    """JSONL answers, or the released reranker file (data_id -> {retrieved_entries, reranked_entries,
    ...}), which has no answer: null predictions, said so, with the stages kept."""
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        yield from _read_simple(path, "echosight", ("prediction",))
        return
    n_none = 0
    for where, obj in read_records(path):
        ak = _first_key(obj, ANSWER_KEYS)
        stages = method_stages(obj) or None
        if ak is None:
            n_none += 1
            yield ConvertedPrediction(_as_id(obj["data_id"], where, "data_id"), None, "echosight",
                                      "echosight-reranker:no-answer", where, stages)
        else:
            yield ConvertedPrediction(_as_id(obj["data_id"], where, "data_id"), _as_answer(obj[ak], where, ak),
                                      "echosight", f"key:{ak}", where, stages)
    if n_none:
        warnings.append(f"echosight: {path} is a reranker file: {n_none} records hold retrieval stages "
                        "(reranked_entries) but no answer; their predictions are null. Use the file for "
                        "`kbvqa study grounded` / `score retrieval`; score accuracy on EchoSight's answers")


def _read_reflectiva(path: Path) -> Iterator[ConvertedPrediction]:
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        raise ScoreInputError(path, None, None, "reflectiva: directory holds no *.json files")
    for f in files:
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ScoreInputError(f, None, None, f"reflectiva: not valid JSON ({exc})") from None
        if isinstance(data, dict):  # {id: answer} or {id: {answer...}}
            for k, v in data.items():
                where = f"{f}[{k!r}]"
                if isinstance(v, dict):
                    ak = _first_key(v, ANSWER_KEYS)
                    if ak is None:
                        raise ScoreInputError(where, None, "prediction", f"reflectiva: no answer key in {sorted(v)[:12]}")
                    yield ConvertedPrediction(_as_id(k, where, "key"), _as_answer(v[ak], where, ak), "reflectiva",
                                              f"key:{ak}", where)
                else:
                    yield ConvertedPrediction(_as_id(k, where, "key"), _as_answer(v, where, "value"), "reflectiva",
                                              "mapping", where)
        elif isinstance(data, list):
            for i, obj in enumerate(data):
                where = f"{f}[{i}]"
                if not isinstance(obj, dict):
                    raise ScoreInputError(where, None, None, f"reflectiva: expected an object, got {type(obj).__name__}")
                did, ans, rule = _pick(obj, ID_KEYS, ANSWER_KEYS, where, "reflectiva")
                yield ConvertedPrediction(did, ans, "reflectiva", rule, where)
        else:
            raise ScoreInputError(f, None, None, f"reflectiva: expected a JSON list or object, got {type(data).__name__}")


def _result_answer(res: Any, where: str) -> tuple[str | None, str]:
    if isinstance(res, dict):
        ak = _first_key(res, WIKIPRF_KEYS)
        if ak is None:
            raise ScoreInputError(where, None, "results", f"wikiprf: no answer key in {sorted(res)[:12]}")
        return _as_answer(res[ak], where, ak), f"key:{ak}"
    return _as_answer(res, where, "results"), "results"


def _read_wikiprf(path: Path, *, raw_outputs: Path | None, allow_gt_order: bool,
                  gt_order: list[str] | None, warnings: list[str]) -> Iterator[ConvertedPrediction]:
    if path.is_dir():
        files = sorted(path.glob("*_generation_details.jsonl"))
        if not files:
            raise ScoreInputError(path, None, None, "wikiprf: directory holds no *_generation_details.jsonl")
        for f in files:
            yield from _read_simple(f, "wikiprf", WIKIPRF_KEYS, ID_KEYS)
        return
    if path.suffix == ".jsonl":
        yield from _read_simple(path, "wikiprf", WIKIPRF_KEYS, ID_KEYS)
        return
    # legacy {data_id: [...], results: [...]}, followed in the release by "Total Time:" and recall
    # summary lines: the first JSON object is the data (the authors' loader reads it the same way)
    data, rest = _first_json_value(path)
    doc = "doc:first-object;" if rest else ""
    if rest:
        first = rest.splitlines()[0][:60]
        warnings.append(f"wikiprf: {path}: read the first JSON object; {len(rest)} characters after it ignored "
                        f"(starting {first!r}), as the authors' loader does")
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise ScoreInputError(path, None, "results", "wikiprf legacy file must be an object with a 'results' list")
    results = data["results"]
    ids = data.get("data_id")
    src = "id:data_id[]"
    if not (isinstance(ids, list) and len(ids) == len(results)):
        why = "no data_id list" if not isinstance(ids, list) else \
            f"data_id has {len(ids)} entries for {len(results)} results"
        if raw_outputs is None:
            near = sorted(path.parent.glob("*_raw_outputs.jsonl"))
            if len(near) == 1:
                raw_outputs = near[0]
            elif len(near) > 1:
                warnings.append(f"wikiprf: {len(near)} *_raw_outputs.jsonl files next to {path}; pass one explicitly")
        ids = None
        if raw_outputs is not None:
            ids = [_as_id(obj[k], where, k) for where, obj in _jsonl_objects(raw_outputs)
                   for k in [_first_key(obj, ID_KEYS)] if k is not None]
            if len(ids) != len(results):
                warnings.append(f"wikiprf: {raw_outputs} has {len(ids)} ids for {len(results)} results; not used")
                ids = None
            else:
                src = "id:raw-outputs"
                warnings.append(f"wikiprf: {why}; ids taken from {raw_outputs} by position")
        if ids is None:
            if not allow_gt_order:
                raise ScoreInputError(path, None, "data_id",
                                      f"wikiprf legacy file: {why} and no usable *_raw_outputs.jsonl; the original "
                                      "code would fall back to reference row order – pass allow_gt_order "
                                      "(--allow-gt-order) with --references to do that explicitly")
            if gt_order is None:
                raise ScoreInputError(path, None, "data_id", "GT-row-order fallback needs the references")
            if len(gt_order) != len(results):
                raise ScoreInputError(path, None, "results", f"GT-row-order fallback: {len(results)} results but "
                                                             f"{len(gt_order)} reference rows")
            ids = gt_order
            src = "id:gt-row-order"
            warnings.append(f"wikiprf: {why}; ids assigned from reference ROW ORDER for all {len(results)} results "
                            "(explicitly allowed; unverifiable)")
    for i, (did, res) in enumerate(zip(ids, results)):
        where = f"{path}[{i}]"
        ans, rule = _result_answer(res, where)
        yield ConvertedPrediction(_as_id(did, where, "data_id"), ans, "wikiprf", f"{doc}{src};{rule}", where)


def _read_comem(path: Path, rules: str, warnings: list[str]) -> Iterator[ConvertedPrediction]:
    """kbvqa's or the authors' extraction; under kbvqa's, the answers the authors' would read
    differently are counted in a warning, so a gap to the paper's CoMEM numbers can be traced."""
    extract = extract_comem_authors if rules == "authors" else extract_comem
    differ: list[str] = []
    for where, obj in _jsonl_objects(path):
        did, text, _ = _pick(obj, ID_KEYS, COMEM_TEXT_KEYS, where, "comem")
        ans, rule = extract(text)
        if rules != "authors" and extract_comem_authors(text)[0] != (ans.strip() if ans is not None else None):
            differ.append(did)
        yield ConvertedPrediction(did, ans, "comem", rule, where)
    if differ:
        warnings.append(f"comem: {len(differ)} answers would be read differently by the authors' extraction "
                        f"(--rules authors), e.g. {differ[:5]}")


def _read_generic(path: Path, id_key: str, answer_key: str, extract: str | None) -> Iterator[ConvertedPrediction]:
    for where, obj in _jsonl_objects(path):
        ok_id, did = _dig(obj, id_key)
        if not ok_id:
            raise ScoreInputError(where, None, id_key, "generic: id key missing")
        ok_ans, ans = _dig(obj, answer_key)
        if not ok_ans:
            raise ScoreInputError(where, None, answer_key, "generic: answer key missing (use null for no answer)")
        ans = _as_answer(ans, where, answer_key)
        rule = f"key:{answer_key}"
        if extract == "comem":
            ans, r = extract_comem(ans)
            rule += f";{r}"
        elif extract is not None:
            raise ValueError(f"unknown extract rule {extract!r} (only 'comem')")
        yield ConvertedPrediction(_as_id(did, where, id_key), ans, "generic", rule, where)


# --------------------------------------------------------------------------------------------------
# the registry of output formats


@dataclass
class ReadOptions:
    """What a reader may need besides the path; readers append to `warnings`, never print."""

    dataset: str = "infoseek"
    id_key: str = "data_id"
    answer_key: str = "prediction"
    extract: str | None = None
    raw_outputs: Path | None = None
    allow_gt_order: bool = False
    gt_order: list[str] | None = None  # reference ids in row order (wikiprf's explicit last resort)
    rules: str = "kbvqa"  # RULES: whose parsing where kbvqa's and the authors' differ (CoMEM extraction)
    warnings: list[str] = field(default_factory=list)


#: Output format name -> reader(path, ReadOptions) -> ConvertedPrediction lines; the CLI's --method choices.
#: The harnesses' readers (lmms-eval, VLMEvalKit, inspect_ai) live in kbvqa.evaluate.harnesses, imported on first use.
METHODS: Registry[Callable[[Path, ReadOptions], Iterator[ConvertedPrediction]]] = Registry(
    "method", ("kbvqa.evaluate.harnesses",))


@METHODS.register("iba", help="IBA JSONL {data_id, prediction} (sample_answers.jsonl); evqa also reads answer / "
                              "final_answer / raw_response / answers; selected_url kept as the post stage")
def _iba(path: Path, o: ReadOptions) -> Iterator[ConvertedPrediction]:
    return _read_simple(path, "iba", IBA_EVQA_KEYS if o.dataset == "evqa" else ("prediction",))


@METHODS.register("echosight", help="EchoSight JSONL {data_id, prediction}, or the reranker JSON as released "
                                    "(data_id -> {reranked_entries, ...}: stages only, null predictions)")
def _echosight(path: Path, o: ReadOptions) -> Iterator[ConvertedPrediction]:
    return _read_echosight(path, o.warnings)


@METHODS.register("reflectiva", help="ReflectiVA JSON file or directory of *.json (a list of objects or id -> answer)")
def _reflectiva(path: Path, o: ReadOptions) -> Iterator[ConvertedPrediction]:
    return _read_reflectiva(path)


@METHODS.register("wikiprf", help="Wiki-PRF *_generation_details.jsonl (retrieved_urls kept), or the legacy "
                                  "{data_id, results} JSON (first object read, a trailing Total Time: ignored)")
def _wikiprf(path: Path, o: ReadOptions) -> Iterator[ConvertedPrediction]:
    return _read_wikiprf(path, raw_outputs=o.raw_outputs, allow_gt_order=o.allow_gt_order, gt_order=o.gt_order,
                         warnings=o.warnings)


@METHODS.register("comem", help="CoMEM generations: last \\boxed{}, <answer> tag or 'final answer:' extracted "
                                "(--rules authors: the ARA scripts' extraction)")
def _comem(path: Path, o: ReadOptions) -> Iterator[ConvertedPrediction]:
    return _read_comem(path, o.rules, o.warnings)


@METHODS.register("generic", help="any JSONL with --id-key / --answer-key (dotted paths), optional --extract comem")
def _generic(path: Path, o: ReadOptions) -> Iterator[ConvertedPrediction]:
    return _read_generic(path, o.id_key, o.answer_key, o.extract)


# --------------------------------------------------------------------------------------------------
# references and alignment


def reference_ids(path: str | Path) -> list[str]:
    """Reference ids in file order: CSV (`data_id` or `id` column) or JSONL (`data_id` or `id`).
    Duplicate reference ids are an error."""
    path = Path(path)
    out: list[str] = []
    seen: dict[str, int] = {}
    if path.suffix.lower() == ".csv":
        rows: Iterable[tuple[int, dict[str, Any]]] = read_csv(path)
    else:
        rows = read_jsonl(path)
    for ln, obj in rows:
        did = obj.get("data_id") or obj.get("id")
        if not did:
            raise ScoreInputError(path, ln, "data_id", "missing reference id (data_id or id)")
        did = str(did)
        if did in seen:
            raise ScoreInputError(path, ln, "data_id", f"duplicate reference id {did!r} (first on line {seen[did]})")
        seen[did] = ln
        out.append(did)
    return out


def _respell_variants(preds: list[ConvertedPrediction], ref_ids: list[str]) -> int:
    """Augmented predictions in the authors' id spelling (`x__method1__with_position`) take the
    references' (`x__intra`) when that is the reference id and theirs is not; returns how many."""
    from kbvqa.data.variants import split_variant

    known = set(ref_ids)
    n = 0
    for p in preds:
        if p.data_id in known:
            continue
        base, v = split_variant(p.data_id)
        if v is not None and f"{base}__{v}" in known:
            p.data_id = f"{base}__{v}"
            p.parse_rule += ";id:variant-respelled"
            n += 1
    return n


def align(preds: list[ConvertedPrediction], ref_ids: list[str] | None, *,
          duplicates: DuplicatePolicy = "error") -> tuple[list[ConvertedPrediction], AlignmentReport]:
    """One prediction per id. Duplicates: `error` (default) raises `DuplicateIdError` listing them;
    `last` / `first` keep one and report every duplicate id. With references: unknown ids are dropped
    and counted, missing ids counted (the scorers then count them as wrong)."""
    rep = AlignmentReport(n_input=len(preds), duplicate_policy=duplicates,
                          n_references=None if ref_ids is None else len(ref_ids))
    counts = Counter(p.data_id for p in preds)
    rep.duplicates = {k: c for k, c in counts.items() if c > 1}
    if rep.duplicates and duplicates == "error":
        shown = sorted(rep.duplicates)[:_LIST_SHOWN]
        raise DuplicateIdError(f"{len(rep.duplicates)} ids occur more than once ({rep.n_duplicate_lines} extra lines), "
                               f"e.g. {shown}; choose a policy: --duplicates last (ARA's behaviour) or first")
    kept: dict[str, ConvertedPrediction] = {}
    for p in preds:
        if duplicates == "first" and p.data_id in kept:
            continue
        kept[p.data_id] = p  # last wins; dict keeps first-insertion order
    out = list(kept.values())
    if ref_ids is not None:
        ref_set = set(ref_ids)
        unknown = [p.data_id for p in out if p.data_id not in ref_set]
        rep.n_unknown = len(unknown)
        rep.unknown_ids = unknown[:_LIST_SHOWN]
        out = [p for p in out if p.data_id in ref_set]
        missing = [d for d in ref_ids if d not in kept]
        rep.n_missing = len(missing)
        rep.missing_ids = missing[:_LIST_SHOWN]
    rep.n_output = len(out)
    rep.n_null_predictions = sum(1 for p in out if p.prediction is None)
    return out, rep


def convert(method: str, path: str | Path, *, references: str | Path | None = None, dataset: str = "infoseek",
            duplicates: DuplicatePolicy = "error", id_key: str = "data_id", answer_key: str = "prediction",
            extract: str | None = None, raw_outputs: str | Path | None = None,
            allow_gt_order: bool = False, rules: str = "kbvqa") -> ConversionResult:
    """Read one method's output file(s) and align them with the references (if given). `rules`:
    kbvqa's parsing or the authors' where the two differ (RULES; named in the summary)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r} (expected one of {', '.join(METHODS.names())})")
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {', '.join(DATASETS)}, got {dataset!r}")
    if rules not in RULES:
        raise ValueError(f"rules must be one of {', '.join(RULES)}, got {rules!r}")
    ref_ids = reference_ids(references) if references is not None else None
    opts = ReadOptions(dataset=dataset, id_key=id_key, answer_key=answer_key, extract=extract,
                       raw_outputs=Path(raw_outputs) if raw_outputs else None, allow_gt_order=allow_gt_order,
                       gt_order=ref_ids, rules=rules)
    warnings = opts.warnings
    preds = list(METHODS.get(method)(path, opts))
    if not preds:
        warnings.append(f"{method}: {path} holds no predictions")
    if ref_ids is not None:
        n = _respell_variants(preds, ref_ids)
        if n:
            warnings.append(f"{n} ids in the authors' variant spelling (__method1/__method2...) matched to the "
                            "references' __intra/__inter ids (parse_rule ';id:variant-respelled')")
    rule_counts = dict(Counter(p.parse_rule for p in preds).most_common())
    out, rep = align(preds, ref_ids, duplicates=duplicates)
    if rep.duplicates:
        warnings.append(f"{len(rep.duplicates)} duplicate ids resolved by explicit policy '{duplicates}'")
    return ConversionResult(method, out, rep, rule_counts, warnings, rules)


def write_predictions(path: str | Path, preds: Iterable[ConvertedPrediction]) -> int:
    """Write kbvqa prediction lines {data_id, prediction, method, parse_rule}; returns the count."""
    return write_jsonl(path, (p.to_json() for p in preds))
