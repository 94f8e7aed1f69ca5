"""The ARA authors' released method outputs and data files, read as released (issue 29, part 1).

The fixtures under tests/data/ara_released/ have the shapes of the sample files in the authors'
repository (VAN-QIAN/ECCV26-ARA outputs/generated_methods/ and data/; see the README there), one
sample each, with made-up values. Gold entity of infoseek_val_00000001: Church_of_Saint_Example; of
E-VQA_0: Fort_Example.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.formats import read_samples, write_samples
from kbvqa.data.stats import dataset_stats
from kbvqa.evaluate import analyses as an
from kbvqa.evaluate import methods as mt
from kbvqa.evaluate.io import ScoreInputError, load_infoseek_references
from kbvqa.evaluate.retrieval import load_retrieval_references

HERE = Path(__file__).parent / "data" / "ara_released"
WIKIPRF = HERE / "wikiprf" / "sample_results_infoseek_fixed_step600_topk3.json_0"
LEGACY = WIKIPRF.with_name(WIKIPRF.name + ".json")
DETAILS = WIKIPRF.with_name(WIKIPRF.name + "_generation_details.jsonl")
RECALL = WIKIPRF.with_name(WIKIPRF.name + "_recall_details.jsonl")
GOLD = "https://en.wikipedia.org/wiki/Church_of_Saint_Example"
ID = "infoseek_val_00000001"
FAST = {"n_resamples": 50}
runner = CliRunner()


def _run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


# ------------------------------------------------------------------------------------------ readers


def test_echosight_reranker_file_as_released():
    r = mt.convert("echosight", HERE / "echosight_evqa_sample_reranker_k3.json", references=HERE / "evqa_fixed.csv")
    (p,) = r.predictions
    assert (p.data_id, p.prediction, p.parse_rule) == ("E-VQA_0", None, "echosight-reranker:no-answer")
    assert p.retrieval["post"] == {"retrieved": ["https://en.wikipedia.org/wiki/Fort_Example",
                                                 "https://en.wikipedia.org/wiki/Castle_Example",
                                                 "https://en.wikipedia.org/wiki/Bridge_Example"],
                                   "from": "reranked_entries"}
    assert p.retrieval["initial"]["from"] == "retrieved_entries"
    assert r.alignment.n_null_predictions == 1 and any("no answer" in w for w in r.warnings)
    assert r.summary()["n_with_retrieval"] == 1


def test_wikiprf_legacy_object_followed_by_total_time():
    r = mt.convert("wikiprf", LEGACY, references=HERE / "infoseek_fixed.csv")
    (p,) = r.predictions
    assert (p.data_id, p.prediction) == (ID, "Belgium")
    assert p.parse_rule == "doc:first-object;id:data_id[];results" and p.retrieval is None
    assert any("Total Time: 74.25 s" in w and "authors' loader" in w for w in r.warnings)


def test_wikiprf_details_keep_stages_and_the_authors_hits():
    (p,) = mt.convert("wikiprf", DETAILS).predictions
    assert p.prediction == "Belgium" and p.parse_rule == "key:prediction"
    assert p.retrieval["post"]["from"] == "retrieved_urls.aggregate_initial_plus_tools"
    assert p.retrieval["post"]["hits"] == {"top1": False, "top3": True}
    assert set(p.retrieval) >= {"initial", "caption", "grounding", "flip", "aggregate_initial_plus_tools", "post"}
    with pytest.raises(ScoreInputError, match="no answer key"):  # the recall file holds retrieval only
        mt.convert("wikiprf", RECALL)


def test_iba_answers_keep_selected_url_and_metadata_is_not_answers():
    (p,) = mt.convert("iba", HERE / "iba_sample_answers.jsonl").predictions
    assert p.prediction == "The church stands in Belgium." and p.retrieval == {
        "post": {"retrieved": [GOLD], "from": "selected_url"}}
    with pytest.raises(ScoreInputError, match="no answer key"):
        mt.convert("iba", HERE / "iba_sample_metadata.jsonl")
    stages = mt.method_stages(json.loads((HERE / "iba_sample_metadata.jsonl").read_text()))
    assert [stages[s]["from"] for s in ("initial", "reranked", "post")] == ["candidate_urls", "reranked_urls",
                                                                              "selected_url"]
    assert mt.method_stages({"selected_url": None}) == {"post": {"retrieved": [], "from": "selected_url"}}


def test_reflectiva_and_comem_as_released():
    (p,) = mt.convert("reflectiva", HERE / "reflectiva_sample_predictions.json").predictions
    assert (p.data_id, p.prediction) == (ID, "Belgium")
    for rules, rule in (("kbvqa", "boxed"), ("authors", "authors:boxed")):
        r = mt.convert("comem", HERE / "comem_sample.jsonl", rules=rules)
        assert [(q.prediction, q.parse_rule) for q in r.predictions] == [("Belgium", rule)]
        assert r.summary()["rules"] == rules and not r.warnings


@pytest.mark.parametrize("text,kbvqa,authors", [
    ("<answer>Paris</answer> later <answer>Lyon</answer>", "Lyon", ("Paris", "authors:answer-tag")),
    ("Final answer: Paris\nbecause of the river", "Paris", ("Paris\nbecause of the river", "authors:final-answer")),
    ("<answer>so \\boxed{Nice}</answer>", "Nice", ("Nice", "authors:boxed")),  # a boxed wins in both
    ("\\boxed{Lyon} and \\boxed{x", "Lyon", ("\\boxed{Lyon} and \\boxed{x", "authors:raw")),
])
def test_comem_authors_extraction_where_it_differs(tmp_path, text, kbvqa, authors):
    assert mt.extract_comem(text)[0] == kbvqa and mt.extract_comem_authors(text) == authors
    f = tmp_path / "c.jsonl"
    f.write_text(json.dumps({"data_id": "a", "prediction": text}) + "\n", encoding="utf-8")
    r = mt.convert("comem", f)
    assert bool(r.warnings) == (kbvqa != authors[0])  # kbvqa's rules say when the authors' would differ


def test_read_records_refuses_the_legacy_file_naming_the_missing_field():
    with pytest.raises(ScoreInputError, match="retrieved_urls.*legacy results file"):
        list(mt.read_records(LEGACY))
    assert [w for w, _ in mt.read_records(HERE / "echosight_evqa_sample_reranker_k3.json")][0].endswith("['E-VQA_0']")


# ---------------------------------------------------------------------------------- grounded study


def test_grounded_reads_each_methods_own_fields():
    refs = HERE / "infoseek_fixed.csv"
    res = an.grounded_study({"iba": HERE / "iba_sample_metadata.jsonl", "wikiprf": DETAILS, "recall": RECALL},
                            refs, **FAST)
    got = {r["run"]: (r["grounded"], r["no_stage"], r["missing"]) for r in res["runs"]}
    # IBA's selected_url is the gold; Wiki-PRF's aggregated pool has it second: the pool counts whole (issue 37)
    assert got == {"iba": (1, 0, 1), "wikiprf": (1, 0, 1), "recall": (1, 0, 1)}
    assert {r["run"]: r["read_as_pool"] for r in res["runs"]} == {"iba": 0, "wikiprf": 1, "recall": 1}
    top1 = an.grounded_study({"wikiprf": DETAILS}, refs, k=1, **FAST)["runs"][0]
    assert top1["grounded"] == 0  # an explicit k cuts the pool (the old top-1 reading)
    k3 = an.grounded_study({"wikiprf": DETAILS}, refs, k=3, **FAST)["runs"][0]
    assert k3["grounded"] == 1 and k3["authors_hits"]["n"] == 1 and k3["authors_hits"]["disagree"] == 0
    initial = an.grounded_study({"iba": HERE / "iba_sample_metadata.jsonl"}, refs, stage="initial", k=2, **FAST)
    assert initial["runs"][0]["grounded"] == 1  # candidate_urls: gold second


def test_grounded_refuses_a_run_without_the_stage(tmp_path):
    refs = HERE / "infoseek_fixed.csv"
    conv = tmp_path / "reflectiva.jsonl"
    mt.write_predictions(conv, mt.convert("reflectiva", HERE / "reflectiva_sample_predictions.json").predictions)
    for stage, field in (("post", "IBA selected_url"), ("initial", "EchoSight retrieved_entries")):
        with pytest.raises(ValueError, match=f"no prediction has retrieval stage '{stage}'.*{field}"):
            an.grounded_study([conv], refs, stage=stage, **FAST)
    # a kbvqa line without `retrieved` is no empty initial stage (the old silent 0)
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({"sample_id": ID, "answer": "Belgium", "status": "ok"}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no prediction has retrieval stage 'initial'"):
        an.grounded_study([bare], refs, stage="initial", **FAST)
    # a run none of whose ids is a reference is refused too
    with pytest.raises(ValueError, match="none of its 1 predictions has a reference id"):
        an.grounded_study([HERE / "echosight_evqa_sample_reranker_k3.json"], refs, **FAST)
    with pytest.raises(ScoreInputError, match="retrieved_urls"):
        an.grounded_study([LEGACY], refs, **FAST)


def test_cli_convert_then_grounded_as_a_user_runs_it(tmp_path, monkeypatch):
    """End to end through the CLI, cache on, relative paths, from another working directory."""
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    work = tmp_path / "work"
    shutil.copytree(HERE, work / "release")
    monkeypatch.chdir(work)
    r = _run("score", "convert-predictions", "release/echosight_evqa_sample_reranker_k3.json", "--method",
             "echosight", "-o", "echosight.jsonl", "-r", "release/evqa_fixed.csv", "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["parse_rules"] == {"echosight-reranker:no-answer": 1} and summary["rules"] == "kbvqa"
    r = _run("study", "grounded", "-p", "converted=echosight.jsonl", "-p",
             "released=release/echosight_evqa_sample_reranker_k3.json", "-r", "release/evqa_fixed.csv",
             "--resamples", "50", "--json", "--out", "studies", "--no-report")
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert [(x["run"], x["grounded"], x["no_stage"]) for x in res["runs"]] == [("converted", 1, 0), ("released", 1, 0)]
    assert (work / "studies").is_dir()
    r = _run("study", "grounded", "-p", "release/reflectiva_sample_predictions.json", "-r",
             "release/infoseek_fixed.csv", "--stage", "initial", "--resamples", "50")
    assert r.exit_code == 2 and "no prediction has retrieval stage 'initial'" in r.output
    r = _run("score", "convert-predictions", "release/comem_sample.jsonl", "--method", "comem", "-o", "c.jsonl",
             "--rules", "authors", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout.strip().splitlines()[-1])["parse_rules"] == {"authors:boxed": 1}


# ------------------------------------------------------------------------------ the augmented CSV


def test_augmented_csv_is_a_reference_file(tmp_path):
    aug = HERE / "infoseek_augmented_seed3185.csv"
    ids = [f"{ID}__anchor", f"{ID}__intra", f"{ID}__inter"]
    assert mt.reference_ids(aug) == ids
    refs = load_infoseek_references(aug)
    assert sorted(refs) == sorted(ids) and {r.aliases[0] for r in refs.values()} == {"Belgium"}
    assert {tuple(r.gold) for r in load_retrieval_references(aug).values()} == {(GOLD,)}
    # the authors' variant spelling is matched to the references' ids, and said so
    f = tmp_path / "iba_aug.jsonl"
    f.write_text("".join(json.dumps({"data_id": i, "prediction": "Belgium", "selected_url": u}) + "\n" for i, u in (
        (f"{ID}__anchor", GOLD), (f"{ID}__method1__with_position", GOLD),
        (f"{ID}__method2__without_position", "https://en.wikipedia.org/wiki/Example_Trout"))), encoding="utf-8")
    r = mt.convert("iba", f, references=aug)
    assert [p.data_id for p in r.predictions] == ids and r.alignment.clean
    assert r.parse_rules == {"key:prediction": 1, "key:prediction;id:variant-respelled": 2}
    conv = tmp_path / "conv.jsonl"
    mt.write_predictions(conv, r.predictions)
    res = an.variants_study(conv, aug, "infoseek-strict", **FAST)
    rows = {v["variant"]: (v["n"], v["correct"]) for v in res["variants"]}
    assert rows == {"anchor": (1, 1), "intra": (1, 1), "inter": (1, 1)}
    assert {v["variant"]: v["grounded"] for v in res["recall"]} == {"anchor": 1, "intra": 1, "inter": 0}


def test_cli_variants_on_the_released_csv(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(HERE / "infoseek_augmented_seed3185.csv", "aug.csv")
    Path("p.jsonl").write_text("".join(json.dumps({"data_id": f"{ID}__{v}", "prediction": "Belgium"}) + "\n"
                                       for v in ("anchor", "intra", "inter")), encoding="utf-8")
    r = _run("study", "variants", "-p", "p.jsonl", "-r", "aug.csv", "--scorer", "infoseek-strict", "--stage", "none",
             "--resamples", "50", "--json")
    assert r.exit_code == 0, r.output
    assert [v["correct"] for v in json.loads(r.stdout.strip().splitlines()[-1])["variants"]] == [1, 1, 1]
    r = _run("study", "variants", "-p", "p.jsonl", "-r", "aug.csv", "--scorer", "infoseek-strict", "--resamples", "50")
    assert r.exit_code == 2 and "no prediction has retrieval stage 'post'" in r.output


# ------------------------------------------------------------------------- ranges and line endings


def test_ranges_are_set_where_answers_are_written_as_ranges(tmp_path):
    one, two = read_samples(HERE / "infoseek_fixed.csv", "ara")
    assert one.answers[0].range is None and two.answers[0].range == (6.0, 7.0) and two.answer_texts == ["6 - 7"]
    assert dataset_stats([one, two])["numeric_with_range"] == 1
    # the augmented reader too, for a Numerical anchor
    with open(HERE / "infoseek_augmented_seed3185.csv", newline="", encoding="utf-8") as fh:
        row = next(csv.DictReader(fh))
    row.update(anchor_question_type="Numerical", anchor_answer="10 - 12", method1_expected_answer="10 - 12",
               method2_expected_answer="10 - 12")
    from kbvqa.data.ara import augmented_row_samples

    assert {s.answers[0].range for s in augmented_row_samples(row)} == {(10.0, 12.0)}


def test_released_lf_files_round_trip_byte_for_byte(tmp_path):
    for name in ("infoseek_fixed.csv", "evqa_fixed.csv"):
        src = HERE / name
        assert b"\r\n" not in src.read_bytes()
        mid, out = tmp_path / f"{name}.jsonl", tmp_path / name
        write_samples(read_samples(src, "ara"), mid, "kbvqa")
        write_samples(read_samples(mid, "kbvqa"), out, "ara")
        assert out.read_bytes() == src.read_bytes()


REAL = Path("/work/shared/data/ara/ground_truth/infoseek_fixed.csv")


@pytest.mark.skipif(not REAL.is_file(), reason="the shared ARA subset is not on this machine")
def test_real_fixed_infoseek_numerical_ranges():
    samples = [s for s in read_samples(REAL, "ara") if s.answer_type == "Numerical"]
    ranged = [s for s in samples if any(a.range for a in s.answers)]
    assert len(samples) > 50 and 0.2 < len(ranged) / len(samples) < 0.4  # 62 of 223 in the full release
