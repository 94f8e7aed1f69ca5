"""Seed 000's remaining analyses (kbvqa.evaluate.analyses): accuracy by fix kind, the grounded subset,
modification rates, per-variant accuracy and recall, correctness buckets — hand-computed expectations
on small fixtures, `report build` on every kind, the study commands, and all of them on the demo."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kbvqa.cli.study import app as study_app
from kbvqa.evaluate import analyses as an
from kbvqa.evaluate import studies as st
from kbvqa.pipelines.audit_tools import diff_versions
from kbvqa.report.results import build_report, collect_inputs
from kbvqa.report.summaries import study_table, study_tables

runner = CliRunner()
ARA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ara" / "ground_truth"
W = "https://en.wikipedia.org/wiki/"
FAST = {"n_resamples": 300, "seed": 0}


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _sample(i: str, q: str, a: str, qt: str = "String", entity: str | None = None, **kw) -> dict:
    return {"id": i, "question": q, "answers": [a], "question_type": qt, "answer_type": qt,
            "entity": {"url": W + (entity or i.upper())}, **kw}


def _pred(i: str, answer: str, post: str | None = None, pool: list[str] | None = None, status: str = "ok") -> dict:
    meta = {"retrieval": {"initial": {"retrieved": [W + "X", W + "Y"]}}}
    if post is not None:
        meta["retrieval"]["post"] = {"retrieved": [W + post, W + "Z"]}
    return {"id": i, "sample_id": i, "answer": answer, "status": status, "meta": meta,
            "evidence_used": [{"text": "t", "url": W + u} for u in (pool or [])]}


# ------------------------------------------------------------------------------- fix-kind fixture
# q1, q2: question only; q3: answer only; q4: both; q5, q6: nothing; q7: dropped by the audit.
UNFIXED = [("q1", "Where is it?", "Paris"), ("q2", "What colour?", "Red"), ("q3", "How tall?", "10"),
           ("q4", "When built?", "1900"), ("q5", "Who made it?", "Bo"), ("q6", "What is it?", "Tree"),
           ("q7", "Why?", "Because")]
FIXED = {"q1": ("In which city is it?", "Paris"), "q2": ("What colour is the roof?", "Red"),
         "q3": ("How tall?", "12"), "q4": ("When was the tower built?", "1901"), "q5": ("Who made it ?", "bo"),
         "q6": ("What is it?", "Tree")}
TYPES = {"q3": "Numerical", "q4": "Time"}


@pytest.fixture()
def fix_files(tmp_path):
    a = _jsonl(tmp_path / "unfixed.jsonl", [_sample(i, q, ans, TYPES.get(i, "String")) for i, q, ans in UNFIXED])
    b = _jsonl(tmp_path / "fixed.jsonl", [_sample(i, *FIXED[i], TYPES.get(i, "String")) for i, _, _ in UNFIXED
                                          if i in FIXED])
    audited = []
    for i, q, ans in UNFIXED:
        q2, a2 = FIXED.get(i, (q, ans))
        audited.append({**_sample(i, q2, a2, TYPES.get(i, "String")), "status": "ok",
                        "audit": {"question_before": q, "answers_before": [ans], "tags": ["unsupported"] if i == "q7"
                                  else [], "action": "drop" if i == "q7" else "repair" if i in ("q1", "q2", "q3", "q4")
                                  else "keep"}})
    aud = _jsonl(tmp_path / "audited.jsonl", audited)
    # unfixed run: right on q2, q3 (old answer), q5; fixed run: right on q1, q2, q4, q5
    grounded_a = {"q1", "q2", "q3", "q5"}
    grounded_b = {"q1", "q2", "q5", "q6"}
    ans_a = {"q1": "Lyon", "q2": "Red", "q3": "10", "q4": "1850", "q5": "Bo", "q6": "Bush", "q7": "no"}
    ans_b = {"q1": "Paris", "q2": "red", "q3": "10", "q4": "1901", "q5": "bo", "q6": "Bush"}
    pa = _jsonl(tmp_path / "pred_unfixed.jsonl", [_pred(i, x, post=i.upper() if i in grounded_a else "Other")
                                                  for i, x in ans_a.items()])
    pb = _jsonl(tmp_path / "pred_fixed.jsonl", [_pred(i, x, post=i.upper() if i in grounded_b else "Other")
                                                for i, x in ans_b.items()])
    return {"a": a, "b": b, "audited": aud, "pa": pa, "pb": pb}


def _groups(res):
    return {g["kind"]: g for g in res["groups"]}


def test_change_kinds_from_audit_and_from_diff_agree(fix_files):
    from_diff = an.version_changes(fix_files["a"], fix_files["b"])
    from_audit = an.version_changes(fix_files["audited"])
    want = {"q1": "question_only", "q2": "question_only", "q3": "answer_only", "q4": "both", "q5": "neither",
            "q6": "neither"}
    assert from_diff.kinds() == want
    assert {k: v for k, v in from_audit.kinds().items() if k != "q7"} == want and from_audit.kinds()["q7"] == "neither"
    assert [it.id for it in from_diff.only_in_a] == ["q7"] and from_diff.only_in_a[0].dropped
    assert [it.id for it in from_audit.items if it.dropped] == ["q7"]
    d = diff_versions(fix_files["a"], fix_files["b"])  # audit diff counts the same rows
    assert (d["question_only"], d["answer_only"], d["both"], d["neither"]) == (2, 1, 1, 2)
    assert d["only_in_a"]["ids"] == ["q7"]


def test_fix_kinds_hand_computed(fix_files):
    f = fix_files
    res = an.fix_kinds_study(f["pa"], f["pb"], f["a"], f["b"], "infoseek-strict", audited=f["audited"], label="m",
                             **FAST)
    g = _groups(res)
    assert res["pairing"] == {"n_unfixed": 7, "n_fixed": 6, "n_paired": 6, "n_only_unfixed": 1, "n_only_fixed": 0,
                              "n_without_kind": 0, "n_analysed": 6}
    # all: unfixed right q2 q3 q5 (3/6); fixed right q1 q2 q4 q5 (4/6)
    assert g["all"]["before"]["estimate"] == pytest.approx(50.0) and g["all"]["after"]["estimate"] == pytest.approx(400 / 6, abs=1e-3)
    assert (g["all"]["gained"], g["all"]["lost"]) == (2, 1)
    qo = g["question_only"]
    assert qo["n"] == 2 and qo["before"]["estimate"] == 50.0 and qo["after"]["estimate"] == 100.0
    assert qo["delta"]["estimate"] == 50.0 and qo["examples"] == {"gained": ["q1"], "lost": []}
    ao = g["answer_only"]
    assert ao["n"] == 1 and (ao["before"]["estimate"], ao["after"]["estimate"], ao["lost"]) == (100.0, 0.0, 1)
    assert g["both"]["delta"]["estimate"] == 100.0 and g["neither"]["n"] == 2 and g["neither"]["delta"]["estimate"] == 0
    for row in res["groups"]:
        for key in ("before", "after", "delta"):
            assert row[key]["low"] <= row[key]["estimate"] <= row[key]["high"]
    by_type = {(r["kind"], r["question_type"]): r for r in res["by_question_type"]}
    assert by_type[("answer_only", "Numerical")]["n"] == 1 and by_type[("all", "String")]["n"] == 4
    # the kinds from the reference diff give the same groups; the same seed gives the same intervals
    again = an.fix_kinds_study(f["pa"], f["pb"], f["a"], f["b"], "infoseek-strict", label="m", **FAST)
    assert again["groups"] == res["groups"] and "diff of" in again["kinds_from"]


def test_grounded_subset_and_fix_kinds_on_it(fix_files):
    f = fix_files
    sub = an.grounded_subset([f["pa"], f["pb"]], f["b"], stage="post")
    assert sub.ids == {"q1", "q2", "q5"} and sub.info["n"] == 3 and sub.info["n_references"] == 6
    assert sub.info["files"]["pred_unfixed"]["grounded"] == 4 and sub.info["files"]["pred_unfixed"]["unknown_ids"] == 1
    res = an.fix_kinds_study(f["pa"], f["pb"], f["a"], f["b"], "infoseek-strict", subset=sub, label="m", **FAST)
    g = _groups(res)
    assert g["all"]["n"] == 3 and g["all"]["before"]["estimate"] == pytest.approx(200 / 3, abs=1e-3)
    assert g["all"]["after"]["estimate"] == 100.0 and set(g) == {"all", "question_only", "neither"}
    assert res["subset"]["n_items_before"] == 6 and res["subset"]["n_items_in_subset"] == 3
    assert st.study_name(res) == "fix-kinds-m-grounded"
    # top-2 of the post stage: "Z" is second for everyone, never gold; the initial stage is never gold
    assert an.grounded_subset([f["pa"]], f["b"], stage="post", k=2).ids == {"q1", "q2", "q3", "q5"}
    assert an.grounded_subset([f["pa"]], f["b"], stage="initial").ids == frozenset()
    restricted = an.restrict(st.score_items(f["pb"], st.load_references(f["b"], "infoseek-strict"), "infoseek-strict"),
                             sub)
    assert restricted.ids == ["q1", "q2", "q5"] and restricted.correct.tolist() == [True, True, True]


def test_grounded_counts_every_item_that_cannot_count(tmp_path):
    refs = _jsonl(tmp_path / "refs.jsonl", [_sample(f"r{i}", "q?", "a") for i in range(6)])
    preds = _jsonl(tmp_path / "p.jsonl", [
        _pred("r0", "a", pool=["R0", "Other"]),  # gold in the pool
        _pred("r1", "a", pool=["Other"]),  # pool without gold
        _pred("r2", "a", status="error"),  # failed
        {"id": "r3", "answer": "a", "status": "ok", "evidence_used": [{"text": "no url"}]},  # pool names no url
        _pred("r4", "a", pool=["r4"]),  # url spelling differs, canonical form matches
        _pred("zz", "a", pool=["ZZ"]),  # unknown id
    ])  # r5: missing
    res = an.grounded_study({"m": preds}, refs, stage="pool", **FAST)
    run = res["runs"][0]
    assert (run["n"], run["grounded"], run["missing"], run["failed"], run["no_stage"], run["unknown_ids"]) == \
        (6, 2, 1, 1, 1, 1)
    assert run["recall"]["estimate"] == pytest.approx(100 / 3, abs=1e-3) and res["n_grounded_in_all"] == 2
    assert an.final_evidence({"evidence_used": []}, "pool") == []
    with pytest.raises(ValueError, match="no prediction has retrieval stage 'post': none holds .*IBA selected_url"
                                         ".*stages there: initial"):
        an.grounded_study([preds], refs, stage="post")
    assert st.study_name(res) == "grounded-pool" and "grounded" in study_table(res).name


def test_an_aggregated_pool_counts_whole_and_a_ranking_its_top_1(tmp_path):
    """Issue 37: Wiki-PRF's post stage is its aggregated evidence pool (seed 000 §6: "the aggregated evidence
    pool contains the correct target entity"), so its recall is over the pool; a reranked list counts
    its top 1; an explicit k cuts either."""
    refs = _jsonl(tmp_path / "refs.jsonl", [_sample(f"r{i}", "q?", "a") for i in range(4)])
    pool = [W + "X", W + "Y", W + "R0"]  # gold third in the pool
    preds = _jsonl(tmp_path / "prf.jsonl", [
        {"data_id": "r0", "prediction": "a", "retrieved_urls": {"aggregate_initial_plus_tools": pool}},
        {"data_id": "r1", "prediction": "a", "retrieved_urls": {"aggregate_initial_plus_tools": [W + "X"]}},
        {"id": "r2", "answer": "a", "meta": {"retrieval": {"post": {"retrieved": [W + "X", W + "R2"]}}}},  # ranking
        {"id": "r3", "answer": "a", "meta": {"retrieval": {"post": {"retrieved": [W + "X", W + "R3"], "pool": True}}}},
    ])
    run = an.grounded_study({"m": preds}, refs, **FAST)["runs"][0]
    assert (run["grounded"], run["read_as_pool"]) == (2, 3)  # r0 (third of its pool), r3 (a marked pool)
    flags, _ = an.grounded_flags(an._read_predictions(preds)[0], {f"r{i}": [W + f"R{i}"] for i in range(4)})
    assert flags == {"r0": True, "r1": False, "r2": False, "r3": True}
    assert an.grounded_study({"m": preds}, refs, k=1, **FAST)["runs"][0]["grounded"] == 0
    assert an.grounded_study({"m": preds}, refs, k=2, **FAST)["runs"][0]["grounded"] == 2  # r2, r3
    assert "aggregated evidence pool" in an.grounded_study({"m": preds}, refs, **FAST)["scorer"]
    r = runner.invoke(study_app, ["grounded", "-p", str(preds), "-r", str(refs), "--resamples", "100", "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["runs"][0]["grounded"] == 2


# -------------------------------------------------------------------------------- modification rates


def test_modification_rates_hand_computed(tmp_path):
    a = _jsonl(tmp_path / "a.jsonl", [
        _sample("1", "Where?", "Paris", dataset="d1"), _sample("2", "How tall?", "5", "Numerical", dataset="d1"),
        _sample("3", "Who?", "Bo", dataset="d1"), _sample("4", "What?", "x", dataset="d1"),
        _sample("5", "When?", "1990", "Time", dataset="d2"), _sample("6", "Which?", "y", dataset="d2")])
    b_rows = [_sample("1", "In which city?", "Paris", dataset="d1"),
              _sample("2", "How tall in metres?", "5.5", "Numerical", dataset="d1"),
              _sample("3", "Who?", "Bob", dataset="d1"), _sample("4", "What?", "x", dataset="d1"),
              _sample("5", "When?", "1990", "Time", dataset="d2"), _sample("9", "new", "z", dataset="d2")]
    audits = {"1": (["missing_spatial_reference"], "repair", "ok"), "2": (["answer_mismatch"], "repair", "ok"),
              "3": (["answer_mismatch"], "drop", "ok"), "4": ([], "keep", "ok"), "5": ([], "keep", "error"),
              "9": ([], "keep", "ok")}
    for r in b_rows:
        tags, action, status = audits[r["id"]]
        r["audit"] = {"tags": tags, "action": action}
        r["status"] = status
    b = _jsonl(tmp_path / "b.jsonl", b_rows)
    res = an.modification_rates_study(a, b, **FAST)
    rows = {(r["dataset"], r["question_type"]): r for r in res["rows"]}
    allr = rows[("all", "all")]
    # 6 items: 3 dropped by the audit, 6 absent from B -> 2 dropped; 5 errored -> not finished; kept 1, 2, 4
    assert (allr["n"], allr["dropped"], allr["not_finished"], allr["kept"]) == (6, 2, 1, 3)
    assert allr["dropped_pct"]["estimate"] == pytest.approx(100 / 3, abs=1e-3)
    assert (allr["question_modified"], allr["answer_modified"]) == (2, 1)  # 1 question only, 2 both
    assert allr["question_pct"]["estimate"] == pytest.approx(200 / 3, abs=1e-3)
    assert allr["answer_pct"]["estimate"] == pytest.approx(100 / 3, abs=1e-3)
    assert allr["tags"]["answer_mismatch"] == {"n": 2, "pct": 33.33}
    d1 = rows[("d1", "all")]
    assert (d1["n"], d1["dropped"], d1["kept"], d1["question_only"], d1["both"], d1["neither"]) == (4, 1, 3, 1, 1, 1)
    assert rows[("d1", "Numerical")]["answer_pct"]["estimate"] == 100.0
    assert rows[("d2", "Time")]["not_finished"] == 1 and rows[("d2", "Time")]["question_pct"] is None
    assert res["only_in_b"] == {"count": 1, "ids": ["9"]} and res["n_joined"] == 5
    assert [k for k in rows if k[0] == "d1"] == [("d1", "all"), ("d1", "Numerical"), ("d1", "String")]
    tagged = an.modification_rates_study(a, b, tag_field="meta.flag", **FAST)
    assert tagged["rows"][0]["tags"] == {}


def test_modification_rates_from_one_audited_file(fix_files):
    res = an.modification_rates_study(fix_files["audited"], **FAST)
    (r, *types) = res["rows"]
    assert (r["n"], r["dropped"], r["kept"], r["question_modified"], r["answer_modified"]) == (7, 1, 6, 3, 2)
    assert r["tags"] == {"unsupported": {"n": 1, "pct": 14.29}} and res["b"] is None
    assert [t["question_type"] for t in types] == ["Time", "Numerical", "String"]


def _same_rates(d: dict, row: dict) -> None:
    """`audit diff`'s counts and shares equal the study's (one definition, analyses.modification_counts)."""
    for k in ("n", "dropped", "not_finished", "kept", "question_modified", "answer_modified", *an.CHANGE_KINDS):
        assert d[k] == row[k], k
    for share, ci in (("question_share", "question_pct"), ("answer_share", "answer_pct"), ("dropped_share", "dropped_pct")):
        assert d[share] == pytest.approx(row[ci]["estimate"], abs=0.01), share


def test_audit_diff_and_the_study_give_one_modification_rate(fix_files, tmp_path):
    res = an.modification_rates_study(fix_files["a"], fix_files["audited"], **FAST)
    d = diff_versions(fix_files["a"], fix_files["audited"])
    _same_rates(d, res["rows"][0])
    # q7 dropped: 6 kept of 7; q1 q2 q4 questions, q3 q4 answers modified (of the kept)
    assert (d["n"], d["dropped"], d["kept"], d["question_modified"], d["answer_modified"]) == (7, 1, 6, 3, 2)
    assert d["question_share"] == 50.0 and d["denominators"] == res["denominators"] == an.MODIFICATION_DENOMINATORS
    _same_rates(diff_versions(fix_files["a"], fix_files["b"]), an.modification_rates_study(fix_files["a"], fix_files["b"],
                                                                                           **FAST)["rows"][0])
    from kbvqa.report.summaries import audit_diff_table

    assert "% of the kept rows" in audit_diff_table(d).title


@pytest.mark.skipif(not (ARA / "infoseek_fixed.csv").exists(), reason="ARA data not present")
def test_one_modification_rate_on_ara():
    a, b = ARA / "infoseek_unfixed_subset.csv", ARA / "infoseek_fixed.csv"
    _same_rates(diff_versions(a, b), an.modification_rates_study(a, b, n_resamples=100)["rows"][0])


@pytest.mark.skipif(not (ARA / "infoseek_fixed.csv").exists(), reason="ARA data not present")
def test_modification_rates_on_ara_match_the_protocol():
    res = an.modification_rates_study(ARA / "infoseek_unfixed_subset.csv", ARA / "infoseek_fixed.csv",
                                      tag_field="meta.final_check_tag", n_resamples=200)
    r = res["rows"][0]
    # ara-protocol.md §4 (all 1,924 rows; this is a 50% subset): Q 44.9 + 31.0, A 7.2 + 31.0
    assert abs(r["question_pct"]["estimate"] - 75.9) < 4 and abs(r["answer_pct"]["estimate"] - 38.2) < 4
    assert r["dropped"] == 0 and {"OK", "Needs_revision"} <= set(r["tags"])
    ev = an.modification_rates_study(ARA / "evqa_unfixed_test_with_id.csv", ARA / "evqa_fixed.csv", n_resamples=200)
    rows = {(x["dataset"], x["question_type"]): x for x in ev["rows"]}
    assert abs(rows[("all", "all")]["question_pct"]["estimate"] - 45.9) < 4
    assert rows[("all", "all")]["answer_pct"]["estimate"] < 3
    assert abs(rows[("inaturalist", "all")]["question_pct"]["estimate"] - 53.7) < 5


# ------------------------------------------------------------------------------------- per variant


@pytest.fixture()
def variant_files(tmp_path):
    refs, preds = [], []
    # anchors a (String), b (Time); c has only an anchor and an intra variant
    for base, qt, gold in (("a", "String", "Paris"), ("b", "Time", "1990"), ("c", "String", "Oslo")):
        for v in ("anchor", "intra", "inter") if base != "c" else ("anchor", "intra"):
            refs.append(_sample(f"{base}__{v}", "q?", gold, qt, entity=base.upper()))
    right = {"a__anchor", "b__anchor", "c__anchor", "a__inter", "c__intra"}
    grounded = {"a__anchor", "b__anchor", "c__anchor", "a__inter", "b__intra"}
    for r in refs:
        base = r["id"].split("__")[0]
        if r["id"] == "b__inter":
            continue  # missing prediction: wrong, not grounded
        preds.append(_pred(r["id"], r["answers"][0] if r["id"] in right else "nope",
                           post=base.upper() if r["id"] in grounded else "Other"))
    return _jsonl(tmp_path / "aug.jsonl", refs), _jsonl(tmp_path / "aug_pred.jsonl", preds)


def test_variant_accuracy_and_recall_hand_computed(variant_files):
    refs, preds = variant_files
    res = an.variants_study(preds, refs, "infoseek-strict", stage="post", label="m", **FAST)
    v = {r["variant"]: r for r in res["variants"]}
    assert [r["variant"] for r in res["variants"]] == ["anchor", "intra", "inter"] and res["types"] == ["Time", "String"]
    assert (v["anchor"]["n"], v["anchor"]["correct"], v["anchor"]["accuracy"]["estimate"]) == (3, 3, 100.0)
    assert v["intra"]["accuracy"]["estimate"] == pytest.approx(100 / 3, abs=1e-3)
    assert v["inter"]["missing"] == 1 and v["inter"]["accuracy"]["estimate"] == 50.0
    assert v["intra"]["by_type"]["String"] == {"n": 2, "accuracy": v["intra"]["by_type"]["String"]["accuracy"]}
    assert v["intra"]["by_type"]["String"]["accuracy"]["estimate"] == 50.0
    assert v["intra"]["vs_anchor"]["n"] == 3 and v["intra"]["vs_anchor"]["delta"]["estimate"] == pytest.approx(-200 / 3, abs=1e-3)
    assert v["inter"]["vs_anchor"]["n"] == 2 and v["inter"]["vs_anchor"]["lost"] == 1
    assert "vs_anchor" not in v["anchor"]
    r = {x["variant"]: x for x in res["recall"]}
    assert (r["anchor"]["grounded"], r["intra"]["grounded"], r["inter"]["grounded"]) == (3, 1, 1)
    assert r["inter"]["recall"]["estimate"] == 50.0 and r["intra"]["vs_anchor"]["delta"]["estimate"] == pytest.approx(-200 / 3, abs=1e-3)
    assert res["recall_info"]["missing"] == 1 and st.study_name(res) == "variants-m"
    flat = an.variants_study(preds, refs, "infoseek-strict", stage=None, by_type=False, **FAST)
    assert flat["types"] == [] and flat["recall"] is None
    with pytest.raises(ValueError, match="variant suffix"):
        an.variant_accuracy(st.ItemScores(scorer="s", ids=["x"], correct=np.array([True]), missing=np.array([False]),
                                          qtype=["String"]))


# ------------------------------------------------------------------------------------------ buckets


def test_correctness_buckets_hand_computed(tmp_path):
    refs = _jsonl(tmp_path / "r.jsonl", [_sample(f"i{k}", "q?", f"a{k}") for k in range(4)])
    refs_b = _jsonl(tmp_path / "rb.jsonl", [_sample(f"i{k}", "q?", f"b{k}") for k in range(4)])
    # m1 right on i0 i1; m2 right on i0 i2; m3 right on i0
    m = {"m1": {"i0", "i1"}, "m2": {"i0", "i2"}, "m3": {"i0"}}
    files = {}
    for name, right in m.items():
        files[name] = _jsonl(tmp_path / f"{name}.jsonl", [{"data_id": f"i{k}", "prediction": f"a{k}" if f"i{k}" in right
                                                           else "x"} for k in range(4)])
    specs = {n: (p, p) for n, p in files.items()}
    res = an.buckets_study(refs, specs, "infoseek-strict", examples=2, **FAST)
    b = {x["label"]: x for x in res["buckets"]}
    assert len(res["buckets"]) == 8 and res["all_patterns_listed"] and res["n"] == 4
    assert b["all"]["count"] == 1 and b["all"]["examples"] == ["i0"]
    assert b["m1"]["count"] == 1 and b["m2"]["count"] == 1 and b["none"]["count"] == 1 and b["m1 + m2"]["count"] == 0
    assert b["none"]["share"]["estimate"] == 25.0 and sum(x["count"] for x in res["buckets"]) == 4
    assert [a["correct"] for a in res["accuracy"]] == [2, 2, 1]
    # split B: every method's fixed-split file answers b0 (m1 also b3): patterns move
    fb = {n: _jsonl(tmp_path / f"{n}_b.jsonl", [{"data_id": "i0", "prediction": "b0"}] +
                    ([{"data_id": "i3", "prediction": "b3"}] if n == "m1" else [])) for n in m}
    two = an.buckets_study(refs, {n: (files[n], fb[n]) for n in m}, "infoseek-strict", references_b=refs_b,
                           split_names=("unfixed", "fixed"), **FAST)
    moves = {(t["from"], t["to"]): t for t in two["transitions"]}
    assert moves[("m1", "none")]["examples"] == ["i1"] and moves[("m2", "none")]["count"] == 1
    assert moves[("none", "m1")]["examples"] == ["i3"] and two["pairing"]["n_changed"] == 3
    with pytest.raises(ValueError, match="references_b"):
        an.buckets_study(refs, {"m1": (files["m1"], fb["m1"])}, "infoseek-strict")
    with pytest.raises(ValueError, match="different reference ids"):
        an.correctness_buckets({"x": an.restrict(st.score_items(files["m1"], st.load_references(refs, "infoseek-strict"),
                                                                "infoseek-strict"), {"i0"}),
                                "y": st.score_items(files["m2"], st.load_references(refs, "infoseek-strict"),
                                                    "infoseek-strict")})


def test_buckets_across_variants(variant_files):
    refs, preds = variant_files
    res = an.buckets_study(refs, {"m": (preds, preds)}, "infoseek-strict", by_variant=True, **FAST)
    assert res["methods"] == ["anchor", "intra", "inter"] and res["n"] == 2  # c lacks inter: left out, counted
    assert res["accounting"]["anchor"]["n_unknown_ids"] == 1
    b = {x["label"]: x["examples"] for x in res["buckets"] if x["count"]}
    assert b == {"anchor + inter": ["a"], "anchor": ["b"]}


# ------------------------------------------------------------------------------- report and commands


def test_report_build_renders_every_kind(tmp_path, fix_files, variant_files):
    f = fix_files
    out = tmp_path / "res"
    refs, preds = variant_files
    sub = an.grounded_subset([f["pa"], f["pb"]], f["b"])
    results = [an.fix_kinds_study(f["pa"], f["pb"], f["a"], f["b"], "infoseek-strict", label="m", **FAST),
               an.fix_kinds_study(f["pa"], f["pb"], f["a"], f["b"], "infoseek-strict", label="m", subset=sub, **FAST),
               an.grounded_study([f["pa"], f["pb"]], f["b"], **FAST),
               an.modification_rates_study(f["a"], f["audited"], **FAST),
               an.variants_study(preds, refs, "infoseek-strict", label="m", **FAST),
               an.buckets_study(f["b"], {"u": (f["pa"], f["pa"]), "v": (f["pb"], f["pb"])}, "infoseek-strict",
                                subset=sub, **FAST)]
    for r in results:
        st.save_study(out, r)
        assert study_table(r).scorer and study_tables(r)[0].name == study_table(r).name
    assert [len(study_tables(r)) for r in results] == [2, 2, 1, 1, 2, 1]
    rep = build_report(collect_inputs(out), out)
    names = {p.stem for p in rep.tables}
    assert names == {"fix-kinds-m", "fix-kinds-m-by-type", "fix-kinds-m-grounded", "fix-kinds-m-grounded-by-type",
                     "grounded-post", "modification-rates", "variants-m", "variants-m-variant-recall",
                     "buckets-grounded"}  # one file per table: a grounded run never overwrites the full one
    md = re.sub(r"\\(.)", r"\1", rep.markdown.read_text(encoding="utf-8"))  # as rendered: escapes undone
    for heading in ("Accuracy by fix kind: m", "(grounded subset)", "Post-retrieval recall", "Modification rates",
                    "Augmentation variants: m", "Correctness buckets"):
        assert heading in md, heading
    assert "grounded subset: 3 of 6 items" in md and "scorer: infoseek-strict" in md
    assert "paired 6 ids of 7 unfixed / 6 fixed items" in md and "post-retrieval recall per variant" in md
    assert len(rep.plots) == 5 and all(p.stat().st_size > 5000 for p in rep.plots)
    html = rep.html.read_text(encoding="utf-8")
    assert "Table 6 shape" in html and "Tables 3-4 shape" in html


def test_study_commands(tmp_path, fix_files, variant_files):
    f = fix_files
    refs, preds = variant_files
    common = ["--scorer", "infoseek-strict", "--resamples", "200"]
    r = runner.invoke(study_app, ["fix-kinds", "--unfixed", str(f["pa"]), "--fixed", str(f["pb"]), "--references-a",
                                  str(f["a"]), "--references-b", str(f["b"]), "--audited", str(f["audited"]),
                                  "--grounded", str(f["pa"]), "--grounded", str(f["pb"]), "--name", "m", "--json",
                                  *common])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["subset"]["n_items_in_subset"] == 3
    r = runner.invoke(study_app, ["grounded", "-p", f"u={f['pa']}", "-p", str(f["pb"]), "-r", str(f["b"]),
                                  "--ids-out", str(tmp_path / "ids.txt"), "--out", str(tmp_path / "g")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "ids.txt").read_text().split() == ["q1", "q2", "q5"]
    assert (tmp_path / "g" / "grounded-post.study.json").exists() and (tmp_path / "g" / "index.html").exists()
    r = runner.invoke(study_app, ["grounded", "-p", str(f["pa"]), "-r", str(f["b"]), "--stage", "nope"])
    assert r.exit_code == 2 and "stage 'nope'" in r.output
    r = runner.invoke(study_app, ["modification-rates", str(f["a"]), str(f["b"]), "--resamples", "200"])
    assert r.exit_code == 0 and "modification rates" in r.output
    r = runner.invoke(study_app, ["variants", "-p", str(preds), "-r", str(refs), *common])
    assert r.exit_code == 0 and "post-retrieval recall per variant" in r.output
    r = runner.invoke(study_app, ["variants", "-p", str(preds), "-r", str(f["b"]), *common])
    assert r.exit_code == 2 and "variant suffix" in r.output
    r = runner.invoke(study_app, ["buckets", "-r", str(f["b"]), "--method", f"u={f['pa']}", "--method",
                                  f"v={f['pb']}", "--examples", "1", "--json", *common])
    assert r.exit_code == 0, r.output
    assert sum(b["count"] for b in json.loads(r.output)["buckets"]) == 6


# --------------------------------------------------------------------------------------------- demo


@pytest.fixture(scope="module")
def demo(tmp_path_factory, demo_copy):
    """`kbvqa demo`'s outputs, plus the answerer's predictions on the augmented samples when the demo
    does not write them itself (the same `_answer` call, image root the demo folder)."""
    from kbvqa.demo.run import _answer
    from kbvqa.kb.image_index import ImageIndex
    from kbvqa.kb.store import KBStore

    out, res = demo_copy(tmp_path_factory.mktemp("demo") / "d")
    aug = out / "answers" / "predictions_augmented.jsonl"
    if not aug.exists():
        from kbvqa.demo.bench import DemoBench

        bench = DemoBench(root=out, samples=out / "bench" / "samples.jsonl", kb=out / "bench" / "kb.sqlite",
                          kb_images={}, flaws={}, n_samples=0)
        kb = KBStore(bench.kb)
        _answer(bench, out / "augment" / "samples.jsonl", aug,
                ImageIndex.load(out / "bench" / "image_index"), kb, {}, 2, False)
        kb.close()
    return out, res


def test_every_analysis_on_the_demo(demo, tmp_path):
    out, run = demo
    res = an.demo_analyses(out, studies_dir=tmp_path / "studies", n_resamples=500)
    s = res["studies"]
    assert res["skipped"] == {} and set(s) == {"grounded", "fix-kinds", "fix-kinds-grounded", "modification-rates",
                                               "variants", "buckets"}
    fk = s["fix-kinds"]
    n_orig, n_fixed = run.scores["original"]["strict"]["n"], run.scores["fixed"]["strict"]["n"]
    assert (fk["pairing"]["n_unfixed"], fk["pairing"]["n_fixed"]) == (n_orig, n_fixed)
    assert fk["pairing"]["n_only_unfixed"] == n_orig - n_fixed and fk["pairing"]["n_without_kind"] == 0
    g = _groups(fk)
    fixed_acc = run.scores["fixed"]["strict"]["accuracy"]
    assert g["all"]["after"]["estimate"] == pytest.approx(fixed_acc, abs=0.01)
    items = run.scores["original"]["items"]
    paired = [i for i in items if i in run.scores["fixed"]["items"]]
    assert g["all"]["before"]["estimate"] == pytest.approx(100 * sum(items[i] for i in paired) / len(paired), abs=0.01)
    assert sum(r["n"] for r in fk["groups"][1:]) == g["all"]["n"]
    mr = s["modification-rates"]["rows"][0]
    assert (mr["n"], mr["dropped"], mr["kept"]) == (n_orig, n_orig - n_fixed, n_fixed)
    assert mr["question_modified"] == g["question_only"]["n"] + g.get("both", {"n": 0})["n"]
    v = {r["variant"]: r for r in s["variants"]["variants"]}
    assert {"anchor", "intra", "inter", "blank", "double"} <= set(v)
    assert v["intra"]["accuracy"]["estimate"] <= v["anchor"]["accuracy"]["estimate"]
    rec = {r["variant"]: r for r in s["variants"]["recall"]}
    assert rec["anchor"]["recall"]["estimate"] >= rec["intra"]["recall"]["estimate"]
    assert s["buckets"]["methods"] == [r["variant"] for r in s["variants"]["variants"]]
    assert sum(b["count"] for b in s["buckets"]["buckets"]) == s["buckets"]["n"]
    rep = build_report(collect_inputs(tmp_path / "studies"), tmp_path / "studies")
    md = rep.markdown.read_text(encoding="utf-8")
    assert "Accuracy by fix kind: extractive" in md and "QA accuracy per augmentation variant" in md


def test_by_type_and_compare_take_the_grounded_subset(fix_files, tmp_path):
    f = fix_files
    sub = an.grounded_subset([f["pb"]], f["b"], stage="post")  # the fixed run: q1 q2 q5 q6
    res = st.by_type_study(f["pb"], f["b"], "infoseek-strict", label="m", subset=sub, **FAST)
    # right on q1 q2 q5 of the four (q6 wrong): 75%, against 4/6 on every item
    assert res["overall"]["n"] == 4 and res["overall"]["estimate"] == pytest.approx(75.0)
    assert res["subset"]["n_items_before"] == 6 and res["subset"]["n_items_in_subset"] == 4
    assert st.study_name(res) == "by-question-type-m-grounded"
    assert "grounded subset: 4 of 6" in " ".join(study_table(res).notes)
    both = an.grounded_subset([f["pa"], f["pb"]], f["b"], stage="post")  # grounded in both runs: q1 q2 q5
    cmp_ = st.compare_study(f["b"], f["b"], {"m": (f["pa"], f["pb"])}, "infoseek-strict", subset=both, **FAST)
    (m,) = cmp_["methods"]
    assert m["n_paired"] == 3 and m["accuracy_b"] == pytest.approx(100.0) and st.study_name(cmp_) == "compare-grounded"
    out = CliRunner().invoke(study_app, ["by-type", "-p", str(f["pb"]), "-r", str(f["b"]), "--scorer", "infoseek-strict",
                                         "--grounded", str(f["pb"]), "--json", "--resamples", "300"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["subset"]["n_items_in_subset"] == 4
