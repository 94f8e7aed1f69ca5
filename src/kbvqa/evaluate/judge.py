"""SimpleQA-style short-answer judge: correct / incorrect / not_attempted, with honest failure states.

Differences from the original grader (field-anchors §4.2), all deliberate:

* the reply is JSON ``{"label": ..., "rationale": ...}`` checked by the strict parser
  (`kbvqa.models.jsonx.extract_json(strict=True)`); anything else is ``invalid`` (never a default);
* a model/API failure is not a label at all: `judge_answer` returns ``label=None`` and a rationale
  starting with ``"error:"``; `simpleqa_metrics` counts it under ``error``;
* temperature 0 by default (the original used 0.5, so grades were not reproducible);
* accuracy-given-attempted and F1 are returned, not only printed.

Over a file the judge runs as a runner job (`JudgeStage`, `run_judge`): one record
``{id, question, target, prediction}`` in, that record plus its ``verdict`` out, with resume, a
manifest and exactly one journal line per id. There a failed call is a runner ``error`` line and an
unusable reply an ``invalid`` line, so `--resume` sends exactly those again. A missing or empty
prediction is ``not_attempted`` without a call.

What is graded: by default the whole answer with image tags removed (`load_predictions(graded_text=
"full")`), as a SimpleQA-style grader sees a response; grading only the short answer is the explicit
`graded_text="short"`, and its scorer is named `simpleqa-judge[short-answer]` (`scorer_name`) so two
runs graded on different text are never compared as one metric.

Which rubric: a short gold gets SimpleQA's (`judge.simpleqa`: the answer must state the gold); a
paragraph gold — every reference of a NoteVQA-layout file, or a gold of more than PARAGRAPH_WORDS
words — gets kbvqa's `judge.paragraph`, which grades the answer's conclusion (the identification,
decision or recommendation asked for) against the reference's, allows missing secondary details and
calls any contradiction of a central claim incorrect (`gold_kind`, `JudgeConfig.rubric_for`). Each
journal line names its `rubric` (prompt id, gold kind, why); the scorer name says `[paragraph]` or
`[mixed-rubric]`; both prompts are registered, so a prompt file can replace either.

Three figures, never to be confused (the same names in every table and JSON):

* **accuracy** = correct / n, all responses: seed 001's "proportion of responses classified as
  correct" (35.7% = 90/252). n is every reference id: a missing or empty prediction is a response
  (not_attempted, no call); an invalid reply or a failed call is a response that is not correct;
* **accuracy_graded** = correct / n_graded, where n_graded counts the verdicts correct, incorrect and
  not_attempted: kbvqa's figure, with an ``invalid`` reply or an ``error`` (failed call) left out of
  the denominator and reported beside it as n_invalid / n_error. The two agree when both are 0;
* **SimpleQA's aggregates** (`simpleqa_metrics`: correct, incorrect, not_attempted, invalid, error as
  rates, accuracy_given_attempted, f1) are rates over all n items, invalid and error included, as
  the original reports them; tables label them "SimpleQA ... (over all n)".

`legacy_parse` reproduces the original parser (first ``A|B|C`` anywhere, default C) so old numbers can
be re-derived – including its pitfall: a reply "CORRECT" contains a C and becomes not_attempted.
"""

from __future__ import annotations

import contextlib
import json
import re
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, NamedTuple, Protocol, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kbvqa.data.jsonl import gc_paused
from kbvqa.data.notevqa import looks_like_notevqa
from kbvqa.data.schema import Provenance, Verdict
from kbvqa.evaluate import METRICS
from kbvqa.evaluate.io import DroppedRows, ScoreInputError, read_csv, read_jsonl
from kbvqa.models import prompts
from kbvqa.models.replies import Reply
from kbvqa.models.jsonx import extract_json
from kbvqa.models.result import rejected
from kbvqa.models.prompts.judge import PARAGRAPH, SIMPLEQA
from kbvqa.runner import Context, Invalid, RunSummary, Stage, StageConfig, read_results
from kbvqa.runner.job import Job
from kbvqa.stages import register_stage

#: judge requests (and records) in flight: the default of every judge job (kbvqa.pipelines.score_options)
JUDGE_CONCURRENCY = 16

__all__ = [
    "PROMPT_VERSION", "JudgeReply", "build_judge_messages", "judge_answer", "strict_parse",
    "legacy_parse", "simpleqa_metrics", "ChatClient", "JudgeCallError", "JudgeConfig", "JudgeStage",
    "judge_job", "run_judge", "JudgeRun", "verdict_of_line", "load_judge_references", "scorer_name",
    "GRADED", "FIGURES", "PARAGRAPH_PROMPT_VERSION", "PARAGRAPH_WORDS", "gold_kind", "rubric_counts", "rubric_of",
    "prompt_label", "read_judge_references", "JudgeReference",
]

PROMPT_VERSION = SIMPLEQA.id
#: kbvqa's rubric for paragraph golds (`judge.paragraph`): the answer's conclusion against the reference's.
PARAGRAPH_PROMPT_VERSION = PARAGRAPH.id
#: A gold answer of more words than this is a paragraph and is graded with `judge.paragraph` (kbvqa's
#: threshold): SimpleQA-, InfoSeek- and E-VQA-style golds are a few words, NoteVQA's short references
#: average 107.5 (seed 001 §3.2); 40 words is two or three sentences, past any short answer, and short
#: of every paragraph a reference writer would call an explanation.
PARAGRAPH_WORDS = 40
#: Which rubric a record's gold gets: auto (paragraph for a NoteVQA-layout reference file or a gold
#: over PARAGRAPH_WORDS words, else SimpleQA's), or one of them for every record.
GOLD_KINDS = ("auto", "short", "paragraph")
METRIC = "simpleqa-judge"
LABELS = ("correct", "incorrect", "not_attempted")
#: The labels that are grades (the accuracy's denominator); invalid and error are not.
GRADED = LABELS
#: What each judge figure is, written beside it in every summary (`definitions`).
FIGURES = {
    "accuracy": "correct / n, all responses (seed 001 §3.3: \"the proportion of responses classified as "
                "correct\"); n counts every reference id: a missing or empty prediction is a response graded "
                "not_attempted, an invalid reply or a failed judge call a response that is not correct",
    "accuracy_graded": "correct / n_graded; n_graded = correct + incorrect + not_attempted verdicts (kbvqa's "
                       "figure: invalid replies and failed calls are not grades, counted apart as n_invalid and "
                       "n_error); equal to accuracy when both are 0",
    "simpleqa": "correct, incorrect, not_attempted, invalid, error, accuracy_given_attempted, f1: SimpleQA's "
                "aggregates, rates over all n items (invalid and error included in the denominator)",
}


def scorer_name(graded_text: str = "full", rubric: str = "short") -> str:
    """The judge's scorer name for the text it graded and the rubric it graded with: `simpleqa-judge`
    (the whole answer, tags removed, SimpleQA's rubric), with `[short-answer]` for the short answer
    only and `[paragraph]` (`judge.paragraph` for every record) or `[mixed-rubric]` (both, by gold),
    so runs graded differently never share a column."""
    if graded_text not in ("full", "short"):
        raise ValueError(f"graded text must be 'full' or 'short', not {graded_text!r}")
    if rubric not in ("short", "paragraph", "mixed"):
        raise ValueError(f"rubric must be 'short', 'paragraph' or 'mixed', not {rubric!r}")
    tags = [t for t, on in (("short-answer", graded_text == "short"), ("paragraph", rubric == "paragraph"),
                            ("mixed-rubric", rubric == "mixed")) if on]
    return METRIC + (f"[{','.join(tags)}]" if tags else "")


def gold_kind(target: str, layout: str = "", *, words: int = PARAGRAPH_WORDS) -> tuple[str, str]:
    """("paragraph" | "short", why): a reference from a NoteVQA-layout file, or a gold of more than
    `words` words, is a paragraph."""
    if layout == "notevqa":
        return "paragraph", "NoteVQA layout: the short reference is a paragraph"
    n = len(target.split())
    if n > words:
        return "paragraph", f"gold of {n} words (more than {words})"
    return "short", f"gold of {n} words (at most {words})"


def rubric_counts(records: Iterable[Mapping[str, Any]], config: JudgeConfig | None = None) -> dict[str, int]:
    """How many records each judge prompt grades (prompt id -> n), before any call: for summaries and
    the manifest's run_config."""
    config = config or JudgeConfig()
    # at call time, as `_ask` does: a prompt file that replaces one has its own id
    counts: Counter[str] = Counter(prompts.get(config.rubric_for(r)[0]).id for r in records)
    return dict(sorted(counts.items()))


def rubric_of(counts: Mapping[str, int]) -> str:
    """short / paragraph / mixed: which rubric a run's records were graded with (for `scorer_name`)."""
    used = {("paragraph" if prompts.get(pid).name == PARAGRAPH.name else "short") for pid, n in counts.items() if n}
    return "mixed" if len(used) > 1 else (used.pop() if used else "short")


def prompt_label(counts: Mapping[str, int]) -> str:
    """The prompt(s) a run used, as one string: `judge.simpleqa@1`, or `judge.paragraph@1 (12) +
    judge.simpleqa@1 (3)` when the golds called for both."""
    used = [(pid, n) for pid, n in counts.items() if n]
    if len(used) <= 1:
        return used[0][0] if used else PROMPT_VERSION
    return " + ".join(f"{pid} ({n})" for pid, n in used)


#: Record fields a verdict depends on; a resumed journal must agree with the input on all of them.
JUDGED_FIELDS = ("question", "target", "prediction")


class JudgeReply(Reply):
    """The structured reply the judge must give."""

    model_config = ConfigDict(extra="forbid")

    label: Literal["correct", "incorrect", "not_attempted"]
    rationale: str = ""


class ChatClient(Protocol):
    """The model-role protocol (kbvqa.models.result.ModelClient); restated so tests can fake it."""

    provenance: Provenance

    async def chat(self, messages: list[dict], *, schema: Any = None, prompt_version: str = "",
                   **params: Any) -> Any: ...


class JudgeCallError(RuntimeError):
    """The judge call itself failed (HTTP error after retries, timeout, cassette miss): no verdict."""


def build_judge_messages(question: str, target: str, predicted: str, *,
                         prompt_version: str = PROMPT_VERSION) -> list[dict]:
    """The single user message for one grading call (versioned template)."""
    try:
        prompt = prompts.get(prompt_version)
    except KeyError:
        known = [p.id for p in prompts.all_prompts().values() if p.name.startswith("judge.")]
        raise ValueError(f"unknown judge prompt version {prompt_version!r}; known: {known}") from None
    return prompt.messages(question_raw=question, target_raw=target, predicted_raw=predicted)


def strict_parse(reply: str | None) -> JudgeReply | None:
    """The whole reply (optionally inside one ``` fence) must be the JSON object; else None.

    No regex fishing for a label inside prose: a reply that is not exactly the contract is invalid.
    """
    try:
        return JudgeReply.model_validate(extract_json(reply, strict=True))
    except (ValueError, ValidationError):
        return None


_LEGACY_RE = re.compile(r"(A|B|C)")
_LEGACY_MAP = {"A": "correct", "B": "incorrect", "C": "not_attempted"}


def legacy_parse(reply: str) -> str:
    """The original SimpleQA parser: first case-sensitive A, B or C anywhere; none -> not_attempted.

    Reproduced for re-deriving published numbers only. Pitfall: "CORRECT" matches the C and yields
    not_attempted; "INCORRECT" likewise.
    """
    m = _LEGACY_RE.search(reply or "")
    return _LEGACY_MAP[m.group(0)] if m else "not_attempted"


def _reply_from_data(data: Any) -> JudgeReply | None:
    if isinstance(data, JudgeReply):
        return data
    if isinstance(data, BaseModel):
        data = data.model_dump()
    try:
        return JudgeReply.model_validate(data)
    except ValidationError:
        return None


def parse_judge_result(res: Any) -> JudgeReply:
    """One call's result as a JudgeReply. Raises JudgeCallError when the call failed and `Invalid`
    when the model replied but not with the {label, rationale} object (never a default label)."""
    status = getattr(res, "status", "error")
    if status == "error":
        raise JudgeCallError(getattr(res, "reason", "") or "model call failed")
    parsed = None
    if status == "ok":
        parsed = _reply_from_data(res.data) if getattr(res, "data", None) is not None else None
        if parsed is None:
            parsed = strict_parse(getattr(res, "text", None))
    if parsed is None and status == "ok":  # the client took it; the judge refuses it: never served again
        raise rejected(res, "reply is not the JSON {label, rationale} object")
    if parsed is None:
        raise Invalid(getattr(res, "reason", "") or "reply is not the JSON {label, rationale} object")
    return parsed


async def _ask(client: ChatClient, question: str, target: str, predicted: str, *, prompt_version: str,
               temperature: float, **params: Any) -> tuple[Any, Provenance | None]:
    """One grading call; returns the result and the provenance stamped with the prompt version."""
    messages = build_judge_messages(question, target, predicted, prompt_version=prompt_version)
    pid = prompts.get(prompt_version).id  # at call time: a user's file that replaces the prompt has its own id
    res = await client.chat(messages, schema=JudgeReply, prompt_version=pid, temperature=temperature, **params)
    prov = getattr(res, "provenance", None) or getattr(client, "provenance", None)
    if prov is not None:
        prov = prov.model_copy(update={"prompt_version": pid})
    return res, prov


def _verdict(sample_id: str, reply: JudgeReply, prov: Provenance | None) -> Verdict:
    return Verdict(sample_id=sample_id, metric=METRIC, label=reply.label,
                   value=1.0 if reply.label == "correct" else 0.0, rationale=reply.rationale, judge=prov)


async def judge_answer(client: ChatClient, question: str, target: str, predicted: str, *,
                       prompt_version: str = PROMPT_VERSION, sample_id: str = "",
                       temperature: float = 0.0, **params: Any) -> Verdict:
    """Grade one answer. Label None + "error: ..." on a failed call; "invalid" on an unusable reply."""
    res, prov = await _ask(client, question, target, predicted, prompt_version=prompt_version,
                           temperature=temperature, **params)
    try:
        return _verdict(sample_id, parse_judge_result(res), prov)
    except JudgeCallError as exc:
        return Verdict(sample_id=sample_id, metric=METRIC, label=None, value=None, rationale=f"error: {exc}",
                       judge=prov)
    except Invalid as exc:
        return Verdict(sample_id=sample_id, metric=METRIC, label="invalid", value=None,
                       rationale=f"invalid: {exc}", judge=prov)


def simpleqa_metrics(labels: Iterable[str | None | Verdict]) -> dict[str, Any]:
    """SimpleQA aggregates over all n items (errors and invalid replies stay in the denominator),
    seed 001's accuracy over all responses, kbvqa's over graded verdicts, and the counts beside them
    (module docstring, FIGURES).

    correct/incorrect/not_attempted/invalid/error are rates over n; accuracy_given_attempted =
    correct / (correct + incorrect) (0 if nothing attempted); f1 = harmonic mean of correct and
    accuracy_given_attempted (0 if both are 0). accuracy = n_correct / n (every response; None when
    n is 0); accuracy_graded = n_correct / n_graded (None when nothing was graded).
    """
    counts: Counter[str] = Counter()
    n = 0
    for lab in labels:
        if isinstance(lab, Verdict):
            lab = lab.label
        if lab is None:
            lab = "error"
        if lab not in ("correct", "incorrect", "not_attempted", "invalid", "error"):
            raise ValueError(f"unknown judge label {lab!r}")
        counts[lab] += 1
        n += 1
    rate = {k: (counts[k] / n if n else 0.0) for k in ("correct", "incorrect", "not_attempted", "invalid", "error")}
    attempted = rate["correct"] + rate["incorrect"]
    aga = rate["correct"] / attempted if attempted > 0 else 0.0
    f1 = 2 * aga * rate["correct"] / (aga + rate["correct"]) if (aga + rate["correct"]) > 0 else 0.0
    n_graded = sum(counts[k] for k in GRADED)
    return {**rate, "accuracy_given_attempted": aga, "f1": f1, "n": n,
            **{f"n_{k}": counts[k] for k in ("correct", "incorrect", "not_attempted", "invalid", "error")},
            "n_graded": n_graded, "accuracy": counts["correct"] / n if n else None,
            "accuracy_graded": counts["correct"] / n_graded if n_graded else None}


# --------------------------------------------------------------------------------------------------
# references


class JudgeReference(NamedTuple):
    """One gold: the question, the target as the judge reads it, and the file's layout ("notevqa"
    for a NoteVQA-style line, else ""), which decides the rubric (`gold_kind`)."""

    question: str
    target: str
    layout: str = ""


def load_judge_references(path: str | Path) -> dict[str, tuple[str, str]]:
    """id -> (question, target) (`read_judge_references` without the layout)."""
    return {k: (r.question, r.target) for k, r in read_judge_references(path).items()}


@gc_paused()
def read_judge_references(path: str | Path) -> dict[str, JudgeReference]:
    """id -> JudgeReference from kbvqa JSONL (`id`, `question`, `answers`; NoteVQA-style `answer`) or a CSV with
    `data_id`/`id`, `problem`/`question` and `answer` (SimpleQA / ARA style)."""
    out: dict[str, JudgeReference] = {}
    if str(path).lower().endswith(".csv"):
        for ln, row in read_csv(path):
            did = row.get("data_id") or row.get("id")
            if not did:
                raise ScoreInputError(path, ln, "data_id", "missing")
            target = (row.get("answer") or "").strip()
            if not target:
                raise ScoreInputError(path, ln, "answer", f"empty gold answer for {did!r}")
            out[did] = JudgeReference(row.get("problem") or row.get("question") or "", target.replace("|", " / "))
    else:
        dropped = DroppedRows(path)  # an audited file's dropped rows are not references (seed 000's fixed split)
        for ln, obj in read_jsonl(path):
            did = obj.get("id", obj.get("data_id"))
            if not isinstance(did, str) or not did:
                raise ScoreInputError(path, ln, "id", f"must be a non-empty string, got {did!r}")
            dropped.see(obj, ln)
            answers = obj.get("answers") or ([obj["answer"]] if isinstance(obj.get("answer"), str) else [])
            texts = [a if isinstance(a, str) else a.get("text", "") for a in answers if isinstance(a, (str, dict))]
            texts = [t for t in texts if t and t.strip()]
            if not texts:
                raise ScoreInputError(path, ln, "answers", f"no gold answer for {did!r}")
            target = texts[0] if len(texts) == 1 else "any one of: " + " | ".join(texts)
            out[did] = JudgeReference(obj.get("question") or "", target, "notevqa" if looks_like_notevqa(obj) else "")
        dropped.check()
    return out


# --------------------------------------------------------------------------------------------------
# the judge as a runner stage


class JudgeConfig(StageConfig):
    role: str = "judge"  # the model role that grades
    prompt_version: str = PROMPT_VERSION  # short golds
    paragraph_prompt_version: str = PARAGRAPH_PROMPT_VERSION  # paragraph golds (`gold_kind`)
    gold: Literal["auto", "short", "paragraph"] = "auto"  # GOLD_KINDS: by gold, or one rubric for all
    paragraph_words: int = Field(PARAGRAPH_WORDS, ge=1)
    temperature: float = 0.0

    def rubric_for(self, record: Mapping[str, Any]) -> tuple[str, str, str]:
        """(prompt version, "short" | "paragraph", why) for one record: its target and `gold_layout`."""
        if self.gold == "auto":
            kind, why = gold_kind(str(record.get("target") or ""), str(record.get("gold_layout") or ""),
                                  words=self.paragraph_words)
        else:
            kind, why = self.gold, f"gold = {self.gold!r} (set for every record)"
        return (self.paragraph_prompt_version if kind == "paragraph" else self.prompt_version), kind, why


@METRICS.register("simpleqa-judge", family="judge",
                  help="SimpleQA-style LLM grading: correct / incorrect / not_attempted (invalid and error counted)")
@register_stage
class JudgeStage(Stage):
    """Grade one {id, question, target, prediction} record with the `judge` role; adds `verdict`."""

    name = "simpleqa-judge"
    version = "2"  # 2: a rubric per gold (judge.paragraph for paragraph golds), `rubric` on each line
    config_model = JudgeConfig
    prompts = (SIMPLEQA, PARAGRAPH)

    def prompt_versions(self) -> dict[str, str]:
        """Every prompt this configuration may send (short and paragraph golds)."""
        wanted = {"short": [self.config.prompt_version], "paragraph": [self.config.paragraph_prompt_version],
                  "auto": [self.config.prompt_version, self.config.paragraph_prompt_version]}[self.config.gold]
        return {p.id: p.sha256 for p in map(prompts.get, wanted)}

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        rid = record["id"]
        for f in ("question", "target"):
            if not isinstance(record.get(f), str):
                raise ValueError(f"record {rid!r}: field {f!r} must be a string, got {record.get(f)!r}")
        pred = record.get("prediction")
        if pred is not None and not isinstance(pred, str):
            raise ValueError(f"record {rid!r}: field 'prediction' must be a string or null, got {pred!r}")
        version, kind, why = self.config.rubric_for(record)
        rubric = {"prompt": prompts.get(version).id, "gold": kind, "why": why}
        if not pred:  # no answer is not attempted by definition: no call
            v = Verdict(sample_id=rid, metric=METRIC, label="not_attempted", value=0.0, rationale="no answer")
        else:
            client = ctx.role(self.config.role)
            res, prov = await _ask(client, record["question"], record["target"], pred,
                                   prompt_version=version, temperature=self.config.temperature)
            ctx.add_usage(getattr(res, "usage", None))
            v = _verdict(rid, parse_judge_result(res), prov)
        return {**record, "rubric": rubric, "verdict": v.model_dump(mode="json", exclude_none=True)}


def judge_job(client: ChatClient, config: JudgeConfig | None = None) -> Job:
    """The judge job: one JudgeStage with `client` in the role it reads."""
    config = config or JudgeConfig()
    return Job([JudgeStage(config)], Context(roles={config.role: client}), description="simpleqa judge")


def verdict_of_line(line: dict[str, Any]) -> Verdict:
    """The Verdict a journal line stands for: ok lines carry it; an `error` line is label None
    ("error: reason") and an `invalid` line the label "invalid", as `judge_answer` returns them."""
    status = line.get("status")
    if status == "ok":
        return Verdict.model_validate(line["verdict"])
    reason = line.get("reason") or status
    if status == "invalid":
        return Verdict(sample_id=line["id"], metric=METRIC, label="invalid", rationale=f"invalid: {reason}")
    return Verdict(sample_id=line["id"], metric=METRIC, label=None, rationale=f"error: {reason}")


@dataclass
class JudgeRun:
    """A finished judge job: one Verdict per input id (input order), read back from the journal."""

    verdicts: dict[str, Verdict]
    run: RunSummary
    out: Path | None  # None when the journal was temporary

    def run_info(self) -> dict[str, Any]:
        """This run's counts and files, for a summary: skipped = judged by an earlier run."""
        r = self.run
        return {"ok": r.ok, "error": r.error, "invalid": r.invalid, "skipped": r.skipped, "calls": r.usage.calls,
                **({"out": str(self.out), "manifest": str(r.manifest)} if self.out is not None else {})}


def _check_resumable(out: Path, records: Sequence[dict[str, Any]]) -> None:
    """A verdict in the journal is reused only for the same question, target and prediction; a
    journal written for other inputs is refused (naming file, line, id and field), not reused."""
    if not out.is_file():
        return
    done: dict[str, tuple[int, dict[str, Any]]] = {}  # id -> (line, judged fields) of its last ok line
    with open(out, "rb") as fh:
        for ln, raw in enumerate(fh, 1):
            try:
                obj = json.loads(raw)
            except ValueError:  # a line cut off by a crash: the runner repairs it (and refuses real corruption)
                continue
            if not (isinstance(obj, dict) and isinstance(obj.get("id"), str)):
                continue
            if obj.get("status") == "ok":
                done[obj["id"]] = (ln, {f: obj.get(f) for f in JUDGED_FIELDS})
            else:  # the last line wins: an id that failed since is judged again anyway
                done.pop(obj["id"], None)
    for rec in records:
        if rec["id"] not in done:
            continue
        ln, judged = done[rec["id"]]
        for f in JUDGED_FIELDS:
            if judged[f] != rec.get(f):
                raise ScoreInputError(out, ln, f, f"id {rec['id']!r} was judged for {judged[f]!r} but the input now "
                                                  f"has {rec.get(f)!r}; run with --no-resume (the old journal is "
                                                  "moved aside) or choose another --out")


def run_judge(records: Sequence[dict[str, Any]], client: ChatClient, *, out: str | Path | None = None,
              resume: bool = True, concurrency: int = JUDGE_CONCURRENCY, progress: bool = False,
              config: JudgeConfig | None = None, run_config: dict[str, Any] | None = None) -> JudgeRun:
    """Judge every record through the runner and read the verdicts back from the journal.

    `records` are {id, question, target, prediction} (prediction None or "" = not attempted, no
    call; any other field is kept on the line). `out` is the journal (its manifest goes beside it);
    None runs in a temporary directory (in-memory use: no resume). `resume=True` keeps the verdicts
    of ids already ok and sends error/invalid ones again. The client is closed at the end."""
    with contextlib.ExitStack() as stack:
        journal = Path(out) if out is not None else \
            Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="kbvqa-judge-"))) / "judge.jsonl"
        if out is not None and resume:
            _check_resumable(journal, records)
        summary = judge_job(client, config).run(records, out=journal, resume=resume and out is not None,
                                                concurrency=concurrency, progress=progress, run_config=run_config)
        wanted = {r["id"] for r in records}
        lines = {line["id"]: line for line in read_results(journal) if line["id"] in wanted}
    lost = [r["id"] for r in records if r["id"] not in lines]
    if lost:  # the runner writes every record it pulls; this would be a runner bug
        raise RuntimeError(f"{journal}: no journal line for {len(lost)} ids, e.g. {lost[:5]}")
    return JudgeRun({r["id"]: verdict_of_line(lines[r["id"]]) for r in records}, summary,
                    journal if out is not None else None)
