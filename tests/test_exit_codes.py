"""Exit codes and inputs as docs/reference.md and docs/data-formats.md document them (issue 25 item 5):
a job that ran and ended no record ok exits 3 and prints the most common reasons; an empty input (an
empty JSONL, a header-only CSV) is refused by every command that reads a benchmark unless
--allow-empty, through the one check (kbvqa.data.formats.non_empty); an InfoSeek `answer_eval` that is
a string is refused by the data readers and the scorer alike, never read as characters."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.cli.common import top_reasons

runner = CliRunner()

WIKI = {"https://en.wikipedia.org/wiki/X": {"title": "X", "section_titles": ["Intro"],
                                             "section_texts": ["X is a thing."], "image_urls": []}}


def _invoke(args: list[str]):
    return runner.invoke(app, args)


@pytest.fixture()
def case(tmp_path, monkeypatch):
    """A folder with an empty JSONL, a header-only CSV and a one-article wiki; the tests run from it
    with relative paths, as a user types them."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    (tmp_path / "empty.jsonl").write_text("", encoding="utf-8")
    (tmp_path / "header.csv").write_text("data_id,question,answer,dataset_image_ids\n", encoding="utf-8")
    (tmp_path / "wiki.json").write_text(json.dumps(WIKI), encoding="utf-8")
    (tmp_path / "img").mkdir()
    return tmp_path


@pytest.mark.parametrize("src,fmt", [("empty.jsonl", "kbvqa"), ("header.csv", "evqa")])
def test_empty_inputs_refused_unless_allowed(case, src, fmt):
    commands = {
        "data stats": ["data", "stats", src, "--from", fmt],
        "audit run": ["audit", "run", src, "--kb", "wiki.json", "--from", fmt, "--out", "a.jsonl"],
        "retrieve": ["retrieve", "--index", "no-index", "--samples", src, "--format", fmt, "--out", "r.jsonl"],
        "answer": ["answer", "--samples", src, "--kb", "wiki.json", "--format", fmt, "--pipeline", "agent", "--kb-images", "img",
                   "--out", "p.jsonl"],
        "augment": ["augment", src, "--images", "img", "--from", fmt, "--out", "aug"],
    }
    for name, args in commands.items():
        res = _invoke(args)
        assert res.exit_code in (1, 2), (name, res.exit_code, res.output)
        assert "no samples in the input" in res.output and "--allow-empty" in res.output, (name, res.output)
        assert src in res.output, (name, res.output)  # the file is named
        assert "Traceback" not in res.output
    ok = _invoke(["data", "stats", src, "--from", fmt, "--allow-empty", "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["total"] == 0
    audited = _invoke(["audit", "run", src, "--kb", "wiki.json", "--from", fmt, "--out", "a.jsonl", "--allow-empty",
                       "--json"])
    assert audited.exit_code == 0, audited.output


def test_augment_total_failure_exits_3_with_reasons(case):
    """Every anchor's photograph is missing: no composite can be made, so the job exits 3 and says why."""
    rows = [{"id": f"s{i}", "question": f"What is the depth of this {'bird' if i < 3 else 'lake'}?",
             "answers": [{"text": str(i)}], "images": [f"{i}.jpg"],
             "entity": {"url": f"https://en.wikipedia.org/wiki/E{i}"}} for i in range(6)]
    Path("in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = _invoke(["augment", "in.jsonl", "--images", "img", "--out", "aug", "--variants", "intra,inter",
                   "--height", "32", "--workers", "1", "--min-entities", "3"])
    assert res.exit_code == 3, res.output
    assert "most common reasons:" in res.output and "3 x intra: no distractor" in res.output, res.output
    assert "journal" not in res.output  # augment has no journal: the hint is its own


def test_augment_partial_success_exits_0(case):
    """One photograph present among six: that anchor is still excluded or failed, the others too, but a
    run where some composites were made is not a total failure."""
    from skimage import data

    photos = [data.coffee(), data.chelsea(), data.rocket(), data.astronaut(), data.colorwheel(), data.camera()]
    rows = []
    for i, arr in enumerate(photos):
        Image.fromarray(arr).convert("RGB").save(f"img/{i}.jpg")
        rows.append({"id": f"s{i}", "question": f"What is the depth of this {'bird' if i < 3 else 'lake'}?",
                     "answers": [{"text": str(i)}], "images": [f"{i}.jpg"],
                     "entity": {"url": f"https://en.wikipedia.org/wiki/E{i}"}})
    Path("in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    res = _invoke(["augment", "in.jsonl", "--images", "img", "--out", "aug", "--variants", "intra,inter",
                   "--height", "32", "--workers", "1", "--min-entities", "3", "--json"])
    assert res.exit_code == 0, res.output


def test_answer_eval_string_refused_by_reader_and_scorer(case):
    ref = {"data_id": "oven_1", "image_id": "oven_1", "question": "Which city?", "answer": ["Paris"],
           "answer_eval": "Paris", "data_split": "val_unseen_question", "question_type": "String"}
    Path("ref.jsonl").write_text(json.dumps(ref) + "\n", encoding="utf-8")
    Path("pred.jsonl").write_text(json.dumps({"data_id": "oven_1", "prediction": "P"}) + "\n", encoding="utf-8")
    converted = _invoke(["data", "convert", "ref.jsonl", "o.jsonl", "--from", "infoseek", "--to", "kbvqa"])
    scored = _invoke(["score", "infoseek", "-p", "pred.jsonl", "-r", "ref.jsonl"])
    for res in (converted, scored):
        assert res.exit_code != 0, res.output
        assert "answer_eval" in res.output and 'is the string "Paris"' in res.output, res.output
        assert "ref.jsonl" in res.output


def test_top_reasons_groups_alike_reasons():
    got = top_reasons(["FileNotFoundError: no image 'img/a.jpg'", "FileNotFoundError: no image 'img/b.jpg'",
                       "timeout after 30 s", "timeout after 12 s", "other"], n=2)
    assert got == [("FileNotFoundError: no image 'img/a.jpg'", 2), ("timeout after 30 s", 2)]


def test_image_ablation_all_generations_invalid_exits_3(case):
    """Every probe generation comes back as prose, not the JSON contract: nothing was measured, the
    study exits 3 and names the reason."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fake_llm_server import FakeLLMServer, Reply

    Path("images").mkdir()
    rows = []
    for i in range(3):
        Image.new("RGB", (32, 24), (60 * i, 90, 200 - 50 * i)).save(f"images/{i}.png")
        rows.append({"id": f"r{i}", "images": [], "question": f"question {i}", "answer": "a",
                     "intent": "Identification", "category": "C",
                     "reference": {"text": f"Passage {i}.\n<image>{{\"candidate_images\": 1}}</image>\nMore.",
                                   "images": [{"path": f"images/{i}.png"}]}})
    Path("refs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with FakeLLMServer(handler=lambda req: Reply(content="Sure! Here are some probe questions about it.")) as srv:
        res = _invoke(["study", "image-ablation", "-r", "refs.jsonl", "--out", "abl", "--llm", srv.base_url,
                       "--model", "m", "--resamples", "50"])
    assert res.exit_code == 3, res.output
    assert "3 probe generation(s) did not end ok: invalid 3" in res.output
    assert "most common reasons:" in res.output and "3 x " in res.output


# --- the judges and the studies that call one (issue 34 item 2) ------------------------------------

def _judge_inputs(n: int = 4) -> list[str]:
    """n references and a prediction for each, in the current folder; the `score judge` arguments."""
    Path("refs.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "question": f"Which city {i}?",
                                                      "answers": [{"text": f"City{i}"}]}) + "\n" for i in range(n)),
                                  encoding="utf-8")
    Path("preds.jsonl").write_text("".join(json.dumps({"data_id": f"q{i}", "prediction": f"Town{i}"}) + "\n"
                                           for i in range(n)), encoding="utf-8")
    return ["score", "judge", "-p", "preds.jsonl", "-r", "refs.jsonl", "--judge-model", "j", "--max-retries", "1",
            "--connect-timeout", "0.5", "--timeout", "5"]


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_judge_against_a_closed_port_exits_3_with_reasons_and_counts_the_tries(case):
    args = _judge_inputs(3)
    res = _invoke(args + ["--judge-base-url", f"http://127.0.0.1:{_closed_port()}/v1", "--json"])
    assert res.exit_code == 3, res.output
    assert "3 verdict(s) did not end ok: error 3" in res.stderr, res.stderr
    assert "most common reasons:" in res.stderr and "3 x JudgeCallError: connection error" in res.stderr, res.stderr
    run = json.loads(res.stdout)["run"]
    assert run["error"] == 3 and run["calls"] == 6  # two tries each, though none connected


def test_judge_partial_failure_exits_4_under_fail_on_error_else_0(case):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fake_llm_server import FakeLLMServer, Reply, ok, server_error

    def judge(req: dict) -> Reply:  # the judge fails every call about q1, grades the others
        text = json.dumps(req["messages"])
        if "Which city 1?" in text:
            return server_error(500)
        return ok(json.dumps({"label": "incorrect", "rationale": "scripted"}))

    args = _judge_inputs(4)
    with FakeLLMServer(handler=judge) as srv:
        strict = _invoke(["--fail-on-error", *args, "--judge-base-url", srv.base_url])
        assert strict.exit_code == 4, strict.output
        assert "1 verdict(s) did not end ok: error 1" in strict.stderr and "HTTP 500" in strict.stderr
        lenient = _invoke([*args, "--judge-base-url", srv.base_url])  # resumed: q1 asked again, fails again
        assert lenient.exit_code == 0, lenient.output
        assert "1 verdict(s) did not end ok: error 1" in lenient.stderr


def test_agent_failures_with_nothing_categorised_exits_3(case):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fake_llm_server import FakeLLMServer, ok

    Path("refs.jsonl").write_text("".join(json.dumps({"id": f"e{i}", "question": f"question {i}",
                                                      "answers": [{"text": "Elmira"}]}) + "\n" for i in range(3)),
                                  encoding="utf-8")
    Path("agent.jsonl").write_text("".join(json.dumps({"id": f"e{i}", "sample_id": f"e{i}", "status": "ok",
                                                       "answer": "Boston.", "trajectory": [],
                                                       "meta": {"termination": "answer"}}) + "\n" for i in range(3)),
                                   encoding="utf-8")
    Path("verdicts.jsonl").write_text("".join(json.dumps({"id": f"e{i}", "status": "ok", "verdict": {
        "label": "incorrect"}}) + "\n" for i in range(3)), encoding="utf-8")
    with FakeLLMServer(default=ok("I think it is a tool problem.")) as srv:  # prose: no category in it
        res = _invoke(["study", "agent-failures", "-p", "agent.jsonl", "-r", "refs.jsonl", "--verdicts",
                       "verdicts.jsonl", "--judge-base-url", srv.base_url, "--judge-model", "j", "--json"])
    assert res.exit_code == 3, res.output
    assert json.loads(res.stdout)["categorised"] == 0
    assert "3 episode(s) to categorise did not end ok: invalid 3" in res.stderr and "3 x " in res.stderr


def test_data_compare_with_every_hops_call_failing_exits_3(case):
    _judge_inputs(3)  # refs.jsonl: three kbvqa samples
    res = _invoke(["data", "compare", "refs.jsonl", "--out", "cmp", "--llm", f"http://127.0.0.1:{_closed_port()}/v1",
                   "--model", "m", "--max-retries", "0", "--json"])
    assert res.exit_code == 3, res.output
    assert "3 hop estimate(s) did not end ok: error 3" in res.stderr and "connection error" in res.stderr, res.stderr
    assert json.loads(res.stdout)["benchmarks"][0]["hops"]  # the table is still written, its counts say why


def test_ivr12_with_its_judge_unreachable_exits_3(case):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_ivr12 import _item_files

    preds, samples = _item_files(case, ["q1", "q2"], with_image=set())
    res = _invoke(["score", "ivr12", "-p", str(preds), "-s", str(samples), "--out", "v.jsonl", "--judge-base-url",
                   f"http://127.0.0.1:{_closed_port()}/v1", "--judge-model", "m", "--max-retries", "0", "--json"])
    assert res.exit_code == 3, res.output
    assert "2 item(s) did not end ok: error 2" in res.stderr and "connection error" in res.stderr, res.stderr
    assert json.loads(res.stdout)["run"]["calls"] > 0
