"""`kbvqa data compare` (seed 001 Table 1 shape) on small InfoSeek, E-VQA, NoteVQA, kbvqa and generic
fixtures written here: lengths in words, images per item, category and intent coverage, and the
reasoning-hops judge against a scripted server (strict JSON integers; anything else counted invalid)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.compare import benchmark_profile, word_count
from kbvqa.data.formats import read_samples
from kbvqa.models.client import OpenAIChatClient
from kbvqa.pipelines.curate.hops import estimate_hops, hop_records

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply  # noqa: E402

runner = CliRunner()


@pytest.fixture()
def files(tmp_path) -> dict[str, Path]:
    infoseek = tmp_path / "infoseek.jsonl"
    infoseek.write_text("".join(json.dumps(r) + "\n" for r in [
        {"data_id": "is_1", "image_id": "oven_1", "question": "What country is this building in?",
         "answer": ["Serbia"], "answer_eval": ["Serbia"], "data_split": "val"},
        {"data_id": "is_2", "image_id": "oven_2", "question": "How tall is this tower?",
         "answer": ["324 metre"], "answer_eval": [{"wikidata": 324.0, "range": [291.6, 356.4]}], "data_split": "val"},
    ]), encoding="utf-8")
    evqa = tmp_path / "evqa.csv"
    with open(evqa, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["question", "answer", "dataset_image_ids", "dataset_name", "question_type", "wikipedia_url"])
        w.writerow(["What colour are its eggs in spring?", "white|pale blue", "img1|img2", "inat", "templated",
                    "https://en.wikipedia.org/wiki/Robin"])
        w.writerow(["What does it eat?", "insects", "img3", "inat", "templated", "https://en.wikipedia.org/wiki/Finch"])
        w.writerow(["Who designed it?", "Gustave Eiffel", "img4", "landmarks", "2_hop", "https://en.wikipedia.org/wiki/A"])
    notevqa = tmp_path / "notevqa.jsonl"
    notevqa.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in [
        {"id": "n1", "images": ["a.jpg"], "question": "Saw this at an exhibit: who is she and what did she do first?",
         "answer": "Eileen Collins, first woman to pilot a Space Shuttle", "category": "Science", "intent": "Identification",
         "reference": {"text": 'She is Eileen Collins.\n<image>{"candidate_images": 1}</image>\nShe flew four times.',
                       "images": [{"path": "r.jpg"}]}},
        {"id": "n2", "images": ["b.jpg", "c.jpg"], "question": "这座塔叫什么名字？", "answer": "佛香阁",
         "category": "Travel", "intent": "Identification"},
        {"id": "n3", "images": ["d.jpg"], "question": "How do I make this pattern?", "answer": "latte art",
         "category": "Food", "intent": "How-to"},
    ]), encoding="utf-8")
    kbvqa = tmp_path / "kbvqa.jsonl"
    kbvqa.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "k1", "question": "Who is this?", "answers": [{"text": "Grace Hopper"}], "images": ["h.jpg"]},
        {"id": "k2", "question": "What is this?", "answers": [], "images": []},
    ]), encoding="utf-8")
    generic = tmp_path / "generic.csv"
    generic.write_text("qid,q,ans\ng1,What breed is this cat?,tabby\n", encoding="utf-8")
    return {"infoseek": infoseek, "evqa": evqa, "notevqa": notevqa, "kbvqa": kbvqa, "generic": generic}


def test_word_count_counts_cjk_characters():
    assert word_count("How tall is it?") == 4
    assert word_count("这座塔叫什么名字？") == 9  # eight characters and the full-width question mark
    assert word_count("Tower 佛香阁 of") == 5
    assert word_count(None) == 0


def test_profiles_of_every_format(files):
    got = {name: benchmark_profile(read_samples(p), name=name, fmt=name) for name, p in files.items()
           if name != "generic"}
    assert got["infoseek"]["items"] == 2 and got["infoseek"]["query_words"] == {"mean": 5.5, "median": 5.5, "n": 2}
    assert got["infoseek"]["categories"] is None and got["infoseek"]["images_per_item"] == 1.0
    assert got["evqa"]["items"] == 3 and got["evqa"]["images_per_item"] == round(4 / 3, 3)
    nv = got["notevqa"]
    assert nv["categories"]["n"] == 3 and nv["intents"] == {"n": 2, "covered_items": 3,
                                                          "counts": {"Identification": 2, "How-to": 1}}
    assert nv["reference_words"]["n"] == 1 and nv["reference_words"]["mean"] == 8  # the tag is not a word
    # embedded images: over all items (the paper's 1.5 = 378 / 252) and over the items with a reference
    assert nv["reference_images"] == {"total": 1, "per_item": round(1 / 3, 3), "per_referenced_item": 1.0,
                                      "items_with_reference": 1}
    assert got["infoseek"]["reference_images"] is None
    assert nv["answer_words"]["median"] == 3.0
    assert got["kbvqa"]["items_without_answer"] == 1 and got["kbvqa"]["answer_words"]["n"] == 1
    generic = benchmark_profile(read_samples(files["generic"], "csv", mapping={"id": "qid", "question": "q",
                                                                               "answers": "ans"}),
                                name="g", fmt="csv")
    assert generic["items"] == 1 and generic["answer_words"]["mean"] == 1


def test_cli_table_and_json(files):
    paths = [str(files[k]) for k in ("infoseek", "evqa", "notevqa", "kbvqa")]
    r = runner.invoke(app, ["data", "compare", *paths, "--json"])
    assert r.exit_code == 0, r.output
    rows = {b["name"]: b for b in json.loads(r.stdout)["benchmarks"]}
    assert {b["format"] for b in rows.values()} == {"infoseek", "evqa", "notevqa", "kbvqa"}
    assert rows["kbvqa"]["warnings"] == {"no_answers": 1} and rows["notevqa"]["hops"] is None
    r = runner.invoke(app, ["data", "compare", *paths, "--name", "InfoSeek", "--name", "E-VQA", "--name", "NoteVQA",
                            "--name", "kbvqa"])
    assert r.exit_code == 0 and "benchmark comparison" in r.output and "needs a judge model" in r.output
    r = runner.invoke(app, ["data", "compare", str(files["generic"]), "--from", "csv", "--mapping",
                            "id=qid,question=q,answers=ans", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["benchmarks"][0]["items"] == 1
    r = runner.invoke(app, ["data", "compare", *paths, "--name", "only-one"])
    assert r.exit_code == 1 and "one per file" in r.output
    r = runner.invoke(app, ["data", "compare", str(files["kbvqa"]) + ".missing"])
    assert r.exit_code == 1 and "file not found" in r.output and "Traceback" not in r.output


def test_hops_judge_strict_integers_and_provenance(files, tmp_path):
    replies = {"Saw this at an exhibit": '{"hops": 3}', "这座塔": '{"hops": "2"}',  # a string is not an integer
               "make this pattern": 'I think {"hops": 1}'}  # prose around the object is not strict JSON

    def handler(req):
        text = req["messages"][-1]["content"]
        return Reply(content=next(v for k, v in replies.items() if k in text))

    with FakeLLMServer(handler=handler) as srv:
        roles = {"judge": OpenAIChatClient(srv.base_url, "judge-x", max_retries=0)}
        recs = hop_records(read_samples(files["notevqa"]))
        res = estimate_hops(recs, tmp_path / "nv.hops.jsonl", roles)
        assert (res["mean"], res["judged"], res["invalid"], res["error"]) == (3.0, 1, 2, 0)
        assert res["judge"]["model"] == "judge-x" and res["judge"]["prompt"] == "curate.reasoning_hops@1"
        replies.update({"这座塔": '{"hops": 2}', "make this pattern": '{"hops": 1}'})
        res = estimate_hops(recs, tmp_path / "nv.hops.jsonl", roles)  # resume: only the invalid ones again
        assert (res["mean"], res["judged"], res["invalid"]) == (2.0, 3, 0)
        assert srv.count == 5
        assert len(hop_records(read_samples(files["notevqa"]), sample=2)) == 2

        r = runner.invoke(app, ["data", "compare", str(files["notevqa"]), str(files["infoseek"]), "--llm", srv.base_url,
                                "--model", "judge-x", "--json"])
        assert r.exit_code == 2 and "--out" in r.output
        replies.update({"country": '{"hops": 2}', "tall": '{"hops": 2}'})
        r = runner.invoke(app, ["data", "compare", str(files["notevqa"]), str(files["infoseek"]), "--llm", srv.base_url,
                                "--model", "judge-x", "--out", str(tmp_path / "cmp")])
        assert r.exit_code == 0, r.output
        assert "judge-x" in r.output and "curate.reasoning_hops@1" in r.output
    saved = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert [b["hops"]["mean"] for b in saved["benchmarks"]] == [2.0, 2.0]


def test_shared_data_when_present():
    """The real NoteVQA-like or InfoSeek files, when ../shared/data holds them (skipped otherwise)."""
    root = Path(__file__).resolve().parents[2] / "shared" / "data"
    found = sorted(root.glob("**/*.jsonl"))[:1] if root.is_dir() else []
    if not found:
        pytest.skip("no ../shared/data JSONL benchmark here")
    try:
        prof = benchmark_profile(read_samples(found[0]), name=found[0].stem, fmt="auto")
    except Exception as exc:  # not every JSONL there is a benchmark
        pytest.skip(f"{found[0]} is not a benchmark file kbvqa reads: {exc}")
    assert prof["items"] >= 0
