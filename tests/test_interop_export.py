"""`kbvqa export inspect | lmms-eval | vlmevalkit` (issue 35, items 2 and 4): each exported task run or
read back offline, asserting ids aligned, predictions equal and kbvqa's scores equal to the harness's.
inspect_ai runs in-process with its mock model, scripted as an imperfect one (wrong answers, an empty
answer, a grader that replies out of contract or fails); lmms-eval is not installed, so its utils.py is
imported alone and driven the way lmms-eval calls it."""

from __future__ import annotations

import base64
import csv
import importlib.util
import json
import math
from pathlib import Path

import pytest

from kbvqa.evaluate.infoseek import score_official, score_strict
from kbvqa.evaluate.io import PredictionRecord, load_infoseek_references
from kbvqa.pipelines.export import ExportError, export



@pytest.fixture(scope="module")
def bench(demo_copy, tmp_path_factory):
    """The demo's bench folder: samples.jsonl (InfoSeek-style, real photographs) and community.jsonl
    (NoteVQA layout)."""
    out, _ = demo_copy(tmp_path_factory.mktemp("interop") / "demo")
    return out / "bench"


def _answer_for(rec: dict, i: int) -> str:
    """The scripted model: right on even rows, wrong on odd ones."""
    return rec["answers"][0] if i % 2 == 0 else "no idea, maybe Atlantis"


def _mock(reply):
    """A mockllm model whose every call is `reply(messages)`; usage is set so the mock never counts
    tokens with tiktoken (whose file it would download)."""
    pytest.importorskip("inspect_ai")
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    def call(messages, tools, tool_choice, config):
        out = ModelOutput.from_content(model="mockllm", content=reply(messages))
        out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
        return out

    return get_model("mockllm/model", custom_outputs=call)


def _text(messages) -> str:
    return "\n".join(m.text for m in messages)


def _eval(out: Path, monkeypatch, model, **roles):
    """inspect's eval of DIR/task.py, run from DIR (an absolute task path trips inspect 0.3.285), its
    log read back from disk."""
    inspect_ai = pytest.importorskip("inspect_ai")  # the interop extra
    from inspect_ai.log import read_eval_log

    monkeypatch.chdir(out)
    monkeypatch.setenv("INSPECT_LOG_DIR", str(out / "logs"))
    logs = inspect_ai.eval("task.py", model=model, model_roles=roles or None, display="none",
                           log_dir=str(out / "logs"))
    assert logs[0].status == "success", logs[0].error
    return read_eval_log(logs[0].location)


def _metric(log, name: str) -> float:
    return log.results.scores[0].metrics[name].value


def test_inspect_infoseek_round_trip_equals_kbvqa_official(bench, tmp_path, monkeypatch):
    out = tmp_path / "inspect"
    res = export("inspect", bench / "samples.jsonl", out, limit=8)
    assert res.scorer == "infoseek" and (out / "task.py").exists()
    recs = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert all((out / p).is_file() for r in recs for p in r["images"])
    scripted = {r["question"]: _answer_for(r, i) for i, r in enumerate(recs)}
    model = _mock(lambda msgs: scripted[next(c.text for c in msgs[-1].content if c.type == "text")])
    log = _eval(out, monkeypatch, model)

    assert sorted(s.id for s in log.samples) == sorted(r["id"] for r in recs)  # ids aligned
    first = log.samples[0].input[0].content
    assert [c.type for c in first] == ["image", "text"]  # the query image, then the question
    preds = {s.id: s.output.completion for s in log.samples}
    assert preds == {r["id"]: scripted[r["question"]] for r in recs}  # predictions equal
    refs = load_infoseek_references(out / "samples.jsonl", keep_raw=False)
    records = [PredictionRecord(k, v, i) for i, (k, v) in enumerate(preds.items())]
    kb = {it["data_id"]: it["correct"] for it in score_strict(records, refs, per_item=True, time_leniency=False).items}
    got = {s.id: s.scores["kbvqa_infoseek"].value for s in log.samples}
    assert got == {k: ("C" if v else "I") for k, v in kb.items()}  # per-item scores equal
    assert 0 < sum(kb.values()) < len(kb)
    assert _metric(log, "accuracy") == pytest.approx(sum(kb.values()) / len(kb))
    assert _metric(log, "infoseek_official_final") == score_official(records, refs).summary["final_score"]
    assert log.samples[0].scores["kbvqa_infoseek"].metadata["kbvqa_scorer"] == "infoseek-official"


def test_inspect_judge_on_notevqa_leaves_invalid_and_error_unscored(bench, tmp_path, monkeypatch):
    from kbvqa.evaluate.judge import simpleqa_metrics

    out = tmp_path / "judge"
    res = export("inspect", bench / "community.jsonl", out, limit=6)
    assert res.scorer == "judge"
    refs = json.loads((out / "judge_references.json").read_text())
    assert {r["layout"] for r in refs.values()} == {"notevqa"}  # the paragraph rubric, as `score judge` picks it
    ids = sorted(refs)
    # the model under test: answer i is "answer <i>", except one empty answer (not attempted, no grader call)
    answers = {refs[i]["question"]: (f"answer {n}" if n != 5 else "") for n, i in enumerate(ids)}
    model = _mock(lambda msgs: answers[next(c.text for c in msgs[-1].content if c.type == "text")])
    # the grader: correct, incorrect, a reply out of contract (invalid), a failed call (error), correct
    script = {"answer 0": '{"label": "correct", "rationale": "same conclusion"}',
              "answer 1": '{"label": "incorrect", "rationale": "contradicts it"}',
              "answer 2": "Verdict: CORRECT",  # not the JSON object
              "answer 3": None,  # the call fails
              "answer 4": '```json\n{"label": "correct", "rationale": "ok"}\n```'}

    def grade(msgs):
        key = next(k for k in script if k in _text(msgs))  # the graded answer is in the judge's prompt
        if script[key] is None:
            raise RuntimeError("grader unavailable (scripted)")
        return script[key]

    log = _eval(out, monkeypatch, model, grader=_mock(grade))
    assert sorted(s.id for s in log.samples) == ids
    by_answer = {s.output.completion: s.scores["kbvqa_judge"] for s in log.samples}
    assert by_answer["answer 0"].value == "C" and by_answer["answer 1"].value == "I"
    assert by_answer[""].value == "N" and by_answer[""].metadata["label"] == "not_attempted"
    for a, status in (("answer 2", "invalid"), ("answer 3", "error")):
        sc = by_answer[a]
        assert isinstance(sc.value, float) and math.isnan(sc.value), sc.value  # unscored, never INCORRECT
        assert sc.metadata["kbvqa_status"] == status and sc.reason == "grader_failed"
    labels = [sc.metadata["label"] for sc in by_answer.values()]
    kb = simpleqa_metrics(labels)
    assert (kb["n_invalid"], kb["n_error"], kb["n_graded"]) == (1, 1, 4)
    assert _metric(log, "accuracy") == pytest.approx(kb["accuracy_graded"])  # 2 of 4 graded
    assert by_answer["answer 0"].metadata["rubric"]["gold"] == "paragraph"


def test_inspect_evqa_export_of_an_evqa_split_scores_as_kbvqa_exact_match(bench, tmp_path, monkeypatch):
    from kbvqa.evaluate.evqa import load_evqa_references, score_evqa

    lines = [{"id": f"ev_{i}", "question": q, "answers": a, "question_type": t, "images": ["images/query_astronaut.jpg"]}
             for i, (q, a, t) in enumerate([
                 ("Where was she born?", ["Elmira"], "templated"),
                 ("Which two shuttles did she command?",
                  [{"text": "Columbia and Discovery", "parts": ["Columbia", "Discovery"]}], "multi_answer"),
                 ("Which service did she serve in?", ["US Air Force"], "automatic"),
                 ("Her first shuttle flight's mission?", ["STS-63"], "2_hop")])]
    src = tmp_path / "evqa.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "evqa"
    assert export("inspect", src, out, images=bench).scorer == "evqa"  # the image root is the bench folder
    replies = {"Where was she born?": "Elmira, New York", "Which two shuttles did she command?": "Discovery, Columbia",
               "Which service did she serve in?": "the US Air Force", "Her first shuttle flight's mission?": "STS-64"}
    log = _eval(out, monkeypatch, _mock(lambda msgs: replies[msgs[-1].content[-1].text]))
    preds = [PredictionRecord(s.id, s.output.completion, i) for i, s in enumerate(log.samples)]
    assert sorted(p.data_id for p in preds) == [x["id"] for x in lines]
    res = score_evqa(preds, load_evqa_references(out / "samples.jsonl"), per_item=True)
    kb = {it["data_id"]: "C" if it["correct"] else "I" for it in res.items}
    assert {s.id: s.scores["kbvqa_evqa"].value for s in log.samples} == kb
    assert set(kb.values()) == {"C", "I"}
    assert _metric(log, "accuracy") == pytest.approx(res.summary["accuracy"] / 100)


def _load_utils(folder: Path):
    spec = importlib.util.spec_from_file_location("kbvqa_exported_utils", folder / "utils.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def lmms_task(bench, tmp_path):
    """An lmms-eval export of 8 demo samples: (folder, its utils.py imported alone, ExportResult)."""
    out = tmp_path / "lmms"
    res = export("lmms-eval", bench / "samples.jsonl", out, limit=8, name="demo")
    return out, _load_utils(out), res


def test_lmms_eval_yaml_names_local_docs_and_functions_utils_has(lmms_task):
    yaml = pytest.importorskip("yaml")
    out, utils, _ = lmms_task

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: ("function", loader.construct_scalar(node)))
    task = yaml.load((out / "kbvqa_demo.yaml").read_text(), Loader=Loader)
    assert task["task"] == "kbvqa_demo" and task["dataset_path"] == "json" and task["test_split"] == "test"
    assert Path(task["dataset_kwargs"]["data_files"]["test"]) == out / "docs.jsonl"  # local, no hub download
    named = [v[1] for v in task.values() if isinstance(v, tuple)] + [m["aggregation"][1] for m in task["metric_list"]]
    assert len(named) == 7 and all(callable(getattr(utils, n.split(".", 1)[1])) for n in named)
    assert [m["metric"] for m in task["metric_list"]] == ["kbvqa_accuracy", "kbvqa_unscored", "kbvqa_infoseek_final"]


def test_lmms_eval_utils_imported_alone_scores_as_kbvqa(bench, lmms_task):
    from PIL import Image

    out, utils, res = lmms_task
    metrics = {"kbvqa_accuracy", "kbvqa_unscored", "kbvqa_infoseek_final"}

    docs = [json.loads(x) for x in (out / "docs.jsonl").read_text().splitlines()]
    src = {json.loads(x)["id"]: json.loads(x) for x in (bench / "samples.jsonl").read_text().splitlines()}
    rows, records = [], []
    for i, doc in enumerate(docs):
        [img] = utils.kbvqa_doc_to_visual(doc)
        with Image.open(bench / src[doc["id"]]["images"][0]) as orig:
            assert img.size == orig.size and img.mode == "RGB"
        assert utils.kbvqa_doc_to_text(doc, {"pre_prompt": "Q: ", "post_prompt": ""}) == "Q: " + doc["question"]
        assert utils.kbvqa_doc_to_target(doc) == src[doc["id"]]["answers"][0]
        pred = _answer_for(doc, i)
        got = utils.kbvqa_process_results(doc, [pred])
        assert set(got) == metrics
        rows.append(got["kbvqa_accuracy"])
        records.append(PredictionRecord(doc["id"], pred, i))
    refs = load_infoseek_references(out / "samples.jsonl", keep_raw=False)
    kb = {it["data_id"]: it["correct"] for it in score_strict(records, refs, per_item=True, time_leniency=False).items}
    assert [r["id"] for r in rows] == [d["id"] for d in docs] and {r["id"]: r["correct"] for r in rows} == kb
    assert [r["prediction"] for r in rows] == [p.prediction for p in records]
    assert utils.kbvqa_aggregate_accuracy(rows) == pytest.approx(sum(kb.values()) / len(kb))
    assert utils.kbvqa_aggregate_count(rows) == 0
    assert utils.kbvqa_aggregate_infoseek_final(rows) == score_official(records, refs).summary["final_score"]
    assert res.scorer == "infoseek"


def test_lmms_eval_judged_set_is_left_for_kbvqa_judge(bench, tmp_path):
    out = tmp_path / "lmms-judge"
    export("lmms-eval", bench / "community.jsonl", out, limit=3)
    utils = _load_utils(out)
    doc = json.loads((out / "docs.jsonl").read_text().splitlines()[0])
    row = utils.kbvqa_process_results(doc, ["She is Eileen Collins."])["kbvqa_answered"]
    assert row == {"id": doc["id"], "prediction": "She is Eileen Collins.", "status": "needs_judge", "correct": None}
    assert utils.kbvqa_aggregate_answered([row, {**row, "prediction": ""}]) == 1


def test_vlmevalkit_tsv_decodes_back_to_the_same_images(bench, tmp_path):
    out = tmp_path / "vlm"
    export("vlmevalkit", bench / "samples.jsonl", out, limit=5, name="demo")
    src = [json.loads(x) for x in (bench / "samples.jsonl").read_text().splitlines()][:5]
    with (out / "KBVQA_demo.tsv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    assert [r["index"] for r in rows] == [s["id"] for s in src] == [r["kbvqa_id"] for r in rows]
    for r, s in zip(rows, src):
        assert base64.b64decode(r["image"]) == (bench / s["images"][0]).read_bytes()
        assert (r["question"], r["answer"], json.loads(r["answers"])) == (s["question"], s["answers"][0], s["answers"])
    settings = json.loads((out / "kbvqa_export.json").read_text())
    assert settings["data"] == "KBVQA_demo" and settings["index"] == "kbvqa id"
    # "InfoSeek as repaired": the audit's fixed split exports the same way (its images under the bench folder)
    fixed = bench.parent / "audit" / "fixed.jsonl"
    res = export("vlmevalkit", fixed, tmp_path / "fixed", images=bench, name="demo fixed")
    n_fixed = sum(1 for x in fixed.read_text().splitlines() if x.strip())
    assert res.n_samples == n_fixed and (tmp_path / "fixed" / "KBVQA_demo_fixed.tsv").exists()
    # and an augmented split (composite images named relative to its own folder)
    aug = bench.parent / "augment" / "samples.jsonl"
    export("vlmevalkit", aug, tmp_path / "aug", limit=3, name="aug")
    first = json.loads(aug.read_text().splitlines()[0])
    with (tmp_path / "aug" / "KBVQA_aug.tsv").open(encoding="utf-8", newline="") as fh:
        row = next(csv.DictReader(fh, delimiter="\t"))
    assert row["kbvqa_id"] == first["id"]
    assert base64.b64decode(row["image"]) == (aug.parent / first["images"][0]).read_bytes()


def test_harness_code_imports_kbvqa_evaluate_only():
    """ARCHITECTURE: the code an exported task runs inside a harness imports kbvqa's scorers from
    kbvqa.evaluate and nothing above it."""
    import ast

    import kbvqa.pipelines.export as pkg

    for name in ("_inspect_task.py", "_lmms_utils.py"):
        tree = ast.parse((Path(pkg.__file__).parent / name).read_text())
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        ours = {m for m in mods if m and m.split(".")[0] == "kbvqa"}
        assert ours and all(m.startswith("kbvqa.evaluate") for m in ours), (name, ours)


def test_vlmevalkit_index_is_the_row_when_ids_would_not_survive(tmp_path):
    src = tmp_path / "s.jsonl"
    src.write_text("".join(json.dumps({"id": i, "question": "q?", "answers": ["a"], "answer_type": "String"}) + "\n"
                           for i in ("007", "8")))
    export("vlmevalkit", src, tmp_path / "v", name="s")
    with (tmp_path / "v" / "KBVQA_s.tsv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    assert [(r["index"], r["kbvqa_id"], r["image"]) for r in rows] == [("0", "007", ""), ("1", "8", "")]


def test_export_refuses_what_the_scorer_would_refuse(bench, tmp_path):
    from typer.testing import CliRunner

    from kbvqa.cli.app import build_app

    with pytest.raises(ExportError, match="infoseek scorer refuses"):
        export("inspect", bench / "community.jsonl", tmp_path / "x", scorer="infoseek")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "a", "question": "q?", "answers": ["x"], "answer_type": "String",
                               "images": ["missing.jpg"]}) + "\n")
    r = CliRunner().invoke(build_app("export"), ["export", "inspect", str(bad), "--out", str(tmp_path / "y")])
    assert r.exit_code == 1 and "sample 'a'" in r.output and "missing.jpg" in r.output
