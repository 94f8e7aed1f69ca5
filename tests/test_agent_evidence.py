"""`study agent-tools` on hand-made trajectories: every call counts (repeated and over-quota ones shown
apart), the useful-evidence hit rate is over every call of the tool with the ok-only rate beside it, the
offline rule says "needs a model" on paragraph references, a scripted judge decides hits over the whole
observation (not its 2,000-character inline cut), and the episodes each termination ended are counted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.formats import write_samples
from kbvqa.data.schema import Answer, Sample
from kbvqa.evaluate.agent_evidence import EVIDENCE_CHARS, key_answers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply, ok  # noqa: E402

runner = CliRunner()
PARAGRAPH = ("The bird in the photo is a juvenile European robin: the speckled brown breast is what young robins "
             "have before their first moult, and the red comes in over the late summer. It is healthy and should "
             "be left where it is, since its parents are almost certainly feeding it nearby.")
FAR_FACT = "Elmira is where the museum keeps the glider."  # past the 2,000 characters kept inline


def _step(turn: int, tool: str, status: str, observation: str = "", **extra) -> dict:
    return {"turn": turn, "thought": f"step {turn}", "tool": tool, "arguments": {"query": [f"q{turn}"]},
            "status": status, "observation": observation, **extra}


def _write(tmp_path: Path, answer: str) -> tuple[Path, Path]:
    """Two episodes: `a` with every kind of search / visit call, `b` stopped by the turn budget."""
    art = tmp_path / "agent.artifacts" / "a"
    art.mkdir(parents=True)
    long_page = "x " * 1500 + FAR_FACT
    (art / "turn05_visit.txt").write_text(long_page, encoding="utf-8")
    a_steps = [_step(1, "search", "ok", "Results: the glider museum at Elmira, New York."),  # rule hit
               _step(2, "search", "error", "", reason="HTTP 502"),
               _step(3, "search", "repeated", "", reason="not run: you made this exact call in turn 1"),
               _step(4, "search", "blocked", "", reason="leakage guard"),
               _step(5, "visit", "ok", long_page[:2000], observation_file="agent.artifacts/a/turn05_visit.txt"),
               _step(6, "visit", "ok", "A page about gliders in general."),
               _step(7, "image_search", "ok", "similar images"),
               _step(8, "image_search", "quota", "", reason="not run: image_search may be used 1 time(s)"),
               {"turn": 9, "thought": "I know it now", "answer": True}]
    b_steps = [_step(1, "search", "ok", "Nothing about it here."), _step(2, "search", "empty", ""),
               {"turn": 3, "thought": "forced", "answer": True, "forced": True}]
    preds = tmp_path / "agent.jsonl"
    lines = [{"id": "a", "status": "ok", "answer": "Elmira.", "trajectory": a_steps,
              "meta": {"termination": "answer", "forced_answer": False, "question": "Where is it?"}},
             {"id": "b", "status": "ok", "answer": "Maybe Boston.", "trajectory": b_steps,
              "meta": {"termination": "turn_budget", "forced_answer": True, "question": "Where is that?"}},
             {"id": "c", "status": "error", "reason": "ModelCallError: agent model call failed"}]
    preds.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    refs = tmp_path / "refs.jsonl"
    write_samples([Sample(id=i, question=q, answers=[Answer(text=answer)])
                   for i, q in (("a", "Where is it?"), ("b", "Where is that?"), ("c", "Which one?"))], refs, "kbvqa")
    return preds, refs


def _study(preds: Path, refs: Path, *extra: str) -> tuple[dict, str]:
    res = runner.invoke(app, ["study", "agent-tools", "-p", str(preds), "-r", str(refs), "--json", *extra])
    assert res.exit_code == 0, res.output
    table = runner.invoke(app, ["study", "agent-tools", "-p", str(preds), "-r", str(refs), *extra],
                          env={"COLUMNS": "250"})  # the whole header on one line
    assert table.exit_code == 0, table.output
    return json.loads(res.stdout), " ".join(table.output.split())


def test_every_call_counts_and_the_hit_rate_is_over_every_call(tmp_path):
    preds, refs = _write(tmp_path, "Elmira")
    obj, out = _study(preds, refs)
    # calls / episode x episodes = calls, repeated and over-quota ones included and shown apart
    assert obj["calls"]["search"] == {"calls": 6, "ok": 2, "not_run": {"repeated": 1, "quota": 0},
                                      "by_status": {"ok": 2, "error": 1, "repeated": 1, "blocked": 1, "empty": 1}}
    assert obj["calls_per_episode"]["search"] * obj["n"] == 6
    assert obj["calls"]["image_search"]["not_run"] == {"repeated": 0, "quota": 1}
    ev = obj["useful_evidence"]
    assert ev["measure"] == "rule" and ev["evidence_chars"] == EVIDENCE_CHARS
    s, v = ev["tools"]["search"], ev["tools"]["visit"]
    # one hit over all 6 searches (error, repeated, blocked, empty included), over the 2 ok ones beside it
    assert (s["hits"], s["calls"], s["rate"], s["ok_calls"], s["ok_rate"]) == (1, 6, round(1 / 6, 6), 2, 0.5)
    # the visit's fact lies past the 2,000 inline characters: read from its artifact, untruncated
    assert (v["hits"], v["rate"]) == (1, 0.5) and ev["observation_sources"]["artifact"] == 1
    assert "useful evidence [rule], all calls (%)" in out and "useful evidence [rule], ok calls (%)" in out and "16.67" in out and "50.00" in out
    assert "repeated (not run)" in out
    # how the episodes ended: the turn budget ended one, which was then answered in a forced turn
    end = obj["ending"]
    assert end["by"] == {"answered": 1, "budget": 1, "guard": 0, "error": 1} and end["forced_answers"] == 1
    assert {r["termination"]: (r["episodes"], r["forced_answer"], r["no_answer"]) for r in end["rows"]} == {
        "answer": (1, 0, 0), "turn_budget": (1, 1, 0), "episode_error": (1, 0, 1)}
    assert "how the episodes ended: answered 1, budget 1, guard 0, error 1; forced answers 1" in out


def test_paragraph_references_need_a_model_offline(tmp_path):
    assert key_answers([PARAGRAPH]) == [] and key_answers(["Elmira"]) == ["Elmira"]
    preds, refs = _write(tmp_path, PARAGRAPH)
    obj, out = _study(preds, refs)
    ev = obj["useful_evidence"]
    assert ev["needs_model"] is True
    assert all(t["rate"] is None and t["checkable"] == 0 and t["needs_model"] == t["calls"]
               for t in ev["tools"].values())
    assert "needs a model" in out and "0.00" not in out.split("useful evidence")[1].split("calls")[0]


def test_a_scripted_judge_decides_the_hits(tmp_path, monkeypatch):
    """Three calls return text: one supports the reference (a hit), one does not (a miss), one reply is
    not the JSON contract (invalid, counted, no hit); calls that returned nothing are misses unasked."""
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    preds, refs = _write(tmp_path, PARAGRAPH)
    asked: list[str] = []

    def judge(req: dict) -> Reply:
        text = req["messages"][-1]["content"]
        asked.append(text)
        if "glider museum at Elmira" in text:
            return ok('{"supports": true, "rationale": "names the place"}')
        if "Elmira is where the museum" in text:
            return ok("probably yes")  # not {supports, rationale}: invalid
        return ok('{"supports": false, "rationale": "off topic"}')

    journal = tmp_path / "evidence.jsonl"
    args = ["--judge-model", "judge-e", "--journal", str(journal), "--max-retries", "0"]
    with FakeLLMServer(handler=judge) as srv:
        obj, _ = _study(preds, refs, "--judge-base-url", srv.base_url, *args)
        # ok calls with text: a1, a5, a6 (visits), b1 -> 4 requests; the table's second run asked nothing
        # new for the three usable verdicts and the invalid one again
        assert srv.count == 5
    assert any(FAR_FACT in t for t in asked)  # the judge saw the whole observation
    assert all(PARAGRAPH[:60] in t for t in asked)
    ev = obj["useful_evidence"]
    assert ev["measure"] == "judge" and "judge-e" in ev["scorer"] and "agent.useful_evidence@1" in ev["scorer"]
    s, v = ev["tools"]["search"], ev["tools"]["visit"]
    assert (s["hits"], s["misses"], s["invalid"], s["error"], s["calls"], s["rate"], s["ok_rate"]) == (
        1, 5, 0, 0, 6, round(1 / 6, 6), 0.5)
    assert (v["hits"], v["misses"], v["invalid"], v["calls"], v["rate"], v["ok_rate"]) == (0, 1, 1, 2, 0.0, 0.0)
    assert obj["evidence_journal"] == str(journal) and len(journal.read_text().splitlines()) >= 4


def test_an_evidence_judge_that_always_fails_exits_3(tmp_path, monkeypatch):
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    preds, refs = _write(tmp_path, "Elmira")
    with FakeLLMServer(default=Reply(status=500, error="down")) as srv:
        res = runner.invoke(app, ["study", "agent-tools", "-p", str(preds), "-r", str(refs), "--json",
                                  "--judge-base-url", srv.base_url, "--judge-model", "judge-e", "--max-retries", "0"])
    assert res.exit_code == 3, res.output
    ev = json.loads(res.stdout)["useful_evidence"]["tools"]
    assert ev["search"]["error"] == 2 and ev["search"]["hits"] == 0 and ev["visit"]["error"] == 2


def test_the_evidence_judge_and_its_cap_from_the_config(tmp_path, monkeypatch):
    """[models.judge] is the evidence judge and [study.agent-tools.stage] sets its cap: with 100
    characters the visit's fact past them is never shown, and the result says which cap it used."""
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    preds, refs = _write(tmp_path, "Elmira")
    asked: list[str] = []

    def judge(req: dict) -> Reply:
        asked.append(req["messages"][-1]["content"])
        return ok('{"supports": false, "rationale": "no"}')

    with FakeLLMServer(handler=judge) as srv:
        cfg = tmp_path / "kbvqa.toml"
        cfg.write_text(f'[models.judge]\nbackend = "openai"\nmodel = "judge-c"\nbase_url = "{srv.base_url}"\n'
                       '[study.agent-tools]\nconcurrency = 2\n[study.agent-tools.stage]\nevidence_chars = 100\n',
                       encoding="utf-8")
        res = runner.invoke(app, ["study", "agent-tools", "-p", str(preds), "-r", str(refs), "--config", str(cfg),
                                  "--json"])
    assert res.exit_code == 0, res.output
    ev = json.loads(res.stdout)["useful_evidence"]
    assert ev["evidence_chars"] == 100 and "judge-c" in ev["scorer"] and len(asked) == 4
    assert not any(FAR_FACT in t for t in asked) and ev["tools"]["visit"]["misses"] == 2
