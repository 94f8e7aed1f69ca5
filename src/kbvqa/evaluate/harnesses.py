"""Readers for the prediction files of the evaluation harnesses researchers run their models in, as
`kbvqa score convert-predictions --method lmms-eval | vlmevalkit | inspect` formats.

They register into `kbvqa.evaluate.methods.METHODS` (which imports this module lazily), so a
harness's file goes through the same id alignment, duplicate policy and report as a published
method's, and every kbvqa scorer and study reads the result unchanged. Field names are the
harnesses' own (see /work/shared/design/harness-formats.md for the files they come from):

* **lmms-eval** – the `--log_samples` file `<date>_samples_<task>.jsonl`. The prediction is
  `filtered_resps` (a list; its first element, nested lists descended), else the older `resps`
  (`[[raw]]`). The id is an id field of `doc` where the line keeps it (up to v0.3: `data_id`,
  `question_id`, `id`), else `doc_id` — a row number in the task's split — mapped through the
  references' row order (so `-r` is required then). Lines may come in any order (several
  processes). A `doc_id` outside the references, or not an integer, is kept as the id
  `doc_id=<n>`: unknown to the references, it is dropped, counted and named like any unknown id,
  and a warning lists those doc_ids; two lines with one doc_id are duplicates (an error unless
  `--duplicates` says otherwise).
* **vlmevalkit** – `{model}_{dataset}.xlsx` (read with openpyxl, when it is installed), `.tsv` or
  `.json` (a list of rows, or pandas' column orientation), columns `index`, `question`, `answer`,
  `prediction`. The id is an id column (`kbvqa_id`, which `kbvqa export vlmevalkit` writes and
  VLMEvalKit carries into its prediction file, or `data_id`, `id`, `question_id`) where there is one; else
  `index` itself when every index is a reference id; else `index` as a 0-based row number in the
  references' order (out of range: `index=<n>`, counted and named as above). An empty cell is no
  answer (null).
* **inspect** – an inspect_ai log, `.eval` (a zip archive: `samples/<id>_epoch_<n>.json` members,
  zstd-compressed by inspect 0.3.x, which needs the `zstandard` package; deflate and stored members
  need nothing) or `.json` (the whole log). The id is `sample.id`, the prediction
  `output.completion`; a sample that ended in `error` is a prediction of nothing with status
  `error` and the error's message, which scorers count as an error line, never an answer. The
  message list becomes the line's `trajectory` (one step per assistant turn and tool call, tool
  results as observations), with `meta.termination` (the stop reason), so `kbvqa view` shows the
  episode as it shows kbvqa's own agent runs. Several epochs give several lines per id: duplicates.
"""

from __future__ import annotations

import csv
import json
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from kbvqa.evaluate.io import ScoreInputError, read_jsonl
from kbvqa.evaluate.methods import ID_KEYS, METHODS, ConvertedPrediction, ReadOptions, _as_answer, _as_id

__all__ = ["HarnessPrediction", "read_lmms_eval", "read_vlmevalkit", "read_inspect", "inspect_trajectory"]

_NAMED = 20  # out-of-range ids named in a warning (the counts are complete)
VLMEVAL_ID_COLUMNS = ("kbvqa_id", *ID_KEYS)
_ZSTD = 93  # zip compression method number of Zstandard


@dataclass(slots=True)
class HarnessPrediction(ConvertedPrediction):
    """A converted line with what a harness log holds beyond the answer: a status (an errored sample
    is `error`, never an answer), the trajectory, and harness metadata kept under `meta`."""

    status: str = "ok"
    reason: str = ""
    trajectory: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = ConvertedPrediction.to_json(self)
        if self.trajectory or "termination" in self.meta:  # the Prediction fields the viewer's agent page reads
            out.update(sample_id=self.data_id, answer=self.prediction, trajectory=self.trajectory)
        if self.status != "ok":
            out.update(sample_id=self.data_id, status=self.status, reason=self.reason)
        if self.meta:
            out["meta"] = {**out.get("meta", {}), **self.meta}
        return out


def _row_id(row: Any, refs: list[str] | None, what: str, where: str, bad: list[str]) -> tuple[str, str]:
    """(id, rule) for a row number: the references' id at that row, else `<what>=<row>` (counted as
    unknown by the alignment; the row is noted in `bad`)."""
    if refs is None:
        raise ScoreInputError(where, None, what, f"{what} is a row number in the task's split: pass the references "
                                                 "(-r, the split in its order) to map it to sample ids")
    if isinstance(row, float) and row.is_integer():
        row = int(row)
    if isinstance(row, str) and row.strip().lstrip("-").isdigit():
        row = int(row)
    if isinstance(row, int) and not isinstance(row, bool) and 0 <= row < len(refs):
        return refs[row], f"id:{what}->references"
    bad.append(str(row))
    return f"{what}={row}", f"id:{what}-out-of-range"


def _out_of_range(warnings: list[str], method: str, what: str, bad: list[str], refs: list[str] | None) -> None:
    if bad:
        warnings.append(f"{method}: {len(bad)} {what} value(s) outside the {len(refs or [])} reference rows "
                        f"(dropped as unknown ids): {', '.join(bad[:_NAMED])}{' ...' if len(bad) > _NAMED else ''}")


# --------------------------------------------------------------------------------------------------
# lmms-eval


def _first_response(value: Any) -> tuple[bool, Any]:
    """The first element of a (possibly nested) response list; (False, None) for an empty list."""
    while isinstance(value, list):
        if not value:
            return False, None
        value = value[0]
    return True, value


def read_lmms_eval(path: Path, o: ReadOptions) -> Iterator[ConvertedPrediction]:
    if path.is_dir():
        raise ScoreInputError(path, None, None, "lmms-eval: give the *_samples_<task>.jsonl file, not a folder")
    bad: list[str] = []
    for ln, obj in read_jsonl(path):
        where = f"{path}:{ln}"
        key = "filtered_resps" if "filtered_resps" in obj else "resps" if "resps" in obj else None
        if key is None:
            raise ScoreInputError(path, ln, "filtered_resps", f"lmms-eval: no filtered_resps or resps "
                                                              f"(keys {sorted(obj)[:12]})")
        found, val = _first_response(obj[key])
        pred = _as_answer(val, where, key) if found else None
        rule = f"key:{key}[0]" if found else f"key:{key}:empty"
        doc = obj.get("doc") if isinstance(obj.get("doc"), dict) else {}
        id_key = next((k for k in ID_KEYS if doc.get(k) not in (None, "")), None)
        if id_key is not None:
            did, id_rule = _as_id(doc[id_key], where, f"doc.{id_key}"), f"id:doc.{id_key}"
        elif "doc_id" in obj:
            did, id_rule = _row_id(obj["doc_id"], o.gt_order, "doc_id", where, bad)
        else:
            raise ScoreInputError(path, ln, "doc_id", "lmms-eval: no doc_id and no id field in doc")
        yield HarnessPrediction(did, pred, "lmms-eval", f"{id_rule};{rule}", where)
    _out_of_range(o.warnings, "lmms-eval", "doc_id", bad, o.gt_order)


# --------------------------------------------------------------------------------------------------
# VLMEvalKit


def _xlsx_rows(path: Path) -> list[dict[str, Any]]:
    try:
        import openpyxl
    except ImportError:
        raise ScoreInputError(path, None, None, "vlmevalkit: reading .xlsx needs openpyxl (pip install openpyxl, or "
                                                "kbvqa[interop]); or run VLMEvalKit with PRED_FORMAT=tsv") from None
    wb = openpyxl.load_workbook(path, read_only=True, data_only=True)
    try:
        it = wb.worksheets[0].iter_rows(values_only=True)
        header = [str(h) if h is not None else "" for h in next(it, ())]
        return [dict(zip(header, r)) for r in it if any(v is not None for v in r)]
    finally:
        wb.close()


def _json_rows(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ScoreInputError(path, None, None, f"vlmevalkit: not valid JSON ({exc})") from None
    if isinstance(data, list) and all(isinstance(r, dict) for r in data):
        return data
    if isinstance(data, dict) and data and all(isinstance(v, dict) for v in data.values()):
        cols = list(data)  # pandas' default orientation: column -> {row label -> value}
        labels = list(data[cols[0]])
        return [{c: data[c].get(lab) for c in cols} for lab in labels]
    raise ScoreInputError(path, None, None, "vlmevalkit: expected a JSON list of rows or a column -> rows object")


def _table_rows(path: Path) -> list[dict[str, Any]]:
    suffix = path.suffix.lower()
    if suffix == ".xlsx":
        return _xlsx_rows(path)
    if suffix == ".json":
        return _json_rows(path)
    if suffix in (".tsv", ".csv"):
        with open(path, newline="", encoding="utf-8-sig") as fh:
            return list(csv.DictReader(fh, delimiter="\t" if suffix == ".tsv" else ","))
    raise ScoreInputError(path, None, None, f"vlmevalkit: expected .xlsx, .tsv or .json, got {suffix!r}")


def _cell_answer(v: Any, where: str) -> str | None:
    if v is None or (isinstance(v, float) and v != v):  # an empty cell (NaN in pandas' files)
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return _as_answer(v, where, "prediction")


def read_vlmevalkit(path: Path, o: ReadOptions) -> Iterator[ConvertedPrediction]:
    rows = _table_rows(path)
    if rows and "prediction" not in rows[0]:
        raise ScoreInputError(path, None, "prediction", f"vlmevalkit: no prediction column (columns "
                                                        f"{sorted(rows[0])[:12]})")
    id_col = next((k for k in VLMEVAL_ID_COLUMNS if rows and k in rows[0]), None)
    refs = o.gt_order
    known = set(refs or ())
    as_ids = id_col is None and refs is not None and all(str(_int(r.get("index"))) in known for r in rows)
    bad: list[str] = []
    for i, r in enumerate(rows):
        where = f"{path}[{i}]"
        if id_col is not None:
            did, rule = _as_id(_int(r[id_col]), where, id_col), f"id:{id_col}"
        elif "index" not in r:
            raise ScoreInputError(path, None, "index", "vlmevalkit: no index column and no id column")
        elif as_ids or refs is None:
            did, rule = _as_id(_int(r["index"]), where, "index"), "id:index"
        else:
            did, rule = _row_id(r["index"], refs, "index", where, bad)
        yield HarnessPrediction(did, _cell_answer(r.get("prediction"), where), "vlmevalkit", f"{rule};key:prediction",
                                where)
    if refs is None and id_col is None:
        o.warnings.append("vlmevalkit: no references given: each index is taken as the sample id as written")
    _out_of_range(o.warnings, "vlmevalkit", "index", bad, refs)


def _int(v: Any) -> Any:
    return int(v) if isinstance(v, float) and v.is_integer() else v


# --------------------------------------------------------------------------------------------------
# inspect_ai


def _zip_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path) -> bytes:
    """One member's bytes; zstd members (which Python 3.11's zipfile cannot open) through `zstandard`."""
    if info.compress_type != _ZSTD:
        return zf.read(info)
    try:
        import zstandard
    except ImportError:
        raise ScoreInputError(path, None, info.filename, "inspect: the .eval log's members are zstd-compressed and "
                                                         "the zstandard package is not installed (pip install "
                                                         "zstandard, or kbvqa[interop]); or write the log as .json "
                                                         "(inspect eval --log-format json)") from None
    fp = zf.fp
    assert fp is not None
    fp.seek(info.header_offset)
    head = fp.read(30)
    if head[:4] != b"PK\x03\x04":
        raise ScoreInputError(path, None, info.filename, "inspect: damaged .eval archive (no local header)")
    name_len, extra_len = struct.unpack("<HH", head[26:30])
    fp.seek(info.header_offset + 30 + name_len + extra_len)
    return zstandard.ZstdDecompressor().decompress(fp.read(info.compress_size), max_output_size=info.file_size)


def _inspect_samples(path: Path) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """(eval spec, [(where, sample)]) from a .eval archive or a .json log."""
    def parse(raw: bytes, where: str) -> Any:
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ScoreInputError(where, None, None, f"inspect: not valid JSON ({exc})") from None

    if path.suffix.lower() == ".json":
        log = parse(path.read_bytes(), str(path))
        if not isinstance(log, dict) or not isinstance(log.get("samples"), list):
            raise ScoreInputError(path, None, "samples", "inspect: a .json log must be an object with a samples list "
                                                         "(was the log written with --no-log-samples?)")
        return log.get("eval") or {}, [(f"{path}:samples[{i}]", s) for i, s in enumerate(log["samples"])]
    try:
        zf = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise ScoreInputError(path, None, None, "inspect: not a .eval archive (zip) – a .json log needs the .json "
                                                "suffix") from None
    with zf:
        infos = {i.filename: i for i in zf.infolist()}
        spec: dict[str, Any] = {}
        if "header.json" in infos:
            spec = parse(_zip_member(zf, infos["header.json"], path), f"{path}!header.json").get("eval") or {}
        names = sorted(n for n in infos if n.startswith("samples/") and n.endswith(".json"))
        samples = [(f"{path}!{n}", parse(_zip_member(zf, infos[n], path), f"{path}!{n}")) for n in names]
    return spec, samples


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a content list (other parts named)."""
    if isinstance(content, str):
        return content
    parts = []
    for c in content or []:
        if not isinstance(c, dict):
            continue
        kind = c.get("type")
        if kind == "text":
            parts.append(str(c.get("text", "")))
        elif kind == "reasoning":
            continue  # kept out of the answer text; the step keeps it as its thought
        else:
            parts.append(f"[{kind}]")
    return "\n".join(p for p in parts if p)


def _reasoning(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    return "\n".join(str(c.get("reasoning", "")) for c in content if isinstance(c, dict) and c.get("type") == "reasoning")


def inspect_trajectory(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """kbvqa trajectory steps (the viewer's agent page) from an inspect message list: the input
    messages as turn 0, each tool call of an assistant message one step whose observation is the
    tool's reply (status error when the tool failed), an assistant message without tool calls an
    answer step. Each step keeps `role` and inspect's message id."""
    steps: list[dict[str, Any]] = []
    by_call: dict[str, dict[str, Any]] = {}
    turn = 0
    for m in messages:
        role = m.get("role")
        text = _text(m.get("content"))
        if role in ("system", "user"):
            steps.append({"turn": 0, "role": role, "thought": text, "message_id": m.get("id")})
        elif role == "assistant":
            turn += 1
            thought = "\n".join(t for t in (_reasoning(m.get("content")), text) if t)
            calls = m.get("tool_calls") or []
            if not calls:
                steps.append({"turn": turn, "role": role, "answer": text, "message_id": m.get("id")})
            for j, c in enumerate(calls):
                step = {"turn": turn, "role": role, "thought": thought if j == 0 else "", "tool": c.get("function"),
                        "arguments": c.get("arguments"), "status": "not_run", "tool_call_id": c.get("id"),
                        "message_id": m.get("id")}
                by_call[str(c.get("id"))] = step
                steps.append(step)
        elif role == "tool":
            step = by_call.get(str(m.get("tool_call_id")))
            err = m.get("error")
            if step is None:  # a tool reply without its call: kept as its own step
                step = {"turn": turn, "role": role, "tool": m.get("function"), "message_id": m.get("id")}
                steps.append(step)
            step.update(observation=text, status="error" if err else "ok",
                        reason=(err.get("message") or err.get("type") or "") if isinstance(err, dict) else str(err or ""))
    return steps


def read_inspect(path: Path, o: ReadOptions) -> Iterator[ConvertedPrediction]:
    spec, samples = _inspect_samples(path)
    task, model = spec.get("task"), spec.get("model")
    n_error = 0
    for where, s in samples:
        if not isinstance(s, dict) or "id" not in s:
            raise ScoreInputError(where, None, "id", "inspect: a sample without an id")
        did = _as_id(s["id"], where, "id")
        out = s.get("output") or {}
        choice = (out.get("choices") or [{}])[0] if isinstance(out.get("choices"), list) else {}
        meta: dict[str, Any] = {"termination": choice.get("stop_reason") or ("error" if s.get("error") else "unknown"),
                                "question": _text(s.get("input")) if not isinstance(s.get("input"), list) else
                                next((_text(m.get("content")) for m in s["input"] if m.get("role") == "user"), ""),
                                "inspect": {k: v for k, v in (("task", task), ("model", model),
                                                              ("epoch", s.get("epoch")), ("target", s.get("target")),
                                                              ("scores", s.get("scores"))) if v is not None}}
        traj = inspect_trajectory(s.get("messages") or [])
        err = s.get("error")
        if err:
            n_error += 1
            msg = err.get("message") if isinstance(err, dict) else str(err)
            yield HarnessPrediction(did, None, "inspect", "sample.error", where, status="error",
                                    reason=f"inspect sample error: {msg}"[:500], trajectory=traj, meta=meta)
            continue
        if "completion" not in out:
            raise ScoreInputError(where, None, "output.completion", "inspect: sample has no output.completion")
        yield HarnessPrediction(did, _as_answer(out["completion"], where, "output.completion"), "inspect",
                                "id:sample.id;key:output.completion", where, trajectory=traj, meta=meta)
    if n_error:
        o.warnings.append(f"inspect: {n_error} sample(s) ended in an error: written with status error (no answer), "
                          "which the scorers count as error lines")


METHODS.add("lmms-eval", read_lmms_eval, help="lmms-eval --log_samples *_samples_<task>.jsonl: filtered_resps[0]; "
                                              "doc_id mapped through the references' row order (-r)")
METHODS.add("vlmevalkit", read_vlmevalkit, help="VLMEvalKit {model}_{dataset}.xlsx/.tsv/.json: prediction column; "
                                                "index mapped to the sample (id column, reference id or row)")
METHODS.add("inspect", read_inspect, help="inspect_ai log (.eval or .json): output.completion per sample.id, the "
                                          "messages kept as the trajectory; errored samples are error lines")
