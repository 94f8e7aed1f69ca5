"""IVR-12 rubric judge (seed 001 §3.3): verdict parsing, n/a handling, gated vs ungated means, resume,
several judges and repeats with Krippendorff's α, the self-judging warning, rules mode on the demo's
community set (agent answers and references), the references-vs-outputs comparison, and short-answer
accuracy by category from judge verdicts — against a scripted server on 127.0.0.1."""

from __future__ import annotations

import json
import shutil
import re
import sys
import threading
import tomllib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.evaluate import ivr12 as iv
from kbvqa.evaluate.agreement import krippendorff_alpha, pearson, spearman
from kbvqa.runner import Invalid, read_results

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply, ok  # noqa: E402

runner = CliRunner()
DIMS = {"content": ["accuracy", "completeness", "intent_understanding", "source_fidelity", "conciseness",
                    "usefulness"],
        "presentation": ["formatting", "clarity", "coherence_structure"],
        "image": ["relevance_necessity_placement", "visual_quality", "non_redundancy"],
        "gate": ["addresses_subject"]}


# ------------------------------------------------------------------------------------- agreement


def test_alpha_hand_computed_example():
    units = [(1, 1), (2, 3), (3, 3)]  # worked through in krippendorff_alpha's docstring
    assert krippendorff_alpha(units, "nominal") == pytest.approx(6 / 11)
    assert krippendorff_alpha(units, "ordinal") == pytest.approx(7 / 9)
    assert krippendorff_alpha(units, "interval") == pytest.approx(24 / 29)


def test_alpha_published_example_and_edge_cases():
    # Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability": 4 observers, 12 units, missing values
    n = None
    obs = [[1, 2, 3, 3, 2, 1, 4, 1, 2, n, n, n], [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, n, 3],
           [n, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, n], [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, n]]
    units = list(zip(*obs))
    assert round(krippendorff_alpha(units, "nominal"), 3) == 0.743
    assert round(krippendorff_alpha(units, "ordinal"), 3) == 0.815
    assert round(krippendorff_alpha(units, "interval"), 3) == 0.849
    assert krippendorff_alpha([(3, 3), (3, 3)]) is None  # no variation: undefined, not 1 or 0
    assert krippendorff_alpha([(1,), (2,)]) is None  # nothing pairable
    assert krippendorff_alpha([(1, 1), (5, 5)], "interval") == pytest.approx(1.0)
    with pytest.raises(ValueError, match="metric"):
        krippendorff_alpha(units, "ratio")


def test_correlations():
    assert pearson([1, 2, 3, 4], [2, 4, 6, 8]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [1, 4, 9, 100]) == pytest.approx(1.0)
    assert spearman([1, 2, 2, 3], [3, 2, 2, 1]) == pytest.approx(-1.0)  # ties share their rank
    assert pearson([1, 1, 1], [1, 2, 3]) is None and pearson([1, 2], [1, 2]) is None


# ------------------------------------------------------------------------------ rubric and parsing


def test_packaged_rubric_shape_and_hash(tmp_path):
    rb = iv.load_rubric()
    assert rb.version and "reconstruct" in rb.reconstruction.lower()
    assert {g: [d.key for d in rb.dims(g)] for g in iv.GROUPS} == {g: DIMS[g] for g in iv.GROUPS}
    assert all([k for k, _ in d.anchors] == [1, 3, 5] for d in rb.dimensions)
    assert [(g.key, g.judged_by) for g in rb.gates] == [("addresses_subject", "model"), ("tags_resolve", "rules")]
    edited = tmp_path / "mine.toml"
    edited.write_text(Path(rb.path if Path(rb.path).is_file() else _packaged()).read_text(encoding="utf-8")
                      .replace("Every claim agrees", "Every single claim agrees"), encoding="utf-8")
    mine = iv.load_rubric(edited)
    assert mine.sha256 != rb.sha256 and mine.tag != rb.tag  # an edit changes the recorded hash
    from kbvqa.models.prompts.ivr12 import CONTENT
    assert rb.prompt_version(CONTENT) != mine.prompt_version(CONTENT)
    assert "Every single claim agrees" in mine.criteria("content")


def _packaged() -> Path:
    import kbvqa.evaluate

    return Path(kbvqa.evaluate.__file__).parent / "rubrics" / "ivr12.toml"


def test_bad_rubric_names_the_field(tmp_path):
    text = _packaged().read_text(encoding="utf-8")
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('5 = "Every claim agrees', '4 = "Every claim agrees'), encoding="utf-8")
    with pytest.raises(iv.RubricError, match=r"bad.toml: dimensions\[0\].anchors"):
        iv.load_rubric(bad)
    bad.write_text(text.replace('group = "image"', 'group = "images"', 1), encoding="utf-8")
    with pytest.raises(iv.RubricError, match=r"dimensions\[9\].group"):
        iv.load_rubric(bad)


def _group_reply(group: str, score=3, **override) -> str:
    obj = {k: ({"pass": score} if group == "gate" else {"score": score}) | {"rationale": f"{k} line"}
           for k in DIMS[group]}
    obj.update(override)
    return json.dumps(obj)


def test_parse_verdict_strict():
    keys = DIMS["content"]
    got = iv.parse_verdict(_group_reply("content", 4), keys, what="content verdict")
    assert got["accuracy"] == (4, "accuracy line")
    fenced = "```json\n" + _group_reply("content", 2) + "\n```"  # one fence around the whole reply is fine
    assert iv.parse_verdict(fenced, keys, what="content verdict")["accuracy"][0] == 2
    cases = {
        "The answer is good. " + _group_reply("content"): "not the JSON object",
        "[1, 2]": "a JSON list, not an object",
        _group_reply("content", 7): "score 7 is outside 1-5",
        _group_reply("content", 0): "score 0 is outside 1-5",
        _group_reply("content", 3.5): "score 3.5 is not an integer",
        _group_reply("content", True): "score True is not an integer",
        _group_reply("content", "4"): "score '4' is not an integer",
        json.dumps({k: {"score": 3, "rationale": "x"} for k in keys[:3]}):
            "missing dimension(s) ['source_fidelity', 'conciseness', 'usefulness']",
        _group_reply("content", overall={"score": 3, "rationale": "x"}): "unexpected key(s) ['overall']",
        _group_reply("content", accuracy={"score": 3}): "'accuracy' must be",
        _group_reply("content", accuracy={"score": 3, "rationale": "  "}): "'accuracy' has no rationale",
        _group_reply("content", accuracy={"score": 3, "rationale": "<one line>"}): "a template slot copied",
        "": "not the JSON object",
    }
    for reply, reason in cases.items():
        with pytest.raises(Invalid, match=re.escape(reason)):
            iv.parse_verdict(reply, keys, what="content verdict")
    with pytest.raises(Invalid, match="pass 'yes' is not true or false"):
        iv.parse_verdict(_group_reply("gate", "yes"), DIMS["gate"], what="gate", gate=True)


def test_tag_rendering_and_the_rules_gate(tmp_path):
    prov = {"tags": 3, "valid": 1, "violations": [{"kind": "no_prior_call"}, {"kind": "duplicate_image"}],
            "resolved": [{"query": "Eileen Collins", "idx": 1, "image": "a.jpg", "sha256": "s1"}]}
    answer = ('She is Eileen Collins.\n<image>{"query": "Eileen Collins", "idx": 1}</image>\nAlso '
              '<image>{"query": "nobody", "idx": 2}</image> and <image>{"query": "Eileen Collins", "idx": 1}</image>')
    text, emb, rep = iv.render_agent_answer(answer, prov)
    assert text.count("[Image 1]") == 1 and text.count("[unresolved image]") == 2 and "<image>" not in text
    assert [e["image"] for e in emb] == ["a.jpg"] and iv.tags_gate({"tags": rep})["pass"] is False
    _, _, rep = iv.render_agent_answer("no tags here", None)
    assert iv.tags_gate({"tags": rep})["pass"] is True  # vacuously: nothing to resolve
    _, _, rep = iv.render_agent_answer('x <image>{"query": "q", "idx": 1}</image>', None)
    assert iv.tags_gate({"tags": rep})["pass"] is False and rep["violations"] == [{"kind": "no_provenance"}]
    img = tmp_path / "r1.jpg"
    Image.new("RGB", (200, 150), (10, 20, 30)).save(img)
    good = [{"path": "r1.jpg"}]
    text, emb, rep = iv.render_reference('A.\n<image>{"candidate_images": 1}</image>\nB.', good, tmp_path)
    assert text == "A.\n[Image 1]\nB." and emb[0]["image"] == str(img.resolve()) and iv.tags_gate({"tags": rep})["pass"]
    for tag, kind in (('{"candidate_images": 2}', "idx_out_of_range"), ('{"candidate": 1}', "malformed_tag")):
        _, emb, rep = iv.render_reference(f"A <image>{tag}</image>", good, tmp_path)
        assert not emb and rep["violations"][0]["kind"] == kind
    wrong_hash = [{"path": "r1.jpg", "sha256": "0" * 64}]
    _, _, rep = iv.render_reference('A <image>{"candidate_images": 1}</image>', wrong_hash, tmp_path)
    assert rep["violations"][0]["kind"] == "sha256_mismatch"
    _, _, rep = iv.render_reference('A <image>{"candidate_images": 1}</image>', [{"path": "gone.jpg"}], tmp_path)
    assert rep["violations"][0]["kind"] == "missing_image"
    assert iv.text_length('Two words <image>{"q": 1}</image>') == 2 and iv.text_length("这是猫 cat") == 4


# --------------------------------------------------------------------------- judge against a server


def _photo(path: Path, seed: int, size=(320, 240)) -> str:
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 255, size=(12, 16, 3), dtype=np.uint8)
    Image.fromarray(small).resize(size, Image.Resampling.BICUBIC).save(path, quality=92)
    return str(path)


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _item_files(tmp: Path, ids: list[str], *, with_image: set[str], missing: set[str] = frozenset(),
                producer: str = "agent-model") -> tuple[Path, Path]:
    (tmp / "images").mkdir(exist_ok=True)
    samples, preds = [], []
    for i, q in enumerate(ids):
        _photo(tmp / "images" / f"query_{q}.jpg", 100 + i)
        samples.append({"id": q, "images": [f"images/query_{q}.jpg"], "question": f"[{q}] What is pictured?",
                        "answer": f"thing {q}", "category": "Nature" if i % 2 else "Food", "intent": "Identification"})
        if q in missing:
            continue
        if q in with_image:
            emb = _photo(tmp / "images" / f"emb_{q}.jpg", 500 + i, (480, 360))
            answer = (f'It is thing {q}.\n<image>{{"query": "thing {q}", "idx": 1}}</image>\nMore about it.'
                      + " more" * 3 * i)
            prov = {"tags": 1, "valid": 1, "violations": [],
                    "resolved": [{"query": f"thing {q}", "idx": 1, "image": emb, "sha256": "x"}]}
            preds.append({"id": q, "answer": answer, "images": [emb], "status": "ok",
                          "producer": {"backend": "openai", "model": producer}, "meta": {"provenance": prov}})
        else:
            preds.append({"id": q, "answer": f"It is thing {q}. " + "word " * 30, "status": "ok",
                          "producer": {"backend": "openai", "model": producer},
                          "meta": {"provenance": {"tags": 0, "valid": 0, "violations": [], "resolved": []}}})
    return _write(tmp / "preds.jsonl", preds), _write(tmp / "samples.jsonl", samples)


def _request_info(req: dict) -> tuple[str, str, int, dict]:
    """(item id, group, number of images, the request) from a judge request."""
    content = req["messages"][-1]["content"]
    text = content if isinstance(content, str) else content[0]["text"]
    images = 0 if isinstance(content, str) else sum(1 for p in content if p["type"] == "image_url")
    group = {"CONTENT": "content", "PRESENTATION": "presentation", "IMAGES": "image", "GATE": "gate"}[
        re.match(r"(?:Grade the|Decide a pass/fail) (\w+)", text).group(1)]
    return re.search(r"\[(q\d+)\]", text).group(1), group, images, req


class Script:
    """A scripted judge: per (item, group) a reply; counts the requests per item."""

    def __init__(self, plan: dict[tuple[str, str], Reply], default: dict[str, int]):
        self.plan, self.default = plan, default
        self.asked: Counter[str] = Counter()
        self.calls: list[tuple[str, str, int, dict]] = []
        self.lock = threading.Lock()

    def __call__(self, req: dict) -> Reply:
        item, group, _, _ = info = _request_info(req)
        with self.lock:
            self.asked[item] += 1
            self.calls.append(info)
        if (item, group) in self.plan:
            return self.plan[(item, group)]
        score = self.default.get(item, 3)
        return ok(_group_reply(group, True if group == "gate" else score))


def _run(args: list[str]):
    return runner.invoke(app, ["score", "ivr12", *args])


def test_judge_verdicts_na_gates_invalid_error_and_resume(tmp_path):
    ids = [f"q{i}" for i in range(1, 9)]
    preds, samples = _item_files(tmp_path, ids, with_image={"q1", "q3", "q4", "q5", "q6", "q7"}, missing={"q8"})
    plan = {("q2", "content"): ok(_group_reply("content", 2)),
            ("q2", "presentation"): ok(_group_reply("presentation", 3)),
            ("q1", "content"): ok(_group_reply("content", 4)),
            ("q1", "presentation"): ok(_group_reply("presentation", 5)),
            ("q3", "content"): ok("Overall a solid answer, 4/5."),  # prose: invalid
            ("q4", "presentation"): ok(_group_reply("presentation", 7)),  # out of range: invalid
            ("q5", "image"): ok(json.dumps({k: {"score": 3, "rationale": "r"} for k in DIMS["image"][:2]})),  # missing
            ("q6", "content"): Reply(status=500, headers={"Retry-After": "0"}, error="upstream down"),
            ("q7", "gate"): ok(json.dumps({"addresses_subject": {"pass": False, "rationale": "talks about a dog"}}))}
    script = Script(plan, {"q1": 3, "q7": 5})
    out = tmp_path / "v.jsonl"
    args = ["-p", str(preds), "-s", str(samples), "--judge-model", "judge-m", "--out", str(out), "--json",
            "--require-complete"]
    with FakeLLMServer(handler=script) as srv:
        res = _run([*args, "--judge-base-url", srv.base_url])
        port = srv._httpd.server_address[1]  # the resume below asks the same judge at the same URL
    assert res.exit_code == 1, res.output  # --require-complete: invalid and error items
    assert "--require-complete: 3 invalid and 1 error" in res.stderr
    s = json.loads(res.stdout)
    assert s["status"] == {"ok": 4, "invalid": 3, "error": 1} and not s["complete"] and s["mode"] == "judge"
    lines = {x["id"]: x for x in read_results(out)}
    assert "not the JSON object" in lines["q3"]["reason"] and "content verdict" in lines["q3"]["reason"]
    assert "'formatting' score 7 is outside 1-5" in lines["q4"]["reason"]
    assert "missing dimension(s) ['non_redundancy']" in lines["q5"]["reason"]
    assert lines["q6"]["status"] == "error" and "ModelCallError" in lines["q6"]["reason"]
    assert "judge judge-m, content verdict: call failed" in lines["q6"]["reason"]
    # what each call saw: content and presentation text only; image = query + embedded; gate = query image
    seen = {(i, g): n for i, g, n, _ in script.calls}
    assert seen[("q1", "content")] == 0 and seen[("q1", "presentation")] == 0
    assert seen[("q1", "image")] == 2 and seen[("q1", "gate")] == 1
    assert ("q2", "image") not in seen and not any(i == "q8" for i, *_ in script.calls)  # no images / no answer
    content_q1 = next(r for i, g, _, r in script.calls if (i, g) == ("q1", "content"))
    assert "thing q1" in content_q1["messages"][-1]["content"] and "[Image 1]" in content_q1["messages"][-1]["content"]
    # n/a handling: q2 has no images, q8 no answer
    q2 = lines["q2"]["ivr12"]["dimensions"]
    assert q2["relevance_necessity_placement"] == {"group": "image", "label": "n/a", "score": None, "na": "no_images", "gated": None}
    assert q2["accuracy"]["score"] == 2 and q2["accuracy"]["label"] == "judge" and q2["accuracy"]["rationale"]
    assert lines["q8"]["ivr12"]["gates"]["addresses_subject"]["pass"] is False  # no answer fails the gate by rule
    d = s["dimensions"]
    # ungated: q1 4, q2 2, q7 5; gated: q7 failed its gate and q8 has no answer -> the floor (1)
    assert d["accuracy"]["mean"] == pytest.approx(11 / 3, abs=1e-4) and d["accuracy"]["n"] == 3
    assert d["accuracy"]["gated_mean"] == pytest.approx((4 + 2 + 1 + 1) / 4) and d["accuracy"]["gated_n"] == 4
    rel = d["relevance_necessity_placement"]
    assert rel["mean"] == pytest.approx(4.0) and rel["n"] == 2
    assert rel["n_na"] == {"no_images": 1, "no_answer": 1}
    assert rel["gated_mean"] == pytest.approx(2.0) and rel["gated_n"] == 2  # no image dims for q8
    gate = s["gates"]["addresses_subject"]
    assert (gate["judged_by"], gate["pass"], gate["fail"], gate["n_a"], gate["source"]) == ("model", 2, 2, 0, "kbvqa")
    # q8's failure was decided by rule (no answer), not by a model: counted apart, with the reason
    assert gate["decided_by"] == {"model": {"pass": 2, "fail": 1},
                                  "rule": {"pass": 0, "fail": 1, "reasons": {"no answer": 1}}}
    q8_gate = lines["q8"]["ivr12"]["gates"]["addresses_subject"]
    assert q8_gate["decided_by"] == "rule" and q8_gate["reason"].startswith("decided by rule: no answer")
    assert lines["q7"]["ivr12"]["gates"]["addresses_subject"]["decided_by"] == "model"
    assert s["n_without_images"] == 1 and s["n_no_answer"] == 1 and s["no_answer"] == {"missing": 1}
    assert all(v["measured_by"] == "judge" for v in d.values())
    # per item: an overall only with all twelve judged (q1); q2 has no images: its text groups only
    q1, q2i = lines["q1"]["ivr12"], lines["q2"]["ivr12"]
    assert q1["mean"] == pytest.approx((4 * 6 + 5 * 3 + 3 * 3) / 12) and "mean_reason" not in q1
    assert q1["groups"]["content"]["mean"] == 4 and q1["groups"]["image"]["mean"] == 3
    assert q2i["mean"] is None and q2i["groups"]["content"]["mean"] == 2 and q2i["groups"]["image"]["mean"] is None
    assert "3 of 12 without a judged score (n/a (no images))" in q2i["mean_reason"]
    assert lines["q8"]["ivr12"]["mean"] is None and lines["q8"]["ivr12"]["mean_reason"].startswith("no answer: ")
    # the run is incomplete (q3-q5 invalid, q6's content call failed): no group or overall mean over
    # whichever items happened to get a verdict
    assert s["groups"]["content"]["n_dimensions"] == 6 and s["groups"]["content"]["mean"] is None
    assert s["overall"]["mean"] is None and s["overall"]["gated_mean"] is None
    assert s["overall"]["reason"].startswith("incomplete run: 3 invalid and 1 error items have no verdict")
    prov = lines["q1"]["ivr12"]["judges"][0]
    assert prov["model"] == "judge-m" and prov["prompt_versions"]["content"].endswith(iv.load_rubric().tag)
    manifest = json.loads(Path(s["manifest"]).read_text())
    assert manifest["run_config"]["rubric"]["sha256"] == iv.load_rubric().sha256
    # the rubric's grouping is named wherever the rubric is: manifest, result lines, summary
    assert manifest["run_config"]["rubric"]["grouping"]["sizes"] == "6/3/3"
    assert lines["q1"]["ivr12"]["rubric"]["grouping"]["groups"] == {g: DIMS[g] for g in ("content", "presentation",
                                                                                         "image")}
    assert s["rubric"]["grouping"]["source"] == "kbvqa" and "1.128" in s["rubric"]["grouping"]["note"]
    assert any(k.startswith("ivr12.rubric@") for k in manifest["stages"][0]["prompt_hashes"])
    assert Path(s["summary"]).is_file() and s["warnings"] == []
    # resume: only the invalid and the errored items are sent again
    script.plan = {k: v for k, v in plan.items() if k[0] in ("q1", "q2", "q7")}
    script.asked.clear()
    with FakeLLMServer(handler=script, port=port) as srv:
        res = _run([*args, "--judge-base-url", srv.base_url])
    assert res.exit_code == 0, res.output
    assert set(script.asked) == {"q3", "q4", "q5", "q6"} and all(n == 4 for n in script.asked.values())
    s2 = json.loads(res.stdout)
    assert s2["complete"] and s2["status"] == {"ok": 8, "invalid": 0, "error": 0} and s2["run"]["skipped"] == 4
    # complete, every dimension judged: the overall is the mean of the twelve dimension means
    d2 = s2["dimensions"]
    assert s2["overall"]["reason"] is None and s2["overall"]["n_judged_dimensions"] == 12
    assert s2["overall"]["mean"] == pytest.approx(np.mean([v["mean"] for v in d2.values()]), abs=1e-3)
    assert s2["groups"]["image"]["mean"] == pytest.approx(np.mean([d2[k]["mean"] for k in DIMS["image"]]), abs=1e-3)
    assert len(list(read_results(out))) == 8


def test_several_judges_repeats_agreement_and_self_judging_warning(tmp_path):
    preds, samples = _item_files(tmp_path, ["q1", "q2", "q3", "q4"], with_image={"q1", "q2", "q3", "q4"},
                                 producer="Qwen/judge-a")
    seeds: Counter = Counter()

    def handler(req: dict) -> Reply:
        item, group, _, _ = _request_info(req)
        seeds[(req["model"], req.get("seed"))] += 1
        assert req["temperature"] == 0.7
        if group == "gate":
            return ok(_group_reply("gate", True))
        base = int(item[1:])  # items differ; judge b and the second repeat move some scores by one
        bump = (req["model"] == "judge-b" and base % 2) + (req.get("seed") == 1 and base == 3)
        return ok(_group_reply(group, min(5, base + bump)))

    out = tmp_path / "multi.jsonl"
    with FakeLLMServer(handler=handler) as srv:
        res = _run(["-p", str(preds), "-s", str(samples), "--judge-base-url", srv.base_url, "--judge-model", "judge-a",
                    "--judge-model", "judge-b", "--repeats", "2", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["judges"] == ["openai:judge-a", "openai:judge-b"] and s["repeats"] == 2 and s["temperature"] == 0.7
    assert {k for k in seeds} == {("judge-a", 0), ("judge-a", 1), ("judge-b", 0), ("judge-b", 1)}
    line = next(x for x in read_results(out) if x["id"] == "q3")
    acc = line["ivr12"]["dimensions"]["accuracy"]
    assert acc["ratings"] == [[3, 4], [4, 5]] and acc["score"] == pytest.approx(4.0)
    assert acc["rationales"] == [["accuracy line"] * 2] * 2  # every rating keeps its rationale
    a = s["agreement"]["accuracy"]
    assert a["n_items"] == 4 and set(a["repeats"]) == {"openai:judge-a", "openai:judge-b"}
    assert set(a["repeats"]["openai:judge-a"]) == {"ordinal", "interval"} and a["judges"]["interval"] is not None
    assert a["repeats"]["openai:judge-a"]["interval"] < 1.0  # q3's repeats disagree
    assert s["agreement"]["addresses_subject"]["judges"] == {"nominal": None}  # every gate passed: undefined
    # the judge model wrote the answers (provider prefix and case ignored): warned in the summary and manifest
    assert len(s["warnings"]) == 1 and "'judge-a' also wrote 4 of the answers" in s["warnings"][0]
    assert json.loads(Path(s["manifest"]).read_text())["run_config"]["warnings"] == s["warnings"]
    assert "warning: the judge model" in res.stderr
    assert s["length_score"]["n"] == 4 and s["length_score"]["pearson"] is not None
    from kbvqa.report.summaries import ivr12_tables

    tables = ivr12_tables(s)
    assert [t.name for t in tables] == ["ivr12", "ivr12-gates", "ivr12-agreement"]
    assert "α repeats openai:judge-a" in tables[2].columns


def test_changed_rubric_refuses_resume(tmp_path):
    preds, samples = _item_files(tmp_path, ["q1"], with_image=set())
    out = tmp_path / "r.jsonl"
    res = _run(["-p", str(preds), "-s", str(samples), "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    mine = tmp_path / "mine.toml"
    mine.write_text(_packaged().read_text(encoding="utf-8").replace('version = "2-reconstructed"',
                                                                    'version = "1-mine"'), encoding="utf-8")
    res = _run(["-p", str(preds), "-s", str(samples), "--out", str(out), "--rubric", str(mine)])
    assert res.exit_code == 2 and "ivr12_input" in res.stderr and "--no-resume" in res.stderr
    res = _run(["-p", str(preds), "-s", str(samples), "--out", str(out), "--rubric", str(mine), "--no-resume",
                "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["rubric"]["version"] == "1-mine"


def test_flag_errors(tmp_path):
    preds, samples = _item_files(tmp_path, ["q1"], with_image=set())
    res = _run(["-p", str(preds), "-s", str(samples), "--repeats", "3"])
    assert res.exit_code == 2 and "--repeats needs a judge model" in res.stderr
    res = _run(["-p", str(preds), "-s", str(samples), "--judge-base-url", "http://127.0.0.1:9/v1"])
    assert res.exit_code == 2 and "--judge-model" in res.stderr
    res = _run(["-p", str(preds), "-s", str(samples), "--source", "both"])
    assert res.exit_code == 2 and "--source" in res.stderr


# ------------------------------------------------------------------------- rules mode on the demo


@pytest.fixture(scope="module")
def demo(bench_copy, tmp_path_factory):
    from kbvqa.data.formats import read_samples
    from kbvqa.demo.bench import build_community
    from kbvqa.kb.store import KBStore
    from kbvqa.models.image_encoders import HistogramEncoder
    from kbvqa.pipelines.answer import build_answer_job
    from kbvqa.pipelines.index import build_image_index

    root = tmp_path_factory.mktemp("ivr12demo")
    b = bench_copy(root / "bench")
    community = build_community(b)
    kb = KBStore(b.kb)
    enc = HistogramEncoder()
    index, _ = build_image_index(kb, b.root, enc)
    job = build_answer_job("agent", kb=kb, index=index, encoder=enc, image_root=b.root, kb_images=b.root)
    job.run([s.dump() for s in read_samples(community)], out=root / "agent.jsonl", progress=False)
    kb.close()
    return root, community


def test_rules_mode_on_demo_answers_and_references(demo, tmp_path):
    root, community = demo
    preds = [json.loads(x) for x in (root / "agent.jsonl").read_text().splitlines()]
    # one answer embeds the asker's own photo: the least redundant-looking answer is the query image itself
    # (a copy beside the predictions: answer images are relative to the predictions' folder, where
    # the agent keeps the images it embeds, and nothing outside it is read)
    shutil.copyfile(community.parent / "images" / "community_astronaut.jpg", root / "asker.jpg")
    p0 = preds[0]
    p0["meta"]["provenance"]["resolved"][0]["image"] = "asker.jpg"
    p0["images"] = ["asker.jpg"]
    agent = _write(root / "agent_asker.jsonl", preds)
    res = _run(["-p", str(agent), "-s", str(community), "--out", str(tmp_path / "agent.ivr12.jsonl"), "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["mode"] == "rules" and s["source"] == "predictions" and s["status"]["ok"] == 15
    d = s["dimensions"]
    for key in ("visual_quality", "non_redundancy", "conciseness"):  # rule measures, labelled as such
        assert d[key]["label"] == "rules" and d[key]["measured_by"] == "rule" and d[key]["n"] == 15, key
        assert d[key]["mean"] is not None and "rule measure" in d[key]["note"]
    for key in ("accuracy", "clarity", "usefulness", "relevance_necessity_placement"):
        assert d[key]["label"] == "n/a" and d[key]["n"] == 0 and d[key]["n_na"] == {"needs_judge": 15}, key
        assert d[key]["measured_by"] is None and d[key]["mean"] is None
    # no group mean and no overall from three stand-ins: null, with the reason
    assert s["overall"]["mean"] is None and s["overall"]["gated_mean"] is None
    assert s["overall"]["reason"] == ("rules mode: 3 of 12 dimensions measured by rules (conciseness, "
                                      "visual_quality, non_redundancy), 9 of 12 without a judged score "
                                      "(n/a (needs a judge model) 15); no overall")
    assert all(g["mean"] is None and g["gated_mean"] is None and g["reason"].startswith("rules mode: ")
               for g in s["groups"].values())
    assert "no group mean" in s["groups"]["presentation"]["reason"] and s["groups"]["presentation"]["n_judged_dimensions"] == 0
    assert s["length_score"]["n"] == 0 and s["length_score"]["pearson"] is None
    # where each dimension comes from: 8 names are the paper's (with the section), 4 are kbvqa's
    assert {k for k, v in d.items() if v["source"] == "kbvqa"} == {"clarity", "coherence_structure", "conciseness",
                                                                  "usefulness"}
    assert d["accuracy"]["paper_ref"].startswith("§4.1") and d["relevance_necessity_placement"]["paper_ref"].startswith("§5")
    assert s["provenance"]["dimension_names_from_paper"] == "8 of 12" and s["gating"]["source"] == "kbvqa"
    from kbvqa.report.summaries import ivr12_tables  # the printed table names the rubric's grouping too

    assert any("grouping 6/3/3 (kbvqa)" in note for note in ivr12_tables(s)[0].notes)
    assert s["gates"]["tags_resolve"]["source"] == "kbvqa" and s["gates"]["addresses_subject"]["decided_by"] == {}
    assert s["gates"]["tags_resolve"]["pass"] == 15 and s["gates"]["addresses_subject"]["n_a"] == 15
    lines = {x["id"]: x for x in read_results(tmp_path / "agent.ivr12.jsonl")}
    item = lines["community_001"]["ivr12"]
    assert item["mean"] is None and item["mean_reason"].startswith("rules mode: 3 of 12 dimensions measured by rules")
    assert item["dimensions"]["conciseness"]["measured_by"] == "rule"
    assert all(g["mean"] is None for g in item["groups"].values())
    nr = lines["community_000"]["ivr12"]["rules"]["non_redundancy"]
    assert nr["score"] == 1 and nr["detail"]["closest_bits"] == 0 and nr["detail"]["verdict"] == "duplicate"
    assert lines["community_001"]["ivr12"]["dimensions"]["non_redundancy"]["score"] >= 3
    vq = lines["community_001"]["ivr12"]["rules"]["visual_quality"]["detail"]["images"][0]
    assert vq["short_side"] >= 300 and vq["sharpness"] > 100 and vq["score"] == 5

    # the references themselves (auto-detected), same criteria
    res = _run(["-p", str(community), "-s", str(community), "--out", str(tmp_path / "refs.ivr12.jsonl"), "--json"])
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)
    assert r["source"] == "references" and r["status"]["ok"] == 15 and r["gates"]["tags_resolve"]["pass"] == 15
    ref_line = next(iter(read_results(tmp_path / "refs.ivr12.jsonl")))
    assert "[Image 1]" in ref_line["text"] and ref_line["tags"]["checked_by"] == "reference.images"

    # references vs agent, Table 3 shape
    res = runner.invoke(app, ["score", "ivr12-compare", r["summary"], s["summary"], "--names", "references,agent",
                              "--json"])
    assert res.exit_code == 0, res.output
    c = json.loads(res.stdout)
    rows = {x["key"]: x for x in c["rows"]}
    assert rows["non_redundancy"]["n_a"] == rows["non_redundancy"]["n_b"] == 15
    assert rows["non_redundancy"]["gap"] == pytest.approx(rows["non_redundancy"]["a"] - rows["non_redundancy"]["b"],
                                                          abs=1e-3)
    assert rows["non_redundancy"]["measured_by_a"] == rows["non_redundancy"]["measured_by_b"] == "rule"
    assert "rule measures" in rows["non_redundancy"]["reason"]
    assert rows["accuracy"]["a"] is None and rows["accuracy"]["gap"] is None and rows["overall"]["level"] == "overall"
    # no overall difference in rules mode (and none per group): neither side has one
    assert rows["overall"]["a"] is None and rows["overall"]["b"] is None and rows["overall"]["gap"] is None
    assert rows["overall"]["gap_gated"] is None and "references: rules mode" in rows["overall"]["reason"]
    assert all(rows[g]["gap"] is None for g in ("content", "presentation", "image"))
    assert rows["accuracy"]["reason"] == "no score on either side (n/a (needs a judge model) 15); no gap"
    assert any("no overall gap" in n for n in c["notes"])
    res = runner.invoke(app, ["score", "ivr12-compare", r["summary"], s["summary"], "--out",
                              str(tmp_path / "cmp.json")])
    assert res.exit_code == 0 and "gap" in res.stdout
    assert json.loads((tmp_path / "cmp.json").read_text())["kind"] == "ivr12-compare"
    from kbvqa.report.summaries import ivr12_compare_table

    t = ivr12_compare_table(c)
    assert t.columns[:7] == ["dimension", "source", "measured by", "references", "items scored (references)", "agent",
                             "items scored (agent)"] and len(t.rows) == 16
    shown = {r[0]: r for r in t.rows}
    assert shown["Conciseness (rule)"][1] == "kbvqa" and shown["Conciseness (rule)"][2] == "rule / rule"
    assert shown["IVR-12 overall"][3] == shown["IVR-12 overall"][5] == shown["IVR-12 overall"][7] == "–"
    assert "rules mode" in shown["IVR-12 overall"][-1] and shown["Content (group mean)"][7] == "–"
    assert shown["Accuracy"][1] == "paper" and shown["Accuracy"][7] == "–"
    res = runner.invoke(app, ["score", "ivr12-compare", r["summary"], s["summary"], "--names", "references,agent"])
    assert res.exit_code == 0 and "no overall gap" in res.stdout  # (the table itself is checked above)
    # the summary's own tables: rule rows marked, no group mean or overall, the reason beside each
    from kbvqa.report.summaries import ivr12_tables

    main, gates = ivr12_tables(s)[:2]
    by_dim = {r[1]: r for r in main.rows}
    assert by_dim["Visual quality (rule)"][3] == "rule" and by_dim["Accuracy"][3] == "n/a"
    assert by_dim["IVR-12 overall (12 dimensions)"][4] == "–" and "no overall" in by_dim["IVR-12 overall (12 dimensions)"][-1]
    assert main.columns[5] == "items scored" and any("(rule): a rule measure" in n for n in main.notes)
    assert gates.columns[2] == "decided by" and gates.rows[0][2] == "none (n/a: needs a judge model)"

    # a summary made under another rubric file is not comparable unless asked
    other = json.loads(Path(s["summary"]).read_text())
    other["rubric"]["sha256"] = "f" * 64
    odd = _write(tmp_path / "odd.summary.json", [])
    odd.write_text(json.dumps(other), encoding="utf-8")
    res = runner.invoke(app, ["score", "ivr12-compare", r["summary"], str(odd)])
    assert res.exit_code == 2 and "different rubric files" in res.stderr


def test_missing_embedded_image_is_an_error_line(tmp_path):
    preds, samples = _item_files(tmp_path, ["q1", "q2"], with_image={"q1"})
    (tmp_path / "images" / "emb_q1.jpg").unlink()
    out = tmp_path / "m.jsonl"
    res = _run(["-p", str(preds), "-s", str(samples), "--out", str(out), "--json", "--require-complete"])
    assert res.exit_code == 1
    lines = {x["id"]: x for x in read_results(out)}
    assert lines["q1"]["status"] == "error" and "emb_q1.jpg" in lines["q1"]["reason"]
    assert lines["q2"]["status"] == "ok"


# ------------------------------------------------------------------ short-answer accuracy by category


def test_short_answer_accuracy_by_category_and_intent_from_judge_verdicts(demo, tmp_path):
    from kbvqa.evaluate.studies import by_type_study
    from kbvqa.report.summaries import accuracy_by_group_matrix_table

    root, community = demo
    ids = [json.loads(x)["id"] for x in (root / "agent.jsonl").read_text().splitlines()]
    runs = {}
    for name, correct in (("model-a", {0, 2, 4, 6}), ("model-b", {0, 1})):
        v = _write(tmp_path / f"{name}.judge.jsonl",
                   [{"id": i, "status": "invalid" if k == 14 else "ok",
                     "verdict": {"label": "correct" if k in correct else "incorrect"}} for k, i in enumerate(ids)])
        runs[name] = v
    res = runner.invoke(app, ["study", "by-type", "--by", "category", "--scorer", "judge-verdicts", "-p",
                              str(runs["model-a"]), "-r", str(community), "--json", "--no-report"])
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout)
    groups = {g["group"]: g for g in obj["groups"]}
    assert sum(g["n"] for g in groups.values()) == 15 and "(none)" not in groups
    assert groups["Science & Space"]["n"] == 5 and obj["overall"]["correct"] == 4
    by_intent = [by_type_study(runs[n], community, "judge-verdicts", by="intent", label=n, n_resamples=200)
                 for n in runs]
    t = accuracy_by_group_matrix_table(by_intent)
    assert t.columns[0] == "method" and t.columns[1] == "overall (n=15)"
    assert [r[0] for r in t.rows] == ["model-a", "model-b"]
    assert any(c.startswith("Identification (n=") for c in t.columns)


def test_truncated_reply_is_invalid_even_when_it_parses(tmp_path):
    """A reply cut at max_tokens is refused (the project's rule for every model reply)."""
    import asyncio

    from kbvqa.data.schema import Provenance
    from kbvqa.models.result import ChatResult
    from kbvqa.runner import Context

    class Cut:
        provenance = Provenance(backend="openai", model="cut")

        async def chat(self, messages, **kw):
            group = next(g for g, w in (("content", "CONTENT"), ("presentation", "PRESENTATION"),
                                        ("image", "IMAGES"), ("gate", "GATE")) if w in str(messages[-1]["content"]))
            return ChatResult(status="ok", text=_group_reply(group, True if group == "gate" else 3),
                              provenance=self.provenance, raw={"choices": [{"finish_reason": "length"}]})

    preds, samples = _item_files(tmp_path, ["q1"], with_image=set())
    from kbvqa.data.formats import read_samples

    rec = iv.build_records(preds, read_samples(samples), samples_path=samples).records[0]
    stage = iv.IVR12Stage()
    with pytest.raises(Invalid, match="reply truncated"):
        asyncio.run(stage.run(rec, Context(roles={"judge": Cut()})))


def test_several_judges_from_config_roles(tmp_path):
    preds, samples = _item_files(tmp_path, ["q1"], with_image={"q1"})
    models: Counter = Counter()

    def handler(req: dict) -> Reply:
        _, group, _, _ = _request_info(req)
        models[req["model"]] += 1
        return ok(_group_reply(group, True if group == "gate" else 4))

    with FakeLLMServer(handler=handler) as srv:
        cfg = tmp_path / "kbvqa.toml"
        cfg.write_text(f'[models.judge]\nbase_url = "{srv.base_url}"\nmodel = "jm-1"\n'
                       f'[models.checker]\nbase_url = "{srv.base_url}"\nmodel = "jm-2"\n', encoding="utf-8")
        res = _run(["-p", str(preds), "-s", str(samples), "--config", str(cfg), "--judge-role", "judge",
                    "--judge-role", "checker", "--out", str(tmp_path / "c.jsonl"), "--json"])
        assert res.exit_code == 0, res.output
        assert models == {"jm-1": 4, "jm-2": 4}
        s = json.loads(res.stdout)
        assert s["judges"] == ["openai:jm-1", "openai:jm-2"] and s["dimensions"]["accuracy"]["mean"] == 4
        res = _run(["-p", str(preds), "-s", str(samples), "--config", str(cfg), "--judge-role", "answerer"])
        assert res.exit_code == 2 and "'answerer' is not configured" in res.stderr


def test_a_refused_image_reference_fails_its_item_not_the_file(demo, tmp_path):
    """An answer image outside the predictions' folder (a hostile or hand-edited line) is that item's
    error, with the reason; every other item is scored."""
    root, community = demo
    preds = [json.loads(x) for x in (root / "agent.jsonl").read_text().splitlines()]
    preds[0]["meta"]["provenance"]["resolved"][0]["image"] = "/etc/passwd"
    preds[0]["images"] = ["/etc/passwd"]
    agent = _write(root / "agent_hostile.jsonl", preds)
    res = _run(["-p", str(agent), "-s", str(community), "--out", str(tmp_path / "hostile.ivr12.jsonl"), "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["status"]["ok"] == 14 and s["status"]["error"] == 1
    lines = {x["id"]: x for x in map(json.loads, (tmp_path / "hostile.ivr12.jsonl").read_text().splitlines())}
    bad = lines[preds[0]["id"]]
    assert bad["status"] == "error" and "image reference refused" in bad["reason"]


# ------------------------------------------------------------------------------ grouping vs Table 3

TABLE3 = {"overall_gap": 1.13, "group_gaps": {"content": 1.87, "presentation": 0.37, "image": 0.40}}  # §4.1


def _overall_from_groups(sizes: dict[str, int]) -> float:
    """The overall gap the paper's group gaps imply under a grouping: the overall is the mean of the
    twelve dimensions, so the group gaps weigh by group size."""
    return sum(TABLE3["group_gaps"][g] * n for g, n in sizes.items()) / sum(sizes.values())


def test_packaged_grouping_reproduces_table3_overall_gap(tmp_path):
    rb = iv.load_rubric()
    sizes = {g: len(rb.dims(g)) for g, _ in rb.groups}
    assert sizes == {"content": 6, "presentation": 3, "image": 3}
    assert abs(_overall_from_groups(sizes) - TABLE3["overall_gap"]) <= 0.01  # 1.1275
    assert abs(_overall_from_groups({"content": 4, "presentation": 4, "image": 4}) - 1.13) > 0.2  # the old 4/4/4: 0.88
    # the file's own copy of the figures and its stated sizes agree with the test and the dimensions
    doc = tomllib.loads(_packaged().read_text(encoding="utf-8"))
    assert doc["grouping"]["table3"]["overall_gap"] == TABLE3["overall_gap"]
    assert doc["grouping"]["table3"]["group_gaps"] == TABLE3["group_gaps"]
    assert rb.grouping()["sizes"] == "6/3/3" and rb.grouping()["source"] == "kbvqa"
    # the four named content gaps leave two positive gaps below the fourth for the other two content dimensions
    named = doc["grouping"]["table3"]["named_content_gaps"]
    rest = 6 * TABLE3["group_gaps"]["content"] - sum(named.values())
    assert set(named) <= set(rb.keys("content")) and 0 < rest / 2 < min(named.values())
    # every dimension kbvqa placed says so
    assert {d.key for d in rb.dimensions if d.group_origin and d.group_origin.source == "kbvqa"} == {
        "conciseness", "usefulness", "formatting", "relevance_necessity_placement"}
    # a stated size that the dimensions do not have is refused; a user's grouping is named as it is
    text = _packaged().read_text(encoding="utf-8")
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("sizes = { content = 6, presentation = 3, image = 3 }",
                                "sizes = { content = 4, presentation = 4, image = 4 }"), encoding="utf-8")
    with pytest.raises(iv.RubricError, match=r"grouping\.sizes: says"):
        iv.load_rubric(bad)
    mine = tmp_path / "mine.toml"
    start = text.index("\n[grouping]\n")
    mine_text = text[:start] + text[text.index("# Gates are hard pass/fail."):]  # no [grouping]: the user's own
    mine.write_text(mine_text.replace('key = "usefulness"\ngroup = "content"', 'key = "usefulness"\ngroup = "presentation"'),
                    encoding="utf-8")
    g = iv.load_rubric(mine).describe()["grouping"]
    assert g["sizes"] == "5/4/3" and "usefulness" in g["groups"]["presentation"] and "source" not in g
