"""Strict reply schemas: every LLM stage, sent an off-schema reply, an empty object, a wrong label and
an echo of its own prompt's reply template by a real OpenAI-compatible client (the local fake
server), ends `invalid` — never a label, never an answer — and its control (a good reply) ends ok.

Stages: the four audit stages (verify, derive, posedness, leakage), the answerer, the entity
identifier (IBA), the LLM section reranker, the augmentation type tagger, the agent's page extractor,
the SimpleQA judge and the agent failure categoriser."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fake_llm_server import FakeLLMServer, ok

from kbvqa.data.schema import Article, Sample, Section
from kbvqa.kb.base import InMemoryKB
from kbvqa.models.client import OpenAIChatClient
from kbvqa.models.replies import (
    Reply,
    is_placeholder,
    not_placeholder,
    placeholder_reason,
)
from kbvqa.runner import read_results
from kbvqa.runner.job import Job
from kbvqa.runner.stage import Context

URL = "https://en.wikipedia.org/wiki/McLaren_F1"
KB = InMemoryKB([Article(url=URL, title="McLaren F1", sections=[
    Section(index=0, title="McLaren F1", text="The McLaren F1 is a sports car designed by Gordon Murray."),
    Section(index=1, title="Ownership", text="The car is owned by the McLaren Group, based in Woking."),
    Section(index=2, title="Specifications", text="It weighs 1,301 kg. Production began in 1992."),
])])

# Which prompt a request carries (a phrase of its system or user text) -> the stage's key below.
PROMPTS = {
    "check benchmark annotations": "verify", "repair benchmark answers": "correct", "flag questions": "posedness",
    "last quality check": "final", "You answer knowledge-seeking questions": "answer",
    "Identify the specific entity": "identify", "You rank knowledge-base passages": "rerank",
    "You label the kind of entity": "tagger", "You read a web page for a researcher": "extract",
    "You grade one answer": "judge", "You analyse why a search agent": "failure",
}

GOOD = {
    "verify": {"label": "entailed", "rationale": "the section says the McLaren Group owns it"},
    "correct": {"status": "matched", "answer": None, "evidence_quote": "", "rationale": "stated"},
    "posedness": {"tags": [], "suggested_question": None, "rationale": "clear"},
    "final": {"leak": False, "answerable": True, "unique": True, "rationale": "fine"},
    "answer": {"answer": "McLaren Group"},
    "identify": {"entities": ["McLaren F1"]},
    "rerank": {"ranking": [2, 1]},
    "tagger": {"type": "vehicle", "reason": "a car"},
    "extract": {"rational": "the ownership section", "evidence": "owned by the McLaren Group",
                "summary": "The McLaren Group owns it."},
    "judge": {"label": "correct", "rationale": "same company"},
    "failure": {"category": "T2", "rationale": "the evidence was read but ignored"},
}

# Per stage: an off-schema reply, an empty object, a wrong label (or wrong type), and the prompt's
# reply template made into JSON (what small models echo).
BAD = {
    "verify": {"off_schema": {"verdict": "entailed"}, "empty": {}, "wrong_label": {"label": "supported"},
               "echo": {"label": "entailed", "rationale": "<one sentence, quoting the decisive words>"}},
    "correct": {"off_schema": {"answer": "McLaren Group"}, "empty": {},
                "wrong_label": {"status": "fixed", "answer": "McLaren Group"},
                "echo": {"status": "mismatched", "answer": "<string or null>", "evidence_quote": "<string>",
                         "rationale": "<one sentence>"}},
    "posedness": {"off_schema": {"problems": [], "rationale": "clear"}, "empty": {},
                  "wrong_label": {"tags": ["ambiguous_question"], "suggested_question": None},
                  "echo": {"tags": [], "suggested_question": "<string or null>", "rationale": "<one sentence>"}},
    "final": {"off_schema": {"ok": True}, "empty": {},
              "wrong_label": {"leak": "no", "answerable": "yes", "unique": "yes"},
              "echo": {"leak": False, "answerable": True, "unique": True, "rationale": "<one sentence>"}},
    "answer": {"off_schema": {"response": "McLaren Group"}, "empty": {}, "wrong_label": {"answer": ["McLaren"]},
               "echo": {"answer": "..."}},
    "identify": {"off_schema": {"entity": "McLaren F1"}, "empty": {}, "wrong_label": {"entities": "McLaren F1"},
                 "echo": {"entities": ["title", "..."]}},
    "rerank": {"off_schema": {"order": [1, 2]}, "empty": {}, "wrong_label": {"ranking": [7, 9]},
               "echo": {"ranking": ["passage numbers, most useful first"]}},
    "tagger": {"off_schema": {"label": "vehicle"}, "empty": {}, "wrong_label": {"type": "spaceship"},
               "echo": {"type": '<one label from the list, or "none">', "reason": "<short>"}},
    "extract": {"off_schema": {"summary": "The McLaren Group owns it."}, "empty": {},
                "wrong_label": {"rational": 3, "evidence": "owned by the McLaren Group", "summary": "x"},
                "echo": {"rational": "<which parts of the page matter and why>",
                         "evidence": "<the relevant passages, quoted>",
                         "summary": "<what they say about the goal, in two or three sentences>"}},
    "judge": {"off_schema": {"grade": "A"}, "empty": {}, "wrong_label": {"label": "CORRECT", "rationale": "x"},
              "echo": {"label": "correct", "rationale": "<one short sentence>"}},
    "failure": {"off_schema": {"cat": "T1"}, "empty": {}, "wrong_label": {"category": "T9", "rationale": "x"},
                "echo": {"category": "T1", "rationale": "<one sentence>"}},
}
KINDS = ("off_schema", "empty", "wrong_label", "echo")


def _server(replies: dict) -> FakeLLMServer:
    """A server answering each prompt with replies[stage key] (GOOD where not given); it records which
    prompts it saw in `srv.seen`."""
    srv = FakeLLMServer()
    srv.seen = []

    def handler(req):
        text = json.dumps(req["messages"])
        key = next(k for phrase, k in PROMPTS.items() if phrase in text)
        srv.seen.append(key)
        return ok(json.dumps(replies.get(key, GOOD[key])))

    srv.handler = handler
    return srv


def _client(srv: FakeLLMServer) -> OpenAIChatClient:
    return OpenAIChatClient(srv.base_url, "m", max_retries=0, timeout=5)


def _run(stages, ctx, records, tmp_path) -> list[dict]:
    out = tmp_path / "out.jsonl"
    Job(list(stages), ctx).run(records, out=out, resume=False, progress=False)
    return list(read_results(out))


def _sample(question="Who owns this car?", answers=("McLaren Group",), **kw) -> dict:
    return Sample(id="s1", question=question, answers=list(answers), entity={"url": URL, "title": "McLaren F1"},
                  **kw).dump()


def _cases(stage):
    return [pytest.param(stage, kind, id=f"{stage}-{kind}") for kind in (*KINDS, "control")]


def _replies(stage, kind, base=None):
    replies = dict(base or {})
    if kind != "control":
        replies[stage] = BAD[stage][kind]
    return replies


def _expect(line, kind, stage_name, srv, key, why="unusable"):
    assert key in srv.seen, f"the {key} prompt was never sent: the case tests nothing"
    if kind == "control":
        assert line["status"] == "ok", line["reason"]
        return False
    assert line["status"] == "invalid" and line["stage"] == stage_name, (line["status"], line["reason"])
    assert why in line["reason"]
    return True


# ------------------------------------------------------------------------------------------- audit

AUDIT = {  # stage key -> (audit stage, replies the other prompts get so that this one is asked, answer)
    "verify": ("verify", {}, "McLaren Group"),
    # a mismatched answer the rules cannot correct, so the repairer is asked (an unsupported one is removed)
    "correct": ("derive", {"verify": {"label": "contradicted", "rationale": "another owner"}}, "Ron Dennis"),
    "posedness": ("posedness", {}, "McLaren Group"),
    "final": ("leakage", {}, "McLaren Group"),
}


@pytest.mark.parametrize("stage,kind", [c for s in AUDIT for c in _cases(s)])
def test_audit_stages_end_invalid(stage, kind, tmp_path):
    from kbvqa.pipelines.audit import AuditConfig, audit_job
    from kbvqa.stages.audit.verify import VerifyConfig

    stage_name, base, answer = AUDIT[stage]
    with _server(_replies(stage, kind, base)) as srv:
        c = _client(srv)
        roles = {"verifier": c, "repairer": c, "checker": c}
        cfg = AuditConfig(verify=VerifyConfig(rules_settle=False))
        out = tmp_path / "audit.jsonl"
        audit_job(cfg, kb=KB, roles=roles).run([_sample(answers=[answer])], out=out, resume=False, progress=False)
        line = next(iter(read_results(out)))
    if _expect(line, kind, stage_name, srv, stage):
        assert "audit" not in line  # the record is written as it came in: no label of any stage


# ------------------------------------------------------------------------------------------ answer

@pytest.mark.parametrize("stage,kind", _cases("answer"))
def test_answerer_ends_invalid_never_an_answer(stage, kind, tmp_path):
    from kbvqa.stages.answer.generate import GenerateAnswer, GenerateConfig

    with _server(_replies(stage, kind)) as srv:
        ctx = Context(kb=KB, roles={"answerer": _client(srv)})
        line = _run([GenerateAnswer(GenerateConfig(send_image=False))], ctx, [_sample()], tmp_path)[0]
    if _expect(line, kind, "answer-llm", srv, stage):
        assert "answer" not in line and "producer" not in line
    else:
        assert line["answer"] == "McLaren Group"


@pytest.mark.parametrize("stage,kind", _cases("identify"))
def test_entity_identifier_ends_invalid(stage, kind, tmp_path):
    from kbvqa.stages.answer.identify import IdentifyConfig, IdentifyEntities

    with _server(_replies(stage, kind)) as srv:
        ctx = Context(kb=KB, roles={"vision": _client(srv)})
        line = _run([IdentifyEntities(IdentifyConfig(send_image=False))], ctx, [_sample()], tmp_path)[0]
    if _expect(line, kind, "identify-entity", srv, stage):
        assert "identify" not in line and "retrieved" not in line
    else:
        assert line["retrieved"][0] == URL and line["_usage"]["calls"] == 1


@pytest.mark.parametrize("stage,kind", _cases("rerank"))
def test_llm_reranker_ends_invalid(stage, kind, tmp_path):
    from kbvqa.models.rerank import LLMReranker
    from kbvqa.stages.answer.rerank import RerankConfig, SectionRerank

    with _server(_replies(stage, kind)) as srv:
        ctx = Context(kb=KB, roles={"checker": _client(srv)}, resources={"reranker": LLMReranker("checker")})
        line = _run([SectionRerank(RerankConfig())], ctx, [{**_sample(), "retrieved": [URL]}], tmp_path)[0]
    if _expect(line, kind, "rerank-sections", srv, stage):
        assert "sections" not in line
    else:
        assert [s["section_index"] for s in line["sections"][:2]] == [1, 0]


# ----------------------------------------------------------------------------------------- augment

@pytest.mark.parametrize("stage,kind", _cases("tagger"))
def test_type_tagger_ends_invalid_when_the_kb_cannot_decide(stage, kind, tmp_path):
    from kbvqa.stages.augment.types import TagEntityType

    with _server(_replies(stage, kind)) as srv:
        ctx = Context(kb=KB, roles={"tagger": _client(srv)})
        line = _run([TagEntityType()], ctx, [_sample(question="Who designed it?")], tmp_path)[0]
    if _expect(line, kind, "augment-entity-type", srv, stage, why="llm_invalid"):
        assert "entity_type" not in line
    else:
        assert line["entity_type"]["type"] == "vehicle" and line["entity_type"]["source"] == "llm"


# ------------------------------------------------------------------------------------------- agent

@pytest.mark.parametrize("stage,kind", _cases("extract"))
def test_page_extractor_refuses_unusable_extractions(stage, kind):
    from kbvqa.tools.extract import ExtractionFailed, extract

    with _server(_replies(stage, kind)) as srv:
        ctx = Context(kb=KB, roles={"extractor": _client(srv)})
        page = KB.get(URL).sections[1].text

        async def go():
            return await extract(page, URL, "who owns the car", ctx, "extractor")
        if kind == "control":
            ext, backend, usage = asyncio.run(go())
            assert ext.summary and backend == "openai:m" and usage.calls == 1
        else:
            with pytest.raises(ExtractionFailed, match="unusable|invalid") as exc:
                asyncio.run(go())
            assert exc.value.usage.calls == 1
    assert srv.seen == ["extract"] and ctx.usage.calls == 1  # counted in the run either way


# ----------------------------------------------------------------------------------- judges (evaluate)

def _strict(model) -> bool:
    return issubclass(model, Reply)


@pytest.mark.parametrize("stage,kind", _cases("judge"))
def test_judge_verdict_is_invalid_never_a_label(stage, kind, request):
    from kbvqa.evaluate.judge import JudgeReply, run_judge

    assert _strict(JudgeReply)  # refuses prompt echoes like every reply model
    with _server(_replies(stage, kind)) as srv:
        run = run_judge([{"id": "j1", "question": "Who owns this car?", "target": "McLaren Group",
                          "prediction": "McLaren"}], _client(srv))
    v = run.verdicts["j1"]
    assert srv.seen == ["judge"]
    if kind == "control":
        assert v.label == "correct"
    else:
        assert v.label == "invalid" and v.value is None and run.run.invalid == 1


@pytest.mark.parametrize("stage,kind", _cases("failure"))
def test_failure_categoriser_ends_invalid(stage, kind, request, tmp_path):
    from kbvqa.evaluate.agent import FailureCategory, FailureReply

    assert _strict(FailureReply)
    with _server(_replies(stage, kind)) as srv:
        ctx = Context(roles={"judge": _client(srv)})
        rec = {"id": "f1", "question": "Who owns this car?", "reference": "McLaren Group", "answer": "Ron Dennis",
               "trajectory": []}
        line = _run([FailureCategory()], ctx, [rec], tmp_path)[0]
    if _expect(line, kind, "agent-failure", srv, stage):
        assert "failure" not in line
    else:
        assert line["failure"]["category"] == "T2"


# ------------------------------------------------------------------------------ the shared check

@pytest.mark.parametrize("value", ["...", "…", " . . . ", '"..."', "<string>", "<one sentence>",
                                   "<string or null>", "<which parts of the page matter and why>"])
def test_placeholders(value):
    assert is_placeholder(value) and placeholder_reason(value)
    with pytest.raises(ValueError, match="not a reply"):
        not_placeholder(value, field="answer")


@pytest.mark.parametrize("value", ["", "Paris", "1,301 kg", "6 - 7", "Who? ...", "3 < 4", "<i>Dune</i>", "none"])
def test_real_values_are_not_placeholders(value):
    assert not is_placeholder(value)


def test_reply_base_checks_every_string_and_the_models_examples():
    from kbvqa.stages.answer.generate import ShortAnswer
    from kbvqa.stages.answer.identify import EntityGuess
    from kbvqa.stages.audit.llm import CorrectionReply, PosednessReply

    with pytest.raises(ValueError, match=r"entities\[1\]"):
        EntityGuess.model_validate({"entities": ["McLaren F1", "Title"]})
    assert EntityGuess.model_validate({"entities": []}).entities == []  # "cannot tell" is a valid reply
    with pytest.raises(ValueError):
        EntityGuess.model_validate({"entities": ["  "]})
    assert ShortAnswer.model_validate({"answer": 1992}).answer == "1992"  # a JSON number is its text
    for bad in ({"answer": True}, {"answer": " "}, {"answer": None}):
        with pytest.raises(ValueError):
            ShortAnswer.model_validate(bad)
    with pytest.raises(ValueError, match="mismatched"):
        CorrectionReply.model_validate({"status": "mismatched", "answer": None})
    with pytest.raises(ValueError):  # the key must be there, even when null
        PosednessReply.model_validate({"tags": []})
    assert PosednessReply.model_validate({"tags": [], "suggested_question": None}).tags == []


def test_one_placeholder_check_in_the_project():
    """No module keeps a private list of placeholders (tools/extract.py had one): a literal tuple,
    list or set holding two of "...", "…", "<string>" is a twin of kbvqa.models.replies."""
    import ast

    marks = {"...", "…", "<string>"}
    src = Path(__file__).resolve().parents[1] / "src" / "kbvqa"
    twins = []
    for path in src.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if sum(f'"{m}"' in text or f"'{m}'" in text for m in marks) < 2:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                found = {e.value for e in node.elts if isinstance(e, ast.Constant)} & marks
                if len(found) >= 2:
                    twins.append(f"{path.relative_to(src)}:{node.lineno}")
    assert twins == []


def test_a_reply_cut_at_max_tokens_is_invalid_and_says_so():
    from kbvqa.stages.answer.generate import ShortAnswer

    with FakeLLMServer() as srv:
        srv.push(ok('{"answer": "McLaren Gr', finish_reason="length"), ok('{"answer": "McLaren Group"}'))

        async def go():
            async with _client(srv) as c:
                return [await c.chat([{"role": "user", "content": "q"}], schema=ShortAnswer) for _ in range(2)]
        cut, whole = asyncio.run(go())
    assert cut.status == "invalid" and cut.truncated and "finish_reason=length" in cut.reason
    assert whole.status == "ok" and not whole.truncated
