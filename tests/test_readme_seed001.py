"""The README's seed-001 session, run as the README writes it, on what `kbvqa demo` wrote.

The commands are parsed out of the README's code block (so this test fails when the README drifts
from what the commands take); the only change made to them is the model server's address, replaced by
a scripted server's on 127.0.0.1. The scripted model is an imperfect one: one answer cites an image
tag no call returned, one judge reply is not JSON, and the tool arguments it writes are mixed-case
(the viewer must show them as written). Then the newcomer's checks: the answer's short summary, legends
that fit 80 columns, no Python reprs, and the viewer counting what each file holds."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.cli.view import build_site
from kbvqa.report.viewer.app import create_app
from kbvqa.runner import read_results

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, ok  # noqa: E402

README = Path(__file__).resolve().parents[1] / "README.md"
README_URL = "http://127.0.0.1:8000/v1"
runner = CliRunner()


def readme_seed001_commands() -> list[list[str]]:
    """The seed-001 session's code block, each command as its argument list (continuations joined,
    trailing comments dropped)."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## A typical seed-001 session", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def _model(questions: list[str]):
    """One scripted server for every role the session uses, told apart by their prompts."""
    def handler(req: dict) -> object:
        system = next((m["content"] for m in req["messages"] if m["role"] == "system"), "") or ""
        user = req["messages"][-1]["content"]
        user = user if isinstance(user, str) else " ".join(p.get("text", "") for p in user if isinstance(p, dict))
        asked = next((i for i, q in enumerate(questions) if q in json.dumps(req["messages"])), 0)
        if "multimodal research agent" in system:
            turn = sum(1 for m in req["messages"] if m["role"] == "assistant")
            if turn == 0:
                return ok('<think>look it up</think><tool_call>{"name": "search", "arguments": '
                          '{"query": ["Who Is In The Photo NASA"]}}</tool_call>')
            bad_tag = '\n<image>{"query": "never searched", "idx": 1}</image>' if asked == 3 else ""
            return ok(f"<think>enough</think><answer>It is answer {asked}.{bad_tag}</answer>")
        if user.startswith("You grade one answer"):  # the SimpleQA or the paragraph-reference judge
            if asked == 5:
                return ok("I would say it is correct")  # not the JSON asked for: an invalid verdict
            label = "correct" if asked % 2 == 0 else "incorrect"
            return ok(json.dumps({"label": label, "rationale": "scripted"}))
        if "did not answer a question correctly" in system:
            return ok(json.dumps({"category": "T1", "rationale": "scripted: the search missed it"}))
        return ok(f"I think it is answer {asked}, from the image alone.")  # the direct answerer
    return handler


@pytest.fixture(scope="module")
def session(tmp_path_factory, demo_copy):
    """(demo folder, {command: result}) after running the README's block in a copy of the demo."""
    base = tmp_path_factory.mktemp("readme")
    demo, _ = demo_copy(base / "results" / "demo")
    questions = [json.loads(line)["question"] for line in (demo / "bench" / "community.jsonl").open(encoding="utf-8")]
    results: list[tuple[list[str], object]] = []
    mp = pytest.MonkeyPatch()
    mp.chdir(base)
    try:
        with FakeLLMServer(handler=_model(questions)) as srv:
            for cmd in readme_seed001_commands():
                if cmd[0] == "cd":
                    mp.chdir(cmd[1])
                    continue
                assert cmd[0] == "kbvqa", cmd
                args = [srv.base_url if a == README_URL else a for a in cmd[1:]]
                res = runner.invoke(app, args)
                results.append((cmd, res))
                assert res.exit_code == 0, (cmd, res.output)
    finally:
        mp.undo()
    return demo, results


def test_the_readme_block_is_the_session_it_says():
    cmds = readme_seed001_commands()
    assert cmds[0] == ["cd", "results/demo"]
    jobs = [" ".join(c[1:3]) for c in cmds[1:]]
    assert jobs == ["answer --pipeline", "score judge", "study agent-tools", "study agent-failures",
                    "answer --pipeline", "score judge", "study retrieval-2x2", "score ivr12", "answer --pipeline"]
    assert all(README_URL not in c or c.count(README_URL) == 1 for c in map(" ".join, cmds))


def test_every_readme_command_runs_on_the_demo_and_the_replay_is_exact(session):
    demo, results = session
    assert len(results) == 9
    agent = {r["id"]: r for r in read_results(demo / "runs" / "agent.jsonl")}
    replay = {r["id"]: r for r in read_results(demo / "runs" / "agent.replay.jsonl")}
    assert len(agent) == 15 and set(replay) == set(agent)
    assert all(replay[i]["answer"] == agent[i]["answer"] for i in agent)
    verdicts = list(read_results(demo / "runs" / "agent.judge.jsonl"))
    assert sorted(v["status"] for v in verdicts).count("invalid") == 1


def test_answer_ends_with_a_short_summary_and_json_only_on_request(session):
    _, results = session
    agent_out = results[0][1].stdout
    assert not agent_out.lstrip().startswith("{")
    assert "answer --pipeline agent: ok 15 this run" in agent_out
    assert "ended by answer 15; forced answers 0" in agent_out
    assert "image tags: 0 of 1 valid; violations no prior call 1 in 1 episode(s)" in " ".join(agent_out.split())
    assert "full summary: --json" in agent_out
    direct_out = results[4][1].stdout
    assert "answer --pipeline direct: ok 15 this run" in direct_out and "episodes" not in direct_out


def test_no_python_reprs_and_every_line_fits_80_columns(session):
    _, results = session
    for cmd, res in results:
        for line in res.stdout.splitlines():
            assert "{'" not in line and "['" not in line and "None" not in line, (cmd, line)
            assert len(line) <= 80, (cmd, line)


def test_the_viewer_counts_the_files_and_shows_tool_arguments_as_written(session):
    demo, _ = session
    site = build_site([demo / "runs"])
    client = TestClient(create_app(site, warm=False), follow_redirects=False)
    for out in site.catalog.outputs:
        if out.kind != "summary":
            site.index(out).wait(None, timeout=20)
    home = client.get("/").text
    row = home.split("<code>agent.judge.jsonl</code>", 1)[1].split("</tr>", 1)[0]
    assert "ok 14" in row and "invalid 1" in row, row
    agent = next(o for o in site.catalog.outputs if o.rel == "agent.jsonl")
    page = client.get(f"/o/{agent.oid}/r/community_000").text
    assert "Who Is In The Photo NASA" in page  # as the model wrote it, not the loop guard's folded form
    assert "as the loop guard compared them" in page
