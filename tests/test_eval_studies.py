"""Studies: bootstrap CIs, grouped tables, paired comparisons, ranking reversals, 2x2, study CLI,
the semantic E-VQA approximation (real MiniLM), and the ARA unfixed-vs-fixed reversal."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kbvqa.cli.score import app as score_app
from kbvqa.cli.study import app as study_app
from kbvqa.evaluate import studies as st

runner = CliRunner()
ARA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ara"


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# -------------------------------------------------------------------------------------------- bootstrap


def test_bootstrap_is_seeded_and_contains_estimate():
    rng = np.random.default_rng(1)
    x = rng.random(300) < 0.6
    a = st.bootstrap_ci(x, seed=7)
    assert a == st.bootstrap_ci(x, seed=7)
    assert a != st.bootstrap_ci(x, seed=8)
    assert a.low <= a.estimate <= a.high and a.estimate == pytest.approx(x.mean())
    # continuous values take the index-resampling path
    y = rng.normal(size=200)
    b = st.bootstrap_ci(y, seed=3, n_resamples=500)
    assert b.low < y.mean() < b.high


def test_bootstrap_width_shrinks_with_n():
    rng = np.random.default_rng(0)
    small = st.bootstrap_ci(rng.random(100) < 0.5, seed=0)
    large = st.bootstrap_ci(rng.random(10_000) < 0.5, seed=0)
    assert (large.high - large.low) < 0.25 * (small.high - small.low)
    # roughly the normal-theory width for p=0.5: 2*1.96*sqrt(.25/n)
    assert large.high - large.low == pytest.approx(2 * 1.96 * 0.5 / 100, rel=0.15)


def test_multinomial_path_matches_index_resampling_distribution():
    """The fast path draws counts; index resampling draws items: same distribution of means."""
    x = np.array([1.0] * 30 + [0.0] * 70)
    fast = st.bootstrap_ci(x, seed=0, n_resamples=4000)
    rng = np.random.default_rng(5)
    slow = x[rng.integers(0, 100, size=(4000, 100))].mean(axis=1)
    lo, hi = np.quantile(slow, [0.025, 0.975])
    assert fast.low == pytest.approx(lo, abs=0.02) and fast.high == pytest.approx(hi, abs=0.02)


def test_paired_delta_sign_and_mcnemar():
    a = np.array([1, 0, 0, 0, 1, 0, 0, 0] * 25, dtype=float)
    b = np.array([1, 1, 1, 0, 1, 1, 0, 0] * 25, dtype=float)  # b never loses an item a had
    d = st.paired_delta_ci(a, b, seed=0)
    assert d.estimate == pytest.approx(b.mean() - a.mean()) and d.low > 0
    d2 = st.paired_delta_ci(b, a, seed=0)
    assert d2.estimate < 0 and d2.high < 0
    assert st.mcnemar_exact_p(0, 0) == 1.0
    assert st.mcnemar_exact_p(0, 10) == pytest.approx(2 / 1024)
    assert st.mcnemar_exact_p(5, 5) == 1.0


# -------------------------------------------------------------------------------------------- fixtures


@pytest.fixture()
def infoseek_refs(tmp_path):
    """Two aligned reference splits: B changes the answers of q3 and q4."""
    rows_a = [("q1", "Paris", "String"), ("q2", "10", "Numerical"), ("q3", "Lyon", "String"),
              ("q4", "1989", "Time"), ("q5", "Rome", "String"), ("q6", "Oslo", "String")]
    rows_b = [r if r[0] not in ("q3", "q4") else (r[0], {"q3": "Marseille", "q4": "1975"}[r[0]], r[2]) for r in rows_a]

    def write(name, rows):
        p = tmp_path / name
        with open(p, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["data_id", "answer", "question_type", "category"])
            for i, (d, a, t) in enumerate(rows):
                w.writerow([d, a, t, "building" if i % 2 else "plant"])
        return p

    return write("a.csv", rows_a), write("b.csv", rows_b)


def _preds(tmp_path, name, answers):
    return _jsonl(tmp_path / f"{name}.jsonl", [{"data_id": d, "prediction": a} for d, a in answers.items()])


# -------------------------------------------------------------------------------------------- studies


def test_by_group_question_type_and_field(tmp_path, infoseek_refs):
    ra, _ = infoseek_refs
    p = _preds(tmp_path, "m", {"q1": "Paris", "q2": "10", "q3": "Nice", "q4": "1989", "zz": "x"})
    refs = st.load_references(ra, "infoseek-reward")
    sc = st.score_items(p, refs, "infoseek-reward", label="m")
    assert sc.correct.tolist() == [True, True, False, True, False, False]
    assert sc.accounting()["n_missing"] == 2 and sc.n_unknown == 1
    res = st.by_group(sc, "question_type", seed=0, n_resamples=500)
    g = {r["group"]: r for r in res["groups"]}
    assert g["String"]["n"] == 4 and g["String"]["correct"] == 1 and g["String"]["accuracy"] == 25.0
    assert g["Numerical"]["accuracy"] == 100.0 and res["scorer"] == "infoseek-reward (ARA authors' scorer)"
    assert res["overall"]["estimate"] == pytest.approx(50.0)
    for r in res["groups"]:
        assert r["ci_low"] <= r["accuracy"] <= r["ci_high"]
    by_cat = st.by_group(sc, "category", st.group_labels(ra, "category"), n_resamples=500)
    assert {r["group"]: r["n"] for r in by_cat["groups"]} == {"building": 3, "plant": 3}
    with pytest.raises(ValueError, match="needs labels"):
        st.by_group(sc, "category")


def test_group_labels_meta_key(tmp_path):
    p = _jsonl(tmp_path / "r.jsonl", [{"id": "a", "meta": {"intent": "who"}}, {"id": "b", "meta": {}},
                                      {"id": "c", "intent": "top"}])
    assert st.group_labels(p, "meta.intent") == {"a": "who", "b": "(none)", "c": "(none)"}
    assert st.group_labels(p, "intent") == {"a": "who", "b": "(none)", "c": "top"}


def test_compare_splits_detects_reversal(tmp_path, infoseek_refs):
    ra, rb = infoseek_refs
    # old: right on the unfixed answers of q3/q4; new: right on the fixed ones, but misses q1
    old = _preds(tmp_path, "old", {"q1": "Paris", "q2": "10", "q3": "Lyon", "q4": "1989"})
    new = _preds(tmp_path, "new", {"q2": "10", "q3": "Marseille", "q4": "1975"})
    A, B = st.load_references(ra, "infoseek-strict"), st.load_references(rb, "infoseek-strict")
    runs = {n: (st.score_items(p, A, "infoseek-strict", label=n), st.score_items(p, B, "infoseek-strict", label=n))
            for n, p in (("old", old), ("new", new))}
    res = st.compare_splits(runs, split_names=("unfixed", "fixed"), n_resamples=300)
    m = {x["method"]: x for x in res["methods"]}
    assert m["old"]["accuracy_a"] == pytest.approx(400 / 6, abs=1e-3) and m["old"]["accuracy_b"] == pytest.approx(200 / 6, abs=1e-3)
    assert m["old"]["delta"] < 0 < m["new"]["delta"]
    assert (m["old"]["lost"], m["old"]["gained"], m["new"]["gained"]) == (2, 0, 2)
    assert (m["old"]["rank_a"], m["old"]["rank_b"], m["new"]["rank_a"], m["new"]["rank_b"]) == (1, 2, 2, 1)
    assert res["n_reversals"] == 1 and res["pairs"][0]["status"] == "reversed"
    assert res["scorer"] == "infoseek-strict (kbvqa's reading)"


def test_ranking_and_reversal_statuses():
    assert st.ranking({"a": 50.0, "b": 60.0, "c": 50.0, "d": 10.0}) == {"b": 1, "a": 2, "c": 2, "d": 4}
    pairs = st.ranking_reversals({"a": 1.0, "b": 2.0, "c": 2.0}, {"a": 3.0, "b": 2.0, "c": 1.0})
    status = {(p["method_1"], p["method_2"]): p["status"] for p in pairs}
    assert status == {("a", "b"): "reversed", ("a", "c"): "reversed", ("b", "c"): "tie-on-a"}


def test_compare_requires_same_ids(tmp_path, infoseek_refs):
    ra, _ = infoseek_refs
    short = tmp_path / "short.csv"
    short.write_text("data_id,answer,question_type\nq1,Paris,String\n", encoding="utf-8")
    p = _preds(tmp_path, "p", {"q1": "Paris"})
    A, S = st.load_references(ra, "infoseek-strict"), st.load_references(short, "infoseek-strict")
    runs = {"p": (st.score_items(p, A, "infoseek-strict"), st.score_items(p, S, "infoseek-strict"))}
    with pytest.raises(ValueError, match="different ids"):
        st.compare_splits(runs, n_resamples=100)
    res = st.compare_splits(runs, n_resamples=100, allow_partial=True)
    assert res["alignment"] == {"n_common": 1, "n_only_a": 5, "n_only_b": 0}


def test_retrieval_2x2_counts(tmp_path, infoseek_refs):
    ra, _ = infoseek_refs
    w = _preds(tmp_path, "with", {"q1": "Paris", "q2": "10", "q3": "Lyon", "q5": "no"})
    wo = _preds(tmp_path, "without", {"q1": "Paris", "q2": "99", "q4": "1989", "q3": "no"})
    refs = st.load_references(ra, "infoseek-reward")
    res = st.retrieval_2x2(st.score_items(w, refs, "infoseek-reward", label="rag"),
                           st.score_items(wo, refs, "infoseek-reward", label="closed-book"), n_resamples=300)
    o = res["overall"]
    assert (o["both_correct"], o["only_with"], o["only_without"], o["neither"], o["n"]) == (1, 2, 1, 2, 6)
    assert o["only_with_pct"] == pytest.approx(33.33) and sum(o[f"{k}_pct"] for k in
                                                             ("both_correct", "only_with", "only_without", "neither")) \
        == pytest.approx(100, abs=0.05)
    assert res["gain"]["estimate"] == pytest.approx(100 / 6, abs=1e-3)
    assert res["by_question_type"]["String"]["n"] == 4


# -------------------------------------------------------------------------------------------- CLI


def test_study_cli_by_type_compare_2x2(tmp_path, infoseek_refs):
    ra, rb = infoseek_refs
    old = _preds(tmp_path, "old", {"q1": "Paris", "q2": "10", "q3": "Lyon", "q4": "1989"})
    new = _preds(tmp_path, "new", {"q2": "10", "q3": "Marseille", "q4": "1975"})
    out = tmp_path / "res"
    r = runner.invoke(study_app, ["by-type", "-p", str(old), "-r", str(ra), "--scorer", "infoseek-strict",
                                  "--resamples", "200", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["overall"]["correct"] == 4
    r = runner.invoke(study_app, ["compare", "--references-a", str(ra), "--references-b", str(rb),
                                  "--method", f"old={old}", "--method", f"new={new}", "--scorer", "infoseek-strict",
                                  "--split-names", "unfixed,fixed", "--resamples", "200", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "reversal: old vs new" in r.stdout
    saved = json.loads((out / "compare.study.json").read_text())
    assert saved["n_reversals"] == 1 and saved["references"]["fixed"] == str(rb)
    assert (out / "index.html").is_file() and (out / "plots" / "compare-ranks.png").is_file()
    r = runner.invoke(study_app, ["retrieval-2x2", "--with", str(new), "--without", str(old), "-r", str(rb),
                                  "--scorer", "infoseek-strict", "--resamples", "200", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["overall"]["n"] == 6
    r = runner.invoke(study_app, ["compare", "--references-a", str(ra), "--references-b", str(rb),
                                  "--method", "broken", "--scorer", "evqa"])
    assert r.exit_code != 0


# -------------------------------------------------------------------------------------------- semantic


def test_semantic_backend_real_minilm(tmp_path):
    """Real all-MiniLM-L6-v2: paraphrase rescued, different entity and different year not; labelled."""
    from kbvqa.evaluate import evqa as ev
    from kbvqa.evaluate.io import load_predictions
    from kbvqa.evaluate.semantic import SEMANTIC_LABEL, SemanticBackend

    refs_p = tmp_path / "evqa.csv"
    refs_p.write_text("data_id,question,answer,question_type\n"
                      "e1,Where is it?,New York City,templated\n"
                      "e2,Which city?,Paris,automatic\n"
                      "e3,When built?,1989,automatic\n"
                      "e4,What is it?,Eiffel Tower,automatic\n", encoding="utf-8")
    preds_p = _jsonl(tmp_path / "p.jsonl", [{"data_id": "e1", "prediction": "NYC, New York"},
                                            {"data_id": "e2", "prediction": "London"},
                                            {"data_id": "e3", "prediction": "1990"},
                                            {"data_id": "e4", "prediction": "the eiffel tower"}])
    backend = SemanticBackend()
    res = ev.score_evqa(load_predictions(preds_p), ev.load_evqa_references(refs_p), backend=backend, per_item=True)
    items = {i["data_id"]: i for i in res.items}
    assert items["e4"]["em"] and items["e4"]["scorer"] == "evqa-em"  # EM first, backend never asked
    assert items["e1"]["correct"] and not items["e1"]["em"] and items["e1"]["judge_value"] >= 0.8
    assert not items["e2"]["correct"] and not items["e3"]["correct"]
    assert "number guard" in items["e3"]["judge_rationale"]
    assert SEMANTIC_LABEL in res.summary["scorer"] and SEMANTIC_LABEL in items["e1"]["scorer"]
    assert res.summary["judge"]["kind"] == "semantic-approx" and res.summary["judge"]["threshold"] == 0.8
    # the CLI flag produces the same labelled number; two backends at once are refused
    r = runner.invoke(score_app, ["evqa", "-p", str(preds_p), "-r", str(refs_p), "--semantic", "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["accuracy"] == 50.0 and "not BEM" in s["scorer"]
    r = runner.invoke(score_app, ["evqa", "-p", str(preds_p), "-r", str(refs_p), "--semantic",
                                  "--judge-base-url", "http://127.0.0.1:9/v1", "--judge-model", "m"])
    assert r.exit_code == 2 and "choose one" in r.output


def test_judge_role_from_config(tmp_path):
    """--config kbvqa.toml --judge-role: the judge comes from model roles; a missing role is loud."""
    from kbvqa.pipelines.score import judge_client

    cfg = tmp_path / "kbvqa.toml"
    cfg.write_text('[models.judge]\nbackend = "openai"\nmodel = "judge-x"\nbase_url = "http://127.0.0.1:9/v1"\n',
                   encoding="utf-8")
    client = judge_client(config=cfg)
    assert client.provenance.model == "judge-x"
    with pytest.raises(ValueError, match="'checker' is not configured"):
        judge_client(config=cfg, role="checker")
    with pytest.raises(ValueError, match="choose either"):
        judge_client(base_url="http://x/v1", model="m", config=cfg)


# -------------------------------------------------------------------------------------------- ARA data


@pytest.mark.skipif(not (ARA / "ground_truth" / "infoseek_fixed.csv").is_file(), reason="ARA data absent")
def test_ara_unfixed_vs_fixed_reversal(tmp_path):
    src_u = ARA / "ground_truth" / "infoseek_unfixed_subset.csv"
    src_f = ARA / "ground_truth" / "infoseek_fixed.csv"

    def rows(path):
        with open(path, newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))

    ru, rf = rows(src_u), rows(src_f)

    def write(name, rs):
        p = tmp_path / name
        with open(p, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rs[0]))
            w.writeheader()
            w.writerows(rs)
        return p

    unfixed, fixed = write("unfixed.csv", ru), write("fixed.csv", rf)
    ua = {r["data_id"]: r["answer"].split("|")[0] for r in ru}
    fa = {r["data_id"]: r["answer"].split("|")[0] for r in rf}
    assert ua.keys() == fa.keys() and len(ua) > 900
    p_old = _jsonl(tmp_path / "old.jsonl", [{"data_id": d, "prediction": a} for d, a in ua.items()])
    p_new = _jsonl(tmp_path / "new.jsonl", [{"data_id": d, "prediction": a} for d, a in fa.items()])
    out = tmp_path / "ara"
    r = runner.invoke(study_app, ["compare", "--references-a", str(unfixed), "--references-b", str(fixed),
                                  "--method", f"answers-unfixed={p_old}", "--method", f"answers-fixed={p_new}",
                                  "--scorer", "infoseek-reward", "--split-names", "unfixed,fixed",
                                  "--resamples", "500", "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    m = {x["method"]: x for x in res["methods"]}
    # each synthetic method is (near) perfect on its own split and loses on the other one
    assert m["answers-unfixed"]["accuracy_a"] > 95 and m["answers-fixed"]["accuracy_b"] > 95
    assert m["answers-unfixed"]["delta"] < -10 and m["answers-unfixed"]["delta_ci"]["high"] < 0
    assert m["answers-fixed"]["delta"] > 10 and m["answers-fixed"]["delta_ci"]["low"] > 0
    assert (m["answers-unfixed"]["rank_a"], m["answers-unfixed"]["rank_b"]) == (1, 2)
    assert res["n_reversals"] == 1
    assert (out / "tables" / "compare-reversals.tex").is_file()


# -------------------------------------------------------------------------------------------- BEM


def _tiny_bem(path, bias):
    """A tiny random BERT classifier saved as a transformers directory; the classifier bias decides
    P(equivalent), so the plumbing (inputs, softmax, threshold, max over alternatives) is checkable."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    path.mkdir()
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "blue", "jay", "red", "bird", "what", "is", "it", "?"]
    (path / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    BertTokenizer(str(path / "vocab.txt")).save_pretrained(str(path))
    cfg = BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, type_vocab_size=3, num_labels=2, max_position_embeddings=512)
    model = BertForSequenceClassification(cfg)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor(bias))
    model.save_pretrained(str(path))
    return path


def test_bem_local_directory(tmp_path):
    from kbvqa.evaluate import evqa as ev
    from kbvqa.evaluate.io import load_predictions

    with pytest.raises(RuntimeError, match="not available.*TensorFlow SavedModel"):
        (tmp_path / "tf").mkdir()
        (tmp_path / "tf" / "saved_model.pb").write_bytes(b"x")
        ev.load_bem(tmp_path / "tf")
    yes = ev.load_bem(_tiny_bem(tmp_path / "bem_yes", [-3.0, 3.0]))
    ids, types = yes.encode("blue jay", "red bird", "what is it ?")
    assert ids[0] == yes.tokenizer.cls_token_id and ids.count(yes.tokenizer.sep_token_id) == 3
    assert types == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2]  # CLS cand SEP | ref SEP | question SEP
    refs_p = tmp_path / "r.csv"
    refs_p.write_text("data_id,question,answer,question_type\na,what is it ?,red bird,automatic\n"
                      "b,what is it ?,blue jay,automatic\n", encoding="utf-8")
    preds_p = _jsonl(tmp_path / "p.jsonl", [{"data_id": "a", "prediction": "blue jay"},
                                            {"data_id": "b", "prediction": "blue jay"}])
    refs, preds = ev.load_evqa_references(refs_p), load_predictions(preds_p)
    res = ev.score_evqa(preds, refs, backend=yes, per_item=True)
    items = {i["data_id"]: i for i in res.items}
    assert items["a"]["correct"] and items["a"]["scorer"].startswith("evqa-em+bem(local:bem_yes)")
    assert items["a"]["judge_value"] == pytest.approx(1 / (1 + np.exp(-6)), abs=1e-3)
    assert items["b"]["em"] and res.summary["judge"]["kind"] == "bem"
    no = ev.load_bem(_tiny_bem(tmp_path / "bem_no", [3.0, -3.0]))
    assert not ev.score_evqa(preds, refs, backend=no, per_item=True).items[0]["correct"]
    r = runner.invoke(score_app, ["evqa", "-p", str(preds_p), "-r", str(refs_p), "--bem-dir",
                                  str(tmp_path / "bem_yes"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["scorer"] == "evqa-em+bem(local:bem_yes)"


def test_judge_model_shorthand_needs_no_base_url():
    """--judge-model ollama/NAME alone: the provider's default local URL, the model name after the '/';
    a plain name without a URL is still an error that says how to fix it."""
    from kbvqa.pipelines.score import judge_client, judge_clients

    client = judge_client(model="ollama/qwen2.5:7b")
    assert client.provenance.base_url == "http://127.0.0.1:11434/v1" and client.provenance.model == "qwen2.5:7b"
    (vllm,) = judge_clients(models=["vllm/Qwen/Qwen2.5-7B-Instruct"])
    assert vllm.provenance.base_url == "http://127.0.0.1:8000/v1"
    assert vllm.provenance.model == "Qwen/Qwen2.5-7B-Instruct"
    with pytest.raises(ValueError, match="PROVIDER/NAME"):
        judge_client(model="qwen2.5")
