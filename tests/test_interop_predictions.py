"""Harness prediction files in (`kbvqa score convert-predictions --method lmms-eval | vlmevalkit |
inspect`), on the demo's audited InfoSeek-layout split and its NoteVQA-layout community set: each
harness file is built from kbvqa predictions in the harness's own layout (the inspect logs by
inspect_ai's own log writer), converted back, and checked for aligned ids, equal predictions and
equal scores (`score infoseek`, `score judge` against a scripted, imperfect judge on 127.0.0.1)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.score import app as score_app
from kbvqa.evaluate.io import load_predictions
from kbvqa.evaluate.methods import METHODS, convert, reference_ids

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply, ok  # noqa: E402

runner = CliRunner()


@pytest.fixture(scope="module")
def demo(demo_copy, tmp_path_factory):
    out, _ = demo_copy(tmp_path_factory.mktemp("interop") / "demo")
    return out


def _jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _preds(path: Path) -> dict[str, str | None]:
    return {p.data_id: p.prediction for p in load_predictions(path)}


def _convert(tmp: Path, src: Path, method: str, refs: Path, *extra: str) -> tuple[dict, Path]:
    out = tmp / f"{src.name}.{method}.jsonl"
    r = runner.invoke(score_app, ["convert-predictions", str(src), "--method", method, "-o", str(out), "-r", str(refs),
                                  "--json", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout), out


def _infoseek(preds: Path, refs: Path) -> dict:
    r = runner.invoke(score_app, ["infoseek", "-p", str(preds), "-r", str(refs), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _lmms_lines(ids: list[str], answers: dict[str, str | None], *, old: bool = False) -> list[dict]:
    """--log_samples lines as lmms-eval >= 0.4 writes them (doc_id, filtered_resps, target, doc_hash, input,
    a metric key; no doc), or as 0.3 did (doc and arguments kept, resps as [[raw]])."""
    rows = []
    for i, did in enumerate(ids):
        a = answers.get(did)
        row = {"doc_id": i, "target": "x", "filtered_resps": [a] if a is not None else [], "doc_hash": f"h{i}",
               "input": "question", "exact_match": 0.0}
        if old:
            row.update(doc={"data_id": did, "question": "q"}, arguments=[["q", {}]], resps=[[a]])
        rows.append(row)
    random.Random(7).shuffle(rows)  # several processes: lines not in doc_id order
    return rows


# ------------------------------------------------------------------------------------------------ lmms-eval

def test_lmms_eval_samples_round_trip_on_the_audited_split(demo, tmp_path):
    refs = demo / "audit" / "fixed.jsonl"
    ids = reference_ids(refs)
    src = _preds(demo / "answers" / "predictions_fixed.jsonl")
    plain = _jsonl(tmp_path / "plain.jsonl", [{"data_id": k, "prediction": v} for k, v in src.items()])
    for old in (False, True):
        f = _jsonl(tmp_path / f"20261202_samples_kbvqa_fixed{'_v03' if old else ''}.jsonl", _lmms_lines(ids, src, old=old))
        summary, out = _convert(tmp_path, f, "lmms-eval", refs)
        a = summary["alignment"]
        assert a["clean"] and a["n_output"] == len(ids) == 32
        assert set(summary["parse_rules"]) == {"id:doc.data_id;key:filtered_resps[0]" if old else
                                               "id:doc_id->references;key:filtered_resps[0]"}
        assert _preds(out) == src  # every prediction back under its own id
        assert _infoseek(out, refs) == _infoseek(plain, refs)
    assert _by_type(out, refs) == _by_type(plain, refs)  # a study reads the converted file unchanged


def _by_type(preds: Path, refs: Path) -> dict:
    from kbvqa.cli.study import app as study_app

    r = runner.invoke(study_app, ["by-type", "-p", str(preds), "-r", str(refs), "--scorer", "infoseek-strict",
                                  "--resamples", "50", "--name", "m", "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_lmms_eval_doc_id_out_of_range_is_counted_and_named(demo, tmp_path):
    refs = demo / "audit" / "fixed.jsonl"
    ids = reference_ids(refs)
    lines = _lmms_lines(ids[:5], {d: "Elmira" for d in ids})
    lines.append({"doc_id": 99, "filtered_resps": [["nested"]], "target": "x"})
    f = _jsonl(tmp_path / "samples_x.jsonl", lines)
    out = tmp_path / "o.jsonl"
    r = runner.invoke(score_app, ["convert-predictions", str(f), "--method", "lmms-eval", "-o", str(out), "-r",
                                  str(refs), "--json"])
    assert r.exit_code == 0, r.output  # as for the other methods: unknown ids are dropped and counted
    a = json.loads(r.stdout)["alignment"]
    assert a["n_unknown"] == 1 and a["unknown_ids"] == ["doc_id=99"] and a["n_missing"] == 32 - 5
    assert "1 doc_id value(s) outside the 32 reference rows (dropped as unknown ids): 99" in r.stderr  # named
    assert len(out.read_text().splitlines()) == 5
    # a duplicate doc_id is a duplicate id: refused unless a policy is chosen, like every method
    f2 = _jsonl(tmp_path / "samples_dup.jsonl", lines[:5] + [dict(lines[0])])
    r = runner.invoke(score_app, ["convert-predictions", str(f2), "--method", "lmms-eval", "-o", str(out), "-r",
                                  str(refs)])
    assert r.exit_code != 0 and "more than once" in r.output
    # without references a bare doc_id cannot be placed: an error that says what to pass
    r = runner.invoke(score_app, ["convert-predictions", str(f), "--method", "lmms-eval", "-o", str(out)])
    assert r.exit_code != 0 and "-r" in r.output


# ------------------------------------------------------------------------------------------------ VLMEvalKit

def _vlmeval_rows(ids, answers, questions):
    return [{"index": i, "question": questions[d], "answer": "x", "prediction": answers[d]} for i, d in enumerate(ids)]


def test_vlmevalkit_tsv_json_xlsx_round_trip_on_the_notevqa_set(demo, tmp_path):
    import csv

    refs = demo / "bench" / "community.jsonl"
    ids = reference_ids(refs)
    questions = {json.loads(x)["id"]: json.loads(x)["question"] for x in refs.read_text().splitlines()}
    src = _preds(demo / "agent" / "predictions.jsonl")
    src[ids[3]] = None  # one empty prediction cell: no answer, counted
    rows = _vlmeval_rows(ids, src, questions)
    tsv = tmp_path / "mymodel_KBVQA_Community.tsv"
    with open(tsv, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]), delimiter="\t")
        w.writeheader()
        w.writerows([{**r, "prediction": r["prediction"] or ""} for r in rows])
    js = tmp_path / "mymodel_KBVQA_Community.json"
    js.write_text(json.dumps({c: {str(i): r[c] for i, r in enumerate(rows)} for c in rows[0]}))  # pandas' layout
    files = [tsv, js]
    openpyxl = pytest.importorskip("openpyxl")
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.append(list(rows[0]))
    for r in rows:
        ws.append(list(r.values()))
    xlsx = tmp_path / "mymodel_KBVQA_Community.xlsx"
    wb.save(xlsx)
    files.append(xlsx)
    expect = dict(src, **{ids[3]: ""})  # a TSV cell cannot say null: an empty answer
    for f in files:
        summary, out = _convert(tmp_path, f, "vlmevalkit", refs)
        assert summary["alignment"]["clean"] and summary["alignment"]["n_output"] == 15
        assert _preds(out) == (expect if f is tsv else src), f.name
    # indices that are reference ids are taken as the ids; row numbers past the references are counted, named
    by_id = tmp_path / "ids.json"
    by_id.write_text(json.dumps([{"index": d, "prediction": "p"} for d in ids[:2]]))
    summary, out = _convert(tmp_path, by_id, "vlmevalkit", refs)
    assert set(summary["parse_rules"]) == {"id:index;key:prediction"} and list(_preds(out)) == ids[:2]
    by_row = tmp_path / "rows.json"
    by_row.write_text(json.dumps([{"index": i, "prediction": "p"} for i in (0, 1, 40)]))
    summary, out = _convert(tmp_path, by_row, "vlmevalkit", refs)
    a = summary["alignment"]
    assert a["unknown_ids"] == ["index=40"] and a["n_output"] == 2 and list(_preds(out)) == ids[:2]
    assert any(w.endswith("ids): 40") for w in summary["warnings"])
    # kbvqa export vlmevalkit's kbvqa_id column, carried into the prediction file, wins over the index
    by_col = tmp_path / "cols.json"
    by_col.write_text(json.dumps([{"index": 9 - i, "kbvqa_id": d, "prediction": d.upper()} for i, d in enumerate(ids)]))
    summary, out = _convert(tmp_path, by_col, "vlmevalkit", refs)
    assert summary["alignment"]["clean"] and _preds(out) == {d: d.upper() for d in ids}


# ------------------------------------------------------------------------------------------------ inspect_ai

def _inspect_log(samples_in: list[tuple[str, str | None, list[dict] | None]], path: Path) -> Path:
    """A real inspect_ai log (its own classes and writer): each (id, completion or None for an errored
    sample, trajectory of kbvqa steps to replay as messages or None)."""
    from inspect_ai.log import EvalConfig, EvalDataset, EvalError, EvalLog, EvalSample, EvalSpec, write_eval_log
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser, ModelOutput
    from inspect_ai.tool import ToolCall

    samples = []
    for did, completion, traj in samples_in:
        msgs = [ChatMessageUser(content=f"question for {did}")]
        for k, s in enumerate(traj or []):
            if s.get("tool"):
                msgs.append(ChatMessageAssistant(content=s.get("thought") or "", tool_calls=[
                    ToolCall(id=f"c{k}", function=s["tool"], arguments=s.get("arguments") or {})]))
                msgs.append(ChatMessageTool(content=str(s.get("observation") or "tool output"), tool_call_id=f"c{k}",
                                            function=s["tool"]))
        if completion is not None:
            msgs.append(ChatMessageAssistant(content=completion))
            samples.append(EvalSample(id=did, epoch=1, input=f"question for {did}", target="x", messages=msgs,
                                      output=ModelOutput.from_content("mockllm/model", completion)))
        else:
            samples.append(EvalSample(id=did, epoch=1, input=f"question for {did}", target="x", messages=msgs,
                                      output=ModelOutput(model="mockllm/model"),
                                      error=EvalError(message="RateLimitError: 429", traceback="",
                                                      traceback_ansi="")))
    spec = EvalSpec(created="2026-12-02T00:00:00+00:00", task="kbvqa_demo", dataset=EvalDataset(name="demo"),
                    model="mockllm/model", config=EvalConfig())
    write_eval_log(EvalLog(status="success", eval=spec, samples=samples), str(path))
    return path


class Judge:
    """A scripted, imperfect judge: correct when the graded answer contains a reference answer, except
    that one answer always gets HTTP 500 (an error, never a label) and another gets prose (invalid)."""

    def __init__(self, golds: set[str], fail_on: str, prose_on: str):
        self.golds, self.fail_on, self.prose_on = golds, fail_on, prose_on

    def __call__(self, req: dict) -> Reply:
        ans = req["messages"][0]["content"].split("Answer to grade:")[1].split("\n")[0].strip()
        if ans == self.fail_on:
            return Reply(status=500, headers={"Retry-After": "0"}, error="upstream failure")
        if ans == self.prose_on:
            return ok("I think so.")
        good = any(g.lower() in ans.lower() for g in self.golds if g)
        return ok(json.dumps({"label": "correct" if good else "incorrect", "rationale": "scripted"}))


def _judge(preds: Path, refs: Path, srv) -> dict:
    r = runner.invoke(score_app, ["judge", "-p", str(preds), "-r", str(refs), "--judge-base-url", srv.base_url,
                                  "--judge-model", "fj", "--max-retries", "0", "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    return {k: v for k, v in s.items() if k.startswith("n_") or k.startswith("accuracy")}


def test_inspect_logs_round_trip_with_trajectories_and_errors(demo, tmp_path):
    from kbvqa.report.viewer.discovery import kind_of

    refs = demo / "audit" / "fixed.jsonl"
    ids = reference_ids(refs)
    src = _preds(demo / "answers" / "predictions_fixed.jsonl")
    agent = [json.loads(x) for x in (demo / "agent" / "predictions.jsonl").read_text().splitlines()]
    traj = agent[0]["trajectory"]
    errored = ids[4]
    rows = [(d, None if d == errored else src[d], traj if i % 3 == 0 else None) for i, d in enumerate(ids)]
    plain = _jsonl(tmp_path / "plain.jsonl", [{"data_id": d, "prediction": src[d]} if d != errored else
                                              {"id": d, "sample_id": d, "status": "error", "answer": None}
                                              for d in ids])
    golds = {a for x in refs.read_text().splitlines() for a in json.loads(x)["answers"] if isinstance(a, str)}
    for suffix in (".eval", ".json"):
        log = _inspect_log(rows, tmp_path / f"2026-12-02T00-00-00_kbvqa-demo_abc{suffix}")
        summary, out = _convert(tmp_path, log, "inspect", refs)
        assert summary["alignment"]["clean"] and summary["alignment"]["n_output"] == 32
        assert any("ended in an error" in w for w in summary["warnings"])
        got = _preds(out)
        assert got == {d: (None if d == errored else src[d]) for d in ids}
        assert {p.data_id: p.status for p in load_predictions(out)}[errored] == "error"  # never an answer
        lines = {x["data_id"]: x for x in map(json.loads, out.read_text().splitlines())}
        first = lines[ids[0]]
        steps = first["trajectory"]
        assert [s["tool"] for s in steps if s.get("tool")] == [s["tool"] for s in traj if s.get("tool")]
        assert all(s["status"] == "ok" and s["observation"] for s in steps if s.get("tool"))
        assert steps[-1]["answer"] == src[ids[0]] and first["meta"]["inspect"]["model"] == "mockllm/model"
        assert kind_of([], first) == "agent"  # kbvqa view lists it as an agent episode
        assert _infoseek(out, refs) == _infoseek(plain, refs)
    _viewer_shows(out, ids[0], traj, tmp_path / "view")
    with FakeLLMServer(handler=Judge(golds, fail_on=src[ids[1]], prose_on=src[ids[2]])) as srv:
        converted, direct = _judge(out, refs, srv), _judge(plain, refs, srv)
    assert converted == direct
    assert converted["n_error"] == 1 and converted["n_invalid"] == 1 and converted["n_error_lines"] == 1


def _viewer_shows(converted: Path, rid: str, traj: list[dict], folder: Path) -> None:
    """`kbvqa view` renders a converted inspect sample as an agent episode, each tool call a step."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from kbvqa.cli.view import build_site
    from kbvqa.report.viewer.app import create_app

    folder.mkdir()
    (folder / "inspect.jsonl").write_bytes(converted.read_bytes())
    client = TestClient(create_app(build_site([folder]), warm=False), follow_redirects=False)
    page = client.get(f"/o/inspect/r/{rid}")
    assert page.status_code == 200, page.text[:300]
    tools = [s["tool"] for s in traj if s.get("tool")]
    assert "turn 1" in page.text and all(t in page.text for t in tools)
    assert "termination <span class=\"badge termination\">stop</span>" in page.text


def test_inspect_epochs_are_duplicates_and_a_missing_zstd_is_said(demo, tmp_path, monkeypatch):
    log = _inspect_log([("demo_000", "Elmira", None)], tmp_path / "one.eval")
    from inspect_ai.log import read_eval_log, write_eval_log

    two = read_eval_log(str(log))
    extra = two.samples[0].model_copy(update={"epoch": 2})
    two.samples.append(extra)
    write_eval_log(two, str(tmp_path / "two.eval"))
    with pytest.raises(Exception, match="more than once"):
        convert("inspect", tmp_path / "two.eval")
    res = convert("inspect", tmp_path / "two.eval", duplicates="last")
    assert [p.prediction for p in res.predictions] == ["Elmira"] and res.alignment.duplicates == {"demo_000": 2}
    monkeypatch.setitem(sys.modules, "zstandard", None)  # as if the package were not installed
    with pytest.raises(Exception, match="zstandard"):
        convert("inspect", log)


def test_the_three_harnesses_are_registered_methods():
    assert {"lmms-eval", "vlmevalkit", "inspect"} <= set(METHODS.names())
    h = runner.invoke(score_app, ["convert-predictions", "--help"], env={"COLUMNS": "300"}).output
    assert "lmms-eval" in h and "vlmevalkit" in h and "inspect" in h
