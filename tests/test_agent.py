"""The ReAct search agent against a scripted OpenAI-compatible server on 127.0.0.1: each scripted
episode ends with the right termination, trajectory and image-tag verdicts, and every sample has
exactly one output line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kbvqa.data.formats import read_samples
from kbvqa.kb.store import KBStore
from kbvqa.models.client import OpenAIChatClient
from kbvqa.models.image_encoders import HistogramEncoder
from kbvqa.pipelines.answer import build_answer_job
from kbvqa.pipelines.index import build_image_index
from kbvqa.runner import read_results

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply  # noqa: E402


def call(name: str, **arguments) -> str:
    return f"<think>step</think><tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def answer(text: str) -> str:
    return f"<think>done</think><answer>{text}</answer>"


def tag(query: str, idx: int) -> str:
    return "<image>" + json.dumps({"query": query, "idx": idx}) + "</image>"


# question -> the replies of its episode, turn by turn
SCRIPTS: dict[str, list] = {
    "good episode": [call("image_search", goal="who is this"), call("search", query=["Eileen Collins birthplace"]),
                     call("text_to_image_search", query="Eileen Collins"),
                     answer("She was born in Elmira. Eileen Collins was a shuttle commander.\n"
                            + tag("Eileen Collins", 1))],
    "malformed call": ["<think>x</think><tool_call>{not json</tool_call>", answer("Elmira.")],
    "identical calls": [call("search", query=["Elmira"]), call("search", query=["Elmira"]),
                        call("search", query=["Elmira"]), answer("Elmira, as far as I can tell.")],
    "second image search": [call("image_search", goal="a"), call("image_search", goal="b"), answer("A cat.")],
    "tag without search": [answer("It is Mars.\n" + tag("Mars", 1))],
    "idx out of range": [call("text_to_image_search", query="Eileen Collins"),
                         answer("Eileen Collins.\n" + tag("Eileen Collins", 4))],
    "duplicate image": [call("text_to_image_search", query="Eileen Collins"),
                        answer("A.\n" + tag("Eileen Collins", 1) + "\nB.\n" + tag("Eileen Collins", 1))],
    "never answers": [call("search", query=["Falcon 9 rocket launch"]), call("search", query=["Chelsea the cat"]),
                      call("search", query=["Grace Hopper computer scientist"]),
                      call("search", query=["Hubble deep field galaxies"])],
    "plain text": ["Hello there.", "Still no protocol."],
    "api failure": [Reply(status=500, error="boom")] * 10,
}


def _question(req: dict) -> str:
    for m in req["messages"]:
        if m["role"] == "user":
            c = m["content"]
            return c if isinstance(c, str) else c[0]["text"]
    return ""


def _handler(req: dict) -> Reply:
    script = SCRIPTS[_question(req)]
    turn = sum(1 for m in req["messages"] if m["role"] == "assistant")
    step = script[min(turn, len(script) - 1)]
    return step if isinstance(step, Reply) else Reply(content=step, prompt_tokens=100, completion_tokens=20)


@pytest.fixture(scope="module")
def bench(bench_copy, tmp_path_factory):
    root = tmp_path_factory.mktemp("agent")
    b = bench_copy(root / "bench")
    kb = KBStore(b.kb)
    enc = HistogramEncoder()
    index, _ = build_image_index(kb, b.root, enc)
    base = [s.dump() for s in read_samples(b.samples, "kbvqa")][0]
    yield b, kb, index, enc, root, base
    kb.close()


def _samples(base: dict, questions) -> list[dict]:
    return [{**base, "id": f"ep{i:02d}", "question": q} for i, q in enumerate(questions)]


def _run(bench, server, questions, out_name, **opts):
    b, kb, index, enc, root, base = bench
    roles = {"agent": OpenAIChatClient(server.base_url, "fake-agent", max_retries=1, backoff_base=0.01,
                                       backoff_max=0.02)}
    job = build_answer_job("agent", kb=kb, roles=roles, index=index, encoder=enc, image_root=b.root,
                           kb_images=b.root, **opts)
    out = root / out_name
    summary = job.run(_samples(base, questions), out=out, concurrency=4, progress=False, resume=False)
    return summary, {r["question"] if "question" in r else r["meta"]["question"]: r for r in read_results(out)}, out


def test_scripted_episodes_end_as_scripted(bench):
    questions = [q for q in SCRIPTS if q != "never answers"]
    with FakeLLMServer(handler=_handler) as srv:
        summary, by_q, out = _run(bench, srv, questions, "episodes.jsonl")
    lines = list(read_results(out))
    assert len(lines) == len(questions) == summary.total  # exactly one line per sample
    assert summary.error == 1 and summary.ok == len(questions) - 1

    good = by_q["good episode"]
    assert good["meta"]["termination"] == "answer"
    assert [t.get("tool") for t in good["trajectory"]] == ["image_search", "search", "text_to_image_search", None]
    assert good["meta"]["provenance"]["tags"] == 1 and good["meta"]["provenance"]["valid"] == 1
    assert good["meta"]["provenance"]["violations"] == []
    # the embedded image is kept with the run, named relative to its folder (the image root scoring uses)
    (img,) = good["images"]
    assert not Path(img).is_absolute() and img.startswith("episodes.artifacts/")
    assert (out.parent / img).read_bytes() == (bench[0].root / "images" / "kb_astronaut.jpg").read_bytes()
    assert Path(good["meta"]["provenance"]["resolved"][0]["source_image"]).name == "kb_astronaut.jpg"
    assert good["short_answer"] == "She was born in Elmira."
    assert good["producer"]["model"] == "fake-agent" and good["usage"]["calls"] == 4
    assert any(t.get("leak") == ["Elmira"] for t in good["trajectory"])  # the KB section states the answer

    bad = by_q["malformed call"]
    assert bad["meta"]["termination"] == "answer" and "not valid JSON" in bad["trajectory"][0]["problem"]

    rep = by_q["identical calls"]  # the loop guard ends the tool phase; the model still answers, told why
    assert rep["meta"]["termination"] == "repeated_behaviour" and rep["meta"]["forced_answer"] is True
    assert rep["answer"] == "Elmira, as far as I can tell."
    assert [t.get("status") for t in rep["trajectory"]] == ["ok", "repeated", "repeated", None]
    assert "not run" in rep["trajectory"][1]["reason"]
    assert [n["kind"] for n in rep["trajectory"][2]["notices"]] == ["repeat_warning"]
    last = rep["trajectory"][-1]
    assert last["forced"] and last["answer"] and [n["kind"] for n in last["notices"]] == ["forced_answer"]
    assert "repeated earlier ones" in last["notices"][0]["text"]
    assert good["meta"]["forced_answer"] is False

    quota = by_q["second image search"]
    assert [t.get("status") for t in quota["trajectory"]] == ["ok", "quota", None]
    assert quota["meta"]["termination"] == "answer"

    nosearch = by_q["tag without search"]["meta"]["provenance"]
    assert nosearch["valid"] == 0 and [v["kind"] for v in nosearch["violations"]] == ["no_prior_call"]
    oor = by_q["idx out of range"]["meta"]["provenance"]
    assert [v["kind"] for v in oor["violations"]] == ["idx_out_of_range"]
    dup = by_q["duplicate image"]["meta"]["provenance"]
    assert dup["tags"] == 2 and dup["valid"] == 1 and [v["kind"] for v in dup["violations"]] == ["duplicate_image"]

    plain = by_q["plain text"]  # the forced turn is plain text again: no answer is made up
    assert plain["meta"]["termination"] == "format_error" and plain["answer"] is None
    assert plain["meta"]["forced_answer"] is True and len(plain["trajectory"]) == 3
    assert all("neither" in t["problem"] for t in plain["trajectory"])
    assert [n["kind"] for n in plain["trajectory"][1]["notices"]] == ["format_error"]

    failed = next(r for r in lines if r["status"] == "error")
    assert "agent model call failed" in failed["reason"] and "HTTP 500" in failed["reason"]


def test_turn_budget_and_answer_now(bench):
    with FakeLLMServer(handler=_handler) as srv:
        summary, by_q, _ = _run(bench, srv, ["never answers"], "budget.jsonl", max_turns=3)
        third, forced = (r["json"]["messages"] for r in srv.requests[2:4])
    ep = by_q["never answers"]
    # three tool turns, then the forced turn: this model calls a tool even then, which is not run
    assert ep["meta"]["termination"] == "turn_budget" and ep["answer"] is None and ep["meta"]["turns"] == 4
    assert ep["meta"]["tool_calls"] == {"search": 3} and "after the tools were closed" in ep["trajectory"][-1]["problem"]
    assert "run out of turns" in third[-1]["content"]  # told to answer before the cap
    assert "tools are now closed" in forced[-1]["content"] and "turn budget (3 turns)" in forced[-1]["content"]
    assert [n["kind"] for n in ep["trajectory"][2]["notices"]] == ["budget_warning"]
    assert srv.requests[0]["json"]["stop"] == ["<tool_response>"]


def test_a_forced_stop_still_yields_the_models_answer(bench):
    """Turn cap and repeated tool failures: the model answers in its forced turn and that is the prediction."""
    SCRIPTS["capped"] = [call("search", query=["Falcon 9"]), call("search", query=["Chelsea"]),
                         answer("From what I know, Elmira.")]
    with FakeLLMServer(handler=_handler) as srv:
        _, by_q, _ = _run(bench, srv, ["capped"], "capped.jsonl", max_turns=2)
    ep = by_q["capped"]
    assert ep["status"] == "ok" and ep["answer"] == "From what I know, Elmira."
    assert ep["short_answer"] == "From what I know, Elmira."
    assert ep["meta"]["termination"] == "turn_budget" and ep["meta"]["forced_answer"] is True
    assert ep["trajectory"][-1]["forced"] is True and ep["trajectory"][-1]["answer"] is True


def test_two_empty_searches_then_an_answer(bench):
    """Searches that find nothing new are information, not a loop: the episode goes on to its answer."""
    SCRIPTS["empty searches"] = [call("text_to_image_search", query="zzqx nonexistent thing"),
                                 call("text_to_image_search", query="another qqzv unknown item"),
                                 answer("I found nothing; from what I know, it is Elmira.")]
    with FakeLLMServer(handler=_handler) as srv:
        _, by_q, _ = _run(bench, srv, ["empty searches"], "empty.jsonl")
        second = srv.requests[1]["json"]["messages"][-1]["content"]
    ep = by_q["empty searches"]
    assert [t.get("status") for t in ep["trajectory"]] == ["empty", "empty", None]
    assert ep["meta"]["termination"] == "answer" and ep["meta"]["forced_answer"] is False
    assert ep["answer"].startswith("I found nothing")
    assert "nothing that earlier calls had not already returned" in second
    assert [n["kind"] for n in ep["trajectory"][1]["notices"]] == ["nothing_new"]


def test_a_repeated_image_search_does_not_shadow_the_first(bench):
    """The same text_to_image_search twice: the second is answered `repeated`; a tag to the query still
    resolves against the call whose results the model saw."""
    SCRIPTS["repeat images"] = [call("text_to_image_search", query="Eileen Collins"),
                                call("text_to_image_search", query="Eileen Collins"),
                                answer("Eileen Collins.\n" + tag("Eileen Collins", 1))]
    with FakeLLMServer(handler=_handler) as srv:
        _, by_q, _ = _run(bench, srv, ["repeat images"], "repeat_images.jsonl")
    ep = by_q["repeat images"]
    assert [t.get("status") for t in ep["trajectory"]] == ["ok", "repeated", None]
    prov = ep["meta"]["provenance"]
    assert prov["tags"] == 1 and prov["valid"] == 1 and prov["violations"] == []
    assert len(ep["images"]) == 1


def test_native_tool_calling(bench):
    def handler(req: dict) -> Reply:
        turn = sum(1 for m in req["messages"] if m["role"] == "assistant")
        if turn == 0:
            assert req["tools"] and req["tool_choice"] == "auto"
            return Reply(content=None, tool_calls=[{"id": "c1", "type": "function", "function": {
                "name": "search", "arguments": json.dumps({"query": ["Eileen Collins"]})}}])
        assert req["messages"][-1]["role"] == "tool" and req["messages"][-1]["tool_call_id"] == "c1"
        return Reply(content="Eileen Collins was born in Elmira.")

    with FakeLLMServer(handler=handler) as srv:
        summary, by_q, _ = _run(bench, srv, ["native"], "native.jsonl", protocol="tools")
    ep = by_q["native"]
    assert summary.ok == 1 and ep["meta"]["termination"] == "answer"
    assert ep["answer"] == "Eileen Collins was born in Elmira." and ep["trajectory"][0]["tool"] == "search"


def test_baseline_policy_offline(bench):
    b, kb, index, enc, root, base = bench
    recs = [s.dump() for s in read_samples(b.samples, "kbvqa")]
    job = build_answer_job("agent", kb=kb, index=index, encoder=enc, image_root=b.root, kb_images=b.root)
    s = job.run(recs, out=root / "baseline.jsonl", progress=False, resume=False)
    preds = list(read_results(root / "baseline.jsonl"))
    assert s.ok == len(recs) == len(preds)
    assert all(p["producer"]["backend"] == "rules" for p in preds)
    assert all(p["meta"]["termination"] == "answer" for p in preds)
    # the pictured entity is identified by reverse image search and its image cited with a valid tag
    assert sum(p["meta"]["provenance"]["valid"] == 1 for p in preds) == len(preds)
    assert all(not p["meta"]["provenance"]["violations"] for p in preds)
    assert (root / "baseline.cassette" / "tools.sqlite").is_file()


def _stable(line: dict) -> dict:
    """An output line without what legitimately differs between a run and its replay: timings, cache
    flags, usage (a replayed call costs nothing) and the artifact folder's name."""
    drop = {"seconds", "cached", "usage", "observation_file"}

    def clean(v):
        if isinstance(v, str) and ".artifacts/" in v:  # <run stem>.artifacts/<id>/<name>
            return v.split(".artifacts/", 1)[1]
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items() if k not in drop}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    return clean(line)


def test_cassette_replays_the_run_exactly_and_offline(bench):
    b, kb, index, enc, root, base = bench
    questions = ["good episode", "idx out of range"]
    with FakeLLMServer(handler=_handler) as srv:
        _, first, out = _run(bench, srv, questions, "recorded.jsonl")
        sent = srv.count
    cassette = root / "recorded.cassette"
    assert (cassette / "cassette.json").is_file() and (cassette / "models.sqlite").is_file()
    # the server is gone: a replay must not need it
    dead = OpenAIChatClient("http://127.0.0.1:9/v1", "fake-agent", max_retries=0)
    job = build_answer_job("agent", kb=kb, roles={"agent": dead}, index=index, encoder=enc, image_root=b.root,
                           kb_images=b.root, tools="replay", cassette=cassette)
    s = job.run(_samples(base, questions), out=root / "replayed.jsonl", progress=False, resume=False)
    replayed = {r["meta"]["question"]: r for r in read_results(root / "replayed.jsonl")}
    assert s.ok == 2 and sent > 0
    assert {q: _stable(r) for q, r in replayed.items()} == {q: _stable(r) for q, r in first.items()}
    # a question the cassette never saw is an error record, never a live call
    s2 = job.run(_samples(base, ["tag without search"]), out=root / "miss.jsonl", progress=False, resume=False)
    miss = next(iter(read_results(root / "miss.jsonl")))
    assert s2.error == 1 and "cassette miss" in miss["reason"]


def test_bad_inputs_are_clear_errors_or_tool_statuses(bench, tmp_path, monkeypatch):
    from kbvqa.data.schema import Article, Section
    from kbvqa.kb.importer import build_kb
    from kbvqa.pipelines.answer.agent import AgentSetupError
    from kbvqa.tools.web import WebToolsConfigError

    b, kb, index, enc, root, base = bench
    # a sample without an image: the episode runs; reverse image search says why it cannot help
    SCRIPTS["no image"] = [call("image_search", goal="what is it"), answer("I cannot tell.")]
    with FakeLLMServer(handler=_handler) as srv:
        roles = {"agent": OpenAIChatClient(srv.base_url, "fake-agent", max_retries=0)}
        job = build_answer_job("agent", kb=kb, roles=roles, index=index, encoder=enc, image_root=b.root,
                               kb_images=b.root)
        s = job.run([{**base, "id": "noimg", "question": "no image", "images": []}], out=tmp_path / "noimg.jsonl",
                    progress=False)
    line = next(iter(read_results(tmp_path / "noimg.jsonl")))
    assert s.ok == 1 and line["trajectory"][0]["status"] == "error"
    assert "no image" in line["trajectory"][0]["reason"]

    # a KB without images: forward image search finds no picture (a status), the answer has no tag
    bare = build_kb([Article(url="https://en.wikipedia.org/wiki/Eileen_Collins", title="Eileen Collins",
                             sections=[Section(index=0, title="Eileen Collins", text="Collins was born in Elmira.")])],
                    tmp_path / "bare.sqlite")
    assert bare.articles == 1
    bare_kb = KBStore(tmp_path / "bare.sqlite")
    job = build_answer_job("agent", kb=bare_kb, image_root=b.root, kb_images=b.root)
    s = job.run([{**base, "id": "bare", "images": []}], out=tmp_path / "bare.jsonl", progress=False)
    line = next(iter(read_results(tmp_path / "bare.jsonl")))
    t2i = [t for t in line["trajectory"] if t.get("tool") == "text_to_image_search"]
    assert s.ok == 1 and t2i and t2i[0]["status"] == "empty" and line["meta"]["provenance"]["tags"] == 0
    bare_kb.close()

    # an index built with another encoder, and a web backend without its key: errors before any record runs
    class Other:
        name = "other-encoder"

    with pytest.raises(AgentSetupError, match="other-encoder"):
        build_answer_job("agent", kb=kb, index=index, encoder=Other())
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    with pytest.raises(WebToolsConfigError, match="SERPER_API_KEY"):
        build_answer_job("agent", kb=kb, tools="web")
    with pytest.raises(AgentSetupError, match="--cassette"):
        build_answer_job("agent", kb=kb, tools="replay")
    # local tools without the KB's image folder would answer without pictures, silently: refused
    with pytest.raises(AgentSetupError, match="--kb-images"):
        build_answer_job("agent", kb=kb, index=index, encoder=enc)


def test_guided_episodes_carry_the_short_reference(bench):
    """`--guided` (reference construction): the question the model reads names the short reference."""
    SCRIPTS["guided"] = [answer("Elmira.")]
    with FakeLLMServer(handler=lambda req: Reply(content=answer("Elmira."))) as srv:
        summary, by_q, _ = _run(bench, srv, ["guided"], "guided.jsonl", guided=True)
        sent = srv.requests[0]["json"]["messages"][1]["content"]
    text = sent if isinstance(sent, str) else sent[0]["text"]
    assert summary.ok == 1 and 'correct short answer is "Elmira"' in text
    assert next(iter(by_q.values()))["meta"]["guided"] is True
