"""Fault injection: the audit (two model verifiers, repairer, checker), the SimpleQA judge, the IBA
answer pipeline (vision, LLM rerank, answerer), the search agent (agent + page extractor) and the
IVR-12 rubric judge against a
local OpenAI-compatible server that injects ~20% seeded faults — 429, 500, replies slower than the
client's read timeout, malformed bodies, JSON cut off at max_tokens. Every run must show:

- 0 lost and 0 duplicated records: exactly one output line per input id;
- an invalid reply never counted as a label or an answer: every `ok` line equals the fault-free run's
  line for that id (a fault may cost a record, never change what it says);
- bounded retries: no call (one request body) is sent more than max_retries + 1 times;
- honest accounting: the manifest's usage.calls equals the requests the server received (and, for
  the answer pipeline, each prediction's usage.calls equals the requests made for its sample).

Kept small (a dozen records, 0.3 s read timeout, 10 ms backoff) so the file runs in seconds."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from fake_llm_server import FAULT_KINDS, FakeLLMServer, Faults, Reply, ok, server_error

from kbvqa.data.formats import read_samples
from kbvqa.data.schema import Article, Sample, Section
from kbvqa.kb.base import InMemoryKB
from kbvqa.kb.store import KBStore
from kbvqa.models.client import OpenAIChatClient
from kbvqa.models.image_encoders import HistogramEncoder
from kbvqa.pipelines.answer import build_answer_job
from kbvqa.pipelines.index import build_image_index

MAX_RETRIES = 3
FAULTY = Faults.spread(0.2, timeout_delay=0.6, retry_after=0.01, seed=7)
FAST = {"max_retries": MAX_RETRIES, "backoff_base": 0.01, "backoff_max": 0.02}
INJECTED: Counter = Counter()  # over the whole file: every fault kind must have been exercised


def _client(srv: FakeLLMServer, model: str, faulty: bool) -> OpenAIChatClient:
    # Under faults the read timeout is short so injected slow replies time out; clean runs get slack.
    return OpenAIChatClient(srv.base_url, model, timeout=0.3 if faulty else 10, concurrency=8, **FAST)


def _lines(out: Path) -> list[dict]:
    return [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines() if x.strip()]


def check_run(out: Path, ids: list[str], srv: FakeLLMServer, summary) -> list[dict]:
    """One line per id, bounded retries, usage equal to requests (the fourth invariant, ok lines
    equal to the fault-free run's, is each test's: what a line says differs per job)."""
    lines = _lines(out)
    assert Counter(x["id"] for x in lines) == Counter(ids), "a record was lost or written twice"
    assert summary.ok + summary.error + summary.invalid == len(ids) and summary.skipped == 0
    manifest = json.loads(Path(summary.manifest).read_text(encoding="utf-8"))
    assert manifest["usage"]["calls"] == summary.usage.calls == srv.count, \
        f"usage.calls {manifest['usage']['calls']} != {srv.count} requests received"
    per_call = Counter(json.dumps(r["json"], sort_keys=True) for r in srv.requests)
    assert max(per_call.values()) <= MAX_RETRIES + 1, "a call was sent more often than max_retries + 1"
    assert all(x["reason"] for x in lines if x["status"] != "ok")
    if srv.faults is not None:
        INJECTED.update(srv.injected)
        assert sum(srv.injected.values()) >= 0.1 * srv.count  # faults were really injected
    return lines


def _twice(run_once):
    """(clean lines by id, faulty run's lines): the same job fault-free, then with faults.
    `run_once(faults, name)` runs the job once and returns its output lines."""
    clean_lines = run_once(None, "clean")
    clean = {x["id"]: x for x in clean_lines}
    assert all(x["status"] == "ok" for x in clean_lines), [x["reason"] for x in clean_lines if x["status"] != "ok"]
    return clean, run_once(FAULTY, "faulty")


# -------------------------------------------------------------------------------------------- audit

URL = "https://en.wikipedia.org/wiki/McLaren_F1"
KB = InMemoryKB([Article(url=URL, title="McLaren F1", sections=[
    Section(index=0, title="McLaren F1", text="The McLaren F1 is a sports car designed by Gordon Murray."),
    Section(index=1, title="Ownership", text="The car is owned by the McLaren Group, based in Woking."),
    Section(index=2, title="Specifications", text="It weighs 1,301 kg. Production began in 1992."),
])])


def _audit_handler(req: dict) -> Reply:
    text = json.dumps(req["messages"])
    if "check benchmark annotations" in text:
        user = req["messages"][-1]["content"]
        claimed = next(x for x in user.splitlines() if x.startswith("Annotated answer"))
        label = "entailed" if "McLaren Group" in claimed and "owned by the McLaren Group" in user else "not_supported"
        return ok(json.dumps({"label": label, "rationale": "from the section"}))
    if "repair benchmark answers" in text:
        return ok(json.dumps({"status": "not_answerable", "answer": None, "rationale": "not stated"}))
    if "flag questions" in text:
        return ok(json.dumps({"tags": [], "suggested_question": None, "rationale": "clear"}))
    return ok(json.dumps({"leak": False, "answerable": True, "unique": True, "rationale": "fine"}))


def _audit_records(n: int = 12) -> list[dict]:
    return [Sample(id=f"a{i:02d}", question=f"Who owns this car (item {i})?",
                   answers=["McLaren Group" if i % 3 else "Ron Dennis"], entity={"url": URL}).dump()
            for i in range(n)]


def test_audit_with_model_verifiers(tmp_path):
    from kbvqa.pipelines.audit import AuditConfig, audit_job
    from kbvqa.stages.audit.verify import VerifyConfig

    records = _audit_records()

    def run_once(faults, name):
        with FakeLLMServer(handler=_audit_handler, faults=faults) as srv:
            m1, m2 = _client(srv, "verifier-a", bool(faults)), _client(srv, "verifier-b", bool(faults))
            roles = {"verifier": [m1, m2], "repairer": m1, "checker": m2}
            cfg = AuditConfig(verify=VerifyConfig(rules_settle=False))
            out = tmp_path / f"{name}.jsonl"
            summary = audit_job(cfg, kb=KB, roles=roles).run(records, out=out, resume=False, progress=False,
                                                             concurrency=8)
            lines = check_run(out, [r["id"] for r in records], srv, summary)
        return lines

    clean, faulty = _twice(run_once)

    def project(x):
        a = x["audit"]
        return x["question"], x["answers"], a["answer_support"], a["action"], sorted(a["tags"]), \
            [v["label"] for v in a["stages"]["verify"]["verifiers"]]

    assert {clean[i]["audit"]["action"] for i in clean} == {"keep", "drop"}  # both paths exercised
    for x in faulty:
        if x["status"] == "ok":
            assert project(x) == project(clean[x["id"]])
        else:
            assert "audit" not in x  # a failed record carries no verdict at all
    assert sum(x["status"] != "ok" for x in faulty) < len(faulty)  # faults cost records, not the run


# -------------------------------------------------------------------------------------------- judge

def test_judge(tmp_path):
    from kbvqa.evaluate.judge import run_judge

    records = [{"id": f"j{i:02d}", "question": f"Which year, item {i}?", "target": str(1990 + i),
                "prediction": str(1990 + i + (i % 2))} for i in range(24)]

    def handler(req):
        text = req["messages"][-1]["content"]
        target = text.split("Gold answer: ")[1].split("\n")[0]
        given = text.split("Answer to grade: ")[1].split("\n")[0]
        return ok(json.dumps({"label": "correct" if target == given else "incorrect", "rationale": "compared"}))

    def run_once(faults, name):
        with FakeLLMServer(handler=handler, faults=faults) as srv:
            out = tmp_path / f"{name}.judge.jsonl"
            res = run_judge(records, _client(srv, "judge", bool(faults)), out=out, resume=False, concurrency=8)
            lines = check_run(out, [r["id"] for r in records], srv, res.run)
            for x in lines:  # a verdict label only on ok lines; invalid/error lines are counted as such
                v = res.verdicts[x["id"]]
                assert (v.label in ("correct", "incorrect")) == (x["status"] == "ok")
                assert x["status"] == "ok" or v.label in ("invalid", None)
        return lines

    clean, faulty = _twice(run_once)
    for x in faulty:
        if x["status"] == "ok":
            assert x["verdict"]["label"] == clean[x["id"]]["verdict"]["label"]


# ----------------------------------------------------------------------------- answer and agent (bench)

@pytest.fixture(scope="module")
def bench(bench_copy, tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    b = bench_copy(root / "bench")
    kb = KBStore(b.kb)
    enc = HistogramEncoder()
    index, _ = build_image_index(kb, b.root, enc)
    samples = [s.dump() for s in read_samples(b.samples, "kbvqa")]
    yield b, kb, index, enc, root, samples
    kb.close()


def _question_of(req: dict, questions: list[str]) -> str:
    text = json.dumps(req["messages"], ensure_ascii=False)
    found = [q for q in questions if json.dumps(q, ensure_ascii=False)[1:-1] in text]
    assert found, "a request for no sample"
    return max(found, key=len)


def test_iba_answer_pipeline_accounts_every_call(bench):
    """Vision, LLM rerank and answerer calls all count, in each prediction and in the manifest (the
    vision and rerank calls used to be left out of the run's totals)."""
    b, kb, index, enc, root, samples = bench
    samples = samples[:14]
    questions = [s["question"] for s in samples]
    by_q = {s["question"]: s for s in samples}

    def handler(req):
        text = json.dumps(req["messages"])
        s = by_q[_question_of(req, questions)]
        if "Identify the specific entity" in text:
            return ok(json.dumps({"entities": [s["entity"]["title"]]}), prompt_tokens=300)
        if "You rank knowledge-base passages" in text:
            return ok(json.dumps({"ranking": [2, 1]}), prompt_tokens=200)
        return ok(json.dumps({"answer": s["answers"][0]}), prompt_tokens=400, completion_tokens=7)

    def run_once(faults, name):
        with FakeLLMServer(handler=handler, faults=faults) as srv:
            roles = {r: _client(srv, r, bool(faults)) for r in ("vision", "checker", "answerer")}
            job = build_answer_job("iba", kb=kb, index=index, encoder=enc, image_root=b.root, roles=roles,
                                   reranker="llm", rerank_role="checker")
            assert job.stage_names == ["retrieve-image", "identify-entity", "rerank-sections", "answer-llm"]
            out = root / f"iba.{name}.jsonl"
            summary = job.run(samples, out=out, resume=False, progress=False, concurrency=8)
            lines = check_run(out, [s["id"] for s in samples], srv, summary)
            sent = Counter(_question_of(r["json"], questions) for r in srv.requests)
            for x in lines:
                if x["status"] == "ok":  # the prediction's usage is every request made for its sample
                    assert x["usage"]["calls"] == sent[by_q[x["meta"]["question"]]["question"]]
            if faults is None:
                assert summary.usage.calls == 3 * len(samples)
                assert summary.usage.prompt_tokens == 900 * len(samples)
        return lines

    clean, faulty = _twice(run_once)
    for x in faulty:
        if x["status"] == "ok":
            c = clean[x["id"]]
            assert (x["answer"], x["retrieved"][:1]) == (c["answer"], c["retrieved"][:1])
        else:
            assert "answer" not in x


# --- the agent

def call(name: str, **arguments) -> str:
    return f"<think>step</think><tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def answer(text: str) -> str:
    return f"<think>done</think><answer>{text}</answer>"


def _agent_script(sample: dict) -> list[str]:
    title, url = sample["entity"]["title"], sample["entity"]["url"]
    return [call("search", query=[title]),
            call("visit", url=[url], goal=f"answer: {sample['question']}"),
            answer(f"The answer is {sample['answers'][0]}. It concerns {title}.")]


def _agent_handler(samples: list[dict]):
    questions = [s["question"] for s in samples]
    by_q = {s["question"]: s for s in samples}

    def handler(req):
        text = json.dumps(req["messages"])
        if "You read a web page for a researcher" in text:
            return ok(json.dumps({"rational": "the page is about it", "evidence": "quoted passage",
                                  "summary": "The page states the answer."}))
        script = _agent_script(by_q[_question_of(req, questions)])
        turn = sum(1 for m in req["messages"] if m["role"] == "assistant")
        return Reply(content=script[min(turn, len(script) - 1)], prompt_tokens=100, completion_tokens=20)
    return handler


def _agent_job(bench, srv, faulty):
    b, kb, index, enc, *_ = bench
    roles = {"agent": _client(srv, "agent", faulty), "extractor": _client(srv, "extractor", faulty)}
    return build_answer_job("agent", kb=kb, roles=roles, index=index, encoder=enc, image_root=b.root,
                            kb_images=b.root, today="2026-01-01")


def test_agent_episodes(bench):
    """The agent's own calls and its extractor's calls (through tools/extract.py) all count. Truncated
    replies are left out here — a cut-off turn is a format error the scripted episode would answer
    differently — and tested on their own in test_agent_does_not_take_a_truncated_answer."""
    root, samples = bench[4], bench[5]
    samples = samples[:10]
    handler = _agent_handler(samples)
    faults = Faults.spread(0.2, kinds=("429", "500", "timeout", "malformed"), timeout_delay=0.6,
                           retry_after=0.01, seed=11)

    def run_once(f, name):
        with FakeLLMServer(handler=handler, faults=f) as srv:
            out = root / f"agent.{name}.jsonl"
            summary = _agent_job(bench, srv, bool(f)).run(samples, out=out, resume=False, progress=False,
                                                          concurrency=5)
            lines = check_run(out, [s["id"] for s in samples], srv, summary)
            if f is None:
                assert summary.usage.calls == 4 * len(samples)  # 3 agent turns + 1 extraction each
        return lines

    clean_lines = run_once(None, "clean")
    clean = {x["id"]: x for x in clean_lines}
    assert all(x["status"] == "ok" and x["meta"]["termination"] == "answer" for x in clean_lines)
    faulty = run_once(faults, "faulty")
    for x in faulty:
        if x["status"] == "ok" and x["answer"] is not None:
            assert x["answer"] == clean[x["id"]]["answer"]


# -------------------------------------------------------------------------------------------- IVR-12

_IVR12_DIMS = {"content": ["accuracy", "completeness", "intent_understanding", "source_fidelity",
                           "conciseness", "usefulness"],
               "presentation": ["formatting", "clarity", "coherence_structure"],
               "image": ["relevance_necessity_placement", "visual_quality", "non_redundancy"],
               "gate": ["addresses_subject"]}


def _ivr12_handler(req: dict) -> Reply:
    """A deterministic judge: each item's score comes from its id, each group from the prompt."""
    import re

    content = req["messages"][-1]["content"]
    text = content if isinstance(content, str) else content[0]["text"]
    group = {"CONTENT": "content", "PRESENTATION": "presentation", "IMAGES": "image", "GATE": "gate"}[
        re.match(r"(?:Grade the|Decide a pass/fail) (\w+)", text).group(1)]
    score = 1 + int(re.search(r"\[v(\d+)\]", text).group(1)) % 5
    return ok(json.dumps({k: ({"pass": True} if group == "gate" else {"score": score}) | {"rationale": "r"}
                          for k in _IVR12_DIMS[group]}))


def test_ivr12_judge(tmp_path):
    """IVR-12 (several calls per item, all of which must parse for the item to be ok) under faults."""
    from types import SimpleNamespace

    from PIL import Image

    from kbvqa.pipelines.score import ivr12_files

    (tmp_path / "images").mkdir()
    samples, preds = [], []
    for i in range(10):
        Image.new("RGB", (64, 48), (20 * i, 90, 200 - 10 * i)).save(tmp_path / "images" / f"v{i}.jpg")
        samples.append({"id": f"v{i}", "question": f"[v{i}] What is pictured?", "answers": [f"thing {i}"],
                        "images": [f"images/v{i}.jpg"]})
        preds.append({"id": f"v{i}", "answer": f"It is thing {i}. " + "word " * 20, "status": "ok"})
    for name, rows in (("samples", samples), ("preds", preds)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    def run_once(faults, name):
        with FakeLLMServer(handler=_ivr12_handler, faults=faults) as srv:
            out = tmp_path / f"{name}.ivr12.jsonl"
            s = ivr12_files(tmp_path / "preds.jsonl", tmp_path / "samples.jsonl",
                            [_client(srv, "judge", bool(faults))], out=out, resume=False, concurrency=8)
            run = SimpleNamespace(**{k: s["run"][k] for k in ("ok", "error", "invalid", "skipped")},
                                  manifest=s["manifest"], usage=SimpleNamespace(calls=s["run"]["calls"]))
            lines = check_run(out, [r["id"] for r in samples], srv, run)
            for x in lines:  # a score only on ok lines
                assert (x.get("ivr12") is not None) == (x["status"] == "ok")
        return lines

    clean, faulty = _twice(run_once)
    for x in faulty:
        if x["status"] == "ok":
            assert x["ivr12"]["dimensions"] == clean[x["id"]]["ivr12"]["dimensions"]


def test_every_fault_kind_was_exercised():
    if len(INJECTED) == 0:
        pytest.skip("run with the fault-injection tests above")
    assert set(INJECTED) == set(FAULT_KINDS), INJECTED


# ------------------------------------------------------------------------ the agent's own edge cases

def test_agent_failed_call_counts_its_requests(bench):
    root, samples = bench[4], bench[5]
    with FakeLLMServer(default=server_error(500)) as srv:
        summary = _agent_job(bench, srv, False).run(samples[:1], out=root / "agent.fail.jsonl", resume=False,
                                                    progress=False)
        assert summary.error == 1 and srv.count == MAX_RETRIES + 1
        assert summary.usage.calls == srv.count


def test_agent_does_not_take_a_truncated_answer(bench):
    root, samples = bench[4], bench[5]
    with FakeLLMServer(default=Reply(content="<think>done</think><answer>The answer is Elmi",
                                     finish_reason="length")) as srv:
        out = root / "agent.trunc.jsonl"
        _agent_job(bench, srv, False).run(samples[:1], out=out, resume=False, progress=False)
    line = _lines(out)[0]
    assert line["status"] != "ok" or line["answer"] is None
