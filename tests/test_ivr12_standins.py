"""IVR-12 never stands on stand-ins (issue 24, deliverable 11): a group mean only when every dimension
of the group was judged by a model, an overall only when all twelve were (per item, and in the
summary over a complete run); rule measures labelled and never averaged; a failed judge call is no
number; `ivr12-compare` gives a gap only for dimensions measured the same way; the rubric marks what
is the paper's and what is kbvqa's, and a summary carries it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.evaluate import ivr12 as iv
from kbvqa.runner import read_results

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply, ok  # noqa: E402
from test_ivr12 import DIMS, _group_reply, _item_files, _packaged, _request_info  # noqa: E402

runner = CliRunner()


def test_failed_dimension_call_gives_no_overall_until_resumed(tmp_path, monkeypatch):
    """As a user runs it: response cache on, relative paths, from another working directory. One
    item's image-group call fails: that item is an error line with no number at all, and the run's
    group and overall means are null with the reason (not a mean over the items that happened to
    get a verdict); once `--resume` judges it, the overall is back."""
    work = tmp_path / "work"
    work.mkdir()
    _item_files(work, ["q1", "q2", "q3"], with_image={"q1", "q2", "q3"})
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    monkeypatch.chdir(tmp_path)
    down = {"q2"}

    def handler(req: dict) -> Reply:
        item, group, _, _ = _request_info(req)
        if item in down and group == "image":
            return Reply(status=500, headers={"Retry-After": "0"}, error="upstream down")
        return ok(_group_reply(group, True if group == "gate" else 4))

    args = ["score", "ivr12", "-p", "work/preds.jsonl", "-s", "work/samples.jsonl", "--out", "work/v.jsonl",
            "--judge-model", "judge-m", "--json"]
    with FakeLLMServer(handler=handler) as srv:
        res = runner.invoke(app, [*args, "--judge-base-url", srv.base_url])
        assert res.exit_code == 0, res.output
        s = json.loads(res.stdout)
        assert s["status"] == {"ok": 2, "invalid": 0, "error": 1}
        lines = {x["id"]: x for x in read_results(work / "v.jsonl")}
        assert lines["q2"]["status"] == "error" and "ivr12" not in lines["q2"]  # no failed call becomes a number
        assert "image verdict: call failed" in lines["q2"]["reason"]
        assert lines["q1"]["ivr12"]["mean"] == 4 and lines["q1"]["ivr12"]["groups"]["image"]["mean"] == 4
        # every dimension was judged on q1 and q3, but the run is not complete: no aggregate over a subset
        assert all(d["measured_by"] == "judge" and d["n"] == 2 for d in s["dimensions"].values())
        assert s["overall"]["mean"] is None and s["overall"]["gated_mean"] is None
        assert s["overall"]["reason"] == ("incomplete run: 1 error items have no verdict (run again with --resume "
                                          "to retry them); no overall")
        assert all(g["mean"] is None and "incomplete run" in g["reason"] for g in s["groups"].values())
        table = runner.invoke(app, ["report", "build", "--input", s["summary"], "--out", "rep"])
        assert table.exit_code == 0, table.output
        md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
        assert "incomplete run: 1 error items" in md and "–" in md

        down.clear()  # the server recovers: --resume sends only q2 again
        res = runner.invoke(app, [*args, "--judge-base-url", srv.base_url])
    assert res.exit_code == 0, res.output
    s2 = json.loads(res.stdout)
    assert s2["complete"] and s2["run"]["skipped"] == 2
    assert s2["overall"]["mean"] == pytest.approx(4.0) and s2["overall"]["reason"] is None
    assert s2["groups"]["image"]["mean"] == pytest.approx(4.0) and s2["length_score"]["n"] == 3


def _summary(mode: str, measured: dict[str, str | None], *, mean: float = 3.0) -> dict:
    """A summary shaped as `summarize` writes it, with each dimension measured as given."""
    rb = iv.load_rubric()
    label = {"judge": "judge", "rule": "rules", None: "n/a"}
    dims = {d.key: {"group": d.group, "title": d.title, "source": d.origin.source, "label": label[measured.get(d.key)],
                    "measured_by": measured.get(d.key),
                    "mean": mean if measured.get(d.key) else None, "n": 5 if measured.get(d.key) else 0,
                    "gated_mean": mean if measured.get(d.key) else None, "gated_n": 5 if measured.get(d.key) else 0,
                    "n_na": {} if measured.get(d.key) else {"needs_judge": 5}}
            for d in rb.dimensions}
    status = {"ok": 5, "invalid": 0, "error": 0}
    groups, overall = iv.aggregate_means(dims, rb.groups, status, mode)
    return {"kind": "ivr12", "scorer": f"ivr12 ({rb.tag}, {mode})", "rubric": rb.describe(), "mode": mode,
            "n_items": 5, "status": status, "complete": True, "n_no_answer": 0, "no_answer": {}, "n_without_images": 0,
            "n_gate_failed": 0, "gating": {"policy": "floor", "floor": 1, "gates_evaluated": []}, "gates": {},
            "length_score": {"n": 0, "pearson": None, "spearman": None}, "dimensions": dims, "groups": groups,
            "overall": overall}


def test_compare_gives_a_gap_only_where_both_sides_were_measured_alike():
    every = {d.key: "judge" for d in iv.load_rubric().dimensions}
    judged = _summary("judge", every, mean=4.5)
    assert judged["overall"]["mean"] == pytest.approx(4.5) and judged["overall"]["reason"] is None
    rules = _summary("rules", {"conciseness": "rule", "visual_quality": "rule", "non_redundancy": "rule"}, mean=3.0)
    c = iv.compare_summaries(judged, rules, ("references", "agent"))
    rows = {r["key"]: r for r in c["rows"]}
    # judged on one side, a rule measure on the other: not the same quantity, no gap
    assert rows["conciseness"]["a"] == 4.5 and rows["conciseness"]["b"] == 3.0 and rows["conciseness"]["gap"] is None
    assert rows["conciseness"]["reason"].startswith("not measured the same way (references: judge, agent: rule)")
    assert rows["accuracy"]["gap"] is None and rows["accuracy"]["reason"] == "no score in agent; no gap"
    assert rows["overall"]["a"] == pytest.approx(4.5) and rows["overall"]["b"] is None
    assert rows["overall"]["gap"] is None and rows["overall"]["reason"].startswith("agent: rules mode: 3 of 12")
    # both judged: every gap exists, the overall's too
    c2 = iv.compare_summaries(judged, _summary("judge", every, mean=3.5), ("references", "agent"))
    assert all(r["gap"] == pytest.approx(1.0) and r["reason"] is None for r in c2["rows"])


def test_a_summary_written_before_this_change_loses_its_stand_in_overall():
    """An older rules-mode summary printed an overall (and group means) from three rule measures;
    reports and comparisons recompute the aggregates and drop it, with the reason."""
    from kbvqa.report.summaries import ivr12_tables

    old = _summary("rules", {"conciseness": "rule", "visual_quality": "rule", "non_redundancy": "rule"})
    for d in old["dimensions"].values():
        for k in ("measured_by", "source"):
            d.pop(k, None)
    old["groups"] = {g: {"title": v["title"], "mean": 4.5, "n_dimensions": 1, "gated_mean": 4.5,
                         "gated_n_dimensions": 1} for g, v in old["groups"].items()}
    old["overall"] = {"mean": 4.78, "n_dimensions": 3, "gated_mean": 4.78, "gated_n_dimensions": 3}
    now = iv.normalize_summary(old)
    assert now["overall"]["mean"] is None and now["overall"]["reason"].startswith("rules mode: 3 of 12")
    assert now["dimensions"]["conciseness"]["measured_by"] == "rule"
    assert all(g["mean"] is None for g in now["groups"].values())
    main = ivr12_tables(old)[0]
    overall = next(r for r in main.rows if r[0] == "overall")
    assert overall[4] == "–" and 4.78 not in overall and "no overall" in overall[-1]
    assert any(r[1] == "Conciseness (rule)" for r in main.rows)


def test_rules_mode_no_answer_gate_is_decided_by_rule(tmp_path):
    """Without a judge, an item with no answer fails "addresses the pictured subject" by rule: it says
    so, item and summary, and the gate table does not claim a model decided it."""
    from kbvqa.report.summaries import ivr12_tables

    preds, samples = _item_files(tmp_path, ["q1", "q2"], with_image=set(), missing={"q2"})
    res = runner.invoke(app, ["score", "ivr12", "-p", str(preds), "-s", str(samples), "--out",
                              str(tmp_path / "r.jsonl"), "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    gate = s["gates"]["addresses_subject"]
    assert gate["decided_by"] == {"rule": {"pass": 0, "fail": 1, "reasons": {"no answer": 1}}} and gate["n_a"] == 1
    line = {x["id"]: x for x in read_results(tmp_path / "r.jsonl")}["q2"]["ivr12"]
    assert line["gates"]["addresses_subject"]["reason"] == "decided by rule: no answer (missing: no line for this id)"
    assert line["gates"]["addresses_subject"]["decided_by"] == "rule" and line["mean"] is None
    gates = ivr12_tables(s)[1]
    row = next(r for r in gates.rows if r[0] == "Addresses the pictured subject")
    assert row[1] == "kbvqa" and row[2] == "rule: 0 pass, 1 fail (no answer 1)"


def test_rubric_entries_say_where_they_come_from(tmp_path):
    rb = iv.load_rubric()
    src = {d.key: d.origin.source for d in rb.dimensions}
    assert sorted(k for k, v in src.items() if v == "paper") == sorted(
        ["accuracy", "completeness", "intent_understanding", "source_fidelity", "formatting",
         "relevance_necessity_placement", "visual_quality", "non_redundancy"])  # the names our copy gives (§5's
    # relevance and necessity-and-placement joined in one: Table 3 leaves the image group three dimensions)
    assert all(d.origin.paper_ref for d in rb.dimensions if d.origin.source == "paper")
    assert [g.origin.source for g in rb.gates] == ["kbvqa", "kbvqa"] and rb.gating_origin.source == "kbvqa"
    assert {g: o.source for g, o in rb.group_origins.items()} == dict.fromkeys(DIMS.keys() - {"gate"}, "paper")
    text = _packaged().read_text(encoding="utf-8")
    assert "are the paper's (§3.3, §4.1, §5)" not in text  # the old claim that all twelve names are the paper's
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('key = "clarity"\ngroup = "presentation"\ntitle = "Clarity"\nsource = "kbvqa"\n',
                                'key = "clarity"\ngroup = "presentation"\ntitle = "Clarity"\n'), encoding="utf-8")
    with pytest.raises(iv.RubricError, match=r"dimensions\[7\]\.source: say where this entry comes from"):
        iv.load_rubric(bad)
    bad.write_text(text.replace('source = "kbvqa"\nnote = "not named in our copy: one of the two presentation '
                                'dimensions besides formatting the paper leaves unnamed (§5', 'source = "paper"\nnote = "x (', 1),
                   encoding="utf-8")
    with pytest.raises(iv.RubricError, match=r"dimensions\[7\]\.paper_ref: an entry from the paper names"):
        iv.load_rubric(bad)
    mine = tmp_path / "mine.toml"
    mine.write_text(text.replace('title = "Clarity"\nsource = "kbvqa"', 'title = "Clarity"\nsource = "user"'),
                    encoding="utf-8")
    assert iv.load_rubric(mine).dimensions[7].origin.source == "user"
