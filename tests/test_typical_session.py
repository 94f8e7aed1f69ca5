"""The README's typical seed-000 session, end to end, on a small set cut from the real ARA rows (InfoSeek,
bare image ids such as `oven_04958423`, no `data_split`): kb import → audit run → audit diff → index
images → answer → score infoseek / retrieval → study by-type → report build, each with the exit code
the README documents. The KB is built from the rows' own evidence sections with one photograph per
entity; the query photographs are other views of the same pictures. Skips without ../shared/data."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.demo.bench import load_photo, query_view

ARA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ara" / "ground_truth"
PHOTOS = ["skimage:astronaut", "skimage:coffee", "skimage:chelsea", "skimage:rocket", "skimage:hubble_deep_field",
          "skimage:retina", "skimage:coins", "skimage:camera", "skimage:moon", "skimage:clock", "sklearn:china.jpg",
          "sklearn:flower.jpg"]

pytestmark = pytest.mark.skipif(not (ARA / "infoseek_unfixed_subset.csv").is_file(), reason="needs ../shared/data/ara")


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """12 InfoSeek rows with distinct entities whose repaired row carries evidence text."""
    root = tmp_path_factory.mktemp("session")
    with open(ARA / "infoseek_fixed.csv", encoding="utf-8") as fh:
        fixed = {r["data_id"]: r for r in csv.DictReader(fh)}
    with open(ARA / "infoseek_unfixed_subset.csv", encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        header, rows = reader.fieldnames, list(reader)
    picked, seen = [], set()
    for r in rows:
        f = fixed.get(r["data_id"])
        if f and len(f["evidence"]) >= 80 and r["wikipedia_url"] not in seen:
            seen.add(r["wikipedia_url"])
            picked.append(r)
        if len(picked) == len(PHOTOS):
            break
    with open(root / "infoseek_val.csv", "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=header)
        w.writeheader()
        w.writerows(picked)
    wiki, kb_images, images = {}, root / "kb_images", root / "images"
    kb_images.mkdir()
    images.mkdir()
    for r, source in zip(picked, PHOTOS):
        f = fixed[r["data_id"]]
        photo = load_photo(source)
        name = f"{r['dataset_image_ids']}_kb.jpg"
        photo.convert("RGB").save(kb_images / name, quality=90)
        query_view(photo).convert("RGB").save(images / f"{r['dataset_image_ids']}.jpg", quality=90)  # a bare id
        wiki[r["wikipedia_url"]] = {"title": r["wikipedia_title"], "section_titles": [r["wikipedia_title"]],
                                    "section_texts": [f["evidence"]],
                                    "image_urls": [f"https://upload.wikimedia.org/x/{name}"]}
    (root / "wiki.json").write_text(json.dumps(wiki), encoding="utf-8")
    return root, picked


def _run(args: list[str], code: int = 0) -> str:
    res = CliRunner().invoke(app, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), (args, res.exception, res.output)
    assert res.exit_code == code, (args, res.exit_code, res.output)
    return res.stdout


def test_the_readme_session_runs_with_the_documented_exit_codes(session, monkeypatch):
    root, picked = session
    monkeypatch.chdir(root)
    n = len(picked)
    _run(["kb", "import", "wiki.json", "--out", "kb.sqlite"])
    audit = json.loads(_run(["audit", "run", "infoseek_val.csv", "--kb", "kb.sqlite", "--out", "audited.jsonl",
                             "--json"]))
    assert sum(audit["status"].values()) == n and audit["status"].get("ok") == n
    _run(["audit", "diff", "infoseek_val.csv", "audited.jsonl"])
    split = json.loads(_run(["audit", "split", "audited.jsonl", "--fixed", "fixed.csv", "--unfixed", "unfixed.csv",
                             "--json"]))  # the README's split files, in the input's format (ARA CSV)
    assert split["format"] == "ara" and split["retained"] == split["kept"] + split["repaired"] == n - split["dropped"]
    index = json.loads(_run(["index", "images", "--kb", "kb.sqlite", "--images", "kb_images", "--out",
                             "idx/images"]).strip().splitlines()[-1])
    assert index["vectors"] == n and index["images_missing"] == 0
    ans = json.loads(_run(["answer", "--samples", "infoseek_val.csv", "--kb", "kb.sqlite", "--index", "idx/images",
                           "--images", "images", "--pipeline", "extractive", "--out",
                           "preds.jsonl", "--json"]).strip().splitlines()[-1])
    assert ans["ok"] == n  # every bare image id resolved to images/<id>.jpg

    score = json.loads(_run(["score", "infoseek", "-p", "preds.jsonl", "-r", "infoseek_val.csv", "--mode", "strict",
                             "--json"]))
    assert score["n"] == n
    # the ARA rows carry no data_split: the headline is the all-items score and says so (never "final 0.0")
    official = json.loads(_run(["score", "infoseek", "-p", "preds.jsonl", "-r", "infoseek_val.csv", "--json"]))
    assert official["final_score_basis"] == "all_items_no_split"
    assert official["final_score"] == official["unseen_entity_score"]["score"] > 0
    recall = json.loads(_run(["score", "retrieval", "--records", "preds.retrieval.jsonl", "-r", "infoseek_val.csv",
                              "--json"]))
    assert recall["stages"]["initial"]["recall"]["@1"] == pytest.approx(1.0)  # one photograph per entity
    _run(["study", "by-type", "-p", "preds.jsonl", "-r", "infoseek_val.csv", "--scorer", "infoseek-strict",
          "--out", "study"])
    Path("study/ret.retrieval.json").write_text(json.dumps(recall), encoding="utf-8")
    _run(["report", "build", "study"])
    assert Path("study/index.html").is_file() and "Accuracy by question" in Path("study/report.md").read_text()

    # a job where every record fails exits 3; a partial failure exits 0, or 4 under --fail-on-error
    Path("gone.csv").write_text(Path("infoseek_val.csv").read_text(encoding="utf-8").replace("oven_", "gone_"),
                                encoding="utf-8")
    _run(["answer", "--samples", "gone.csv", "--kb", "kb.sqlite", "--index", "idx/images", "--images", "images",
          "--pipeline", "extractive", "--out", "gone.jsonl"], code=3)
    lines = Path("infoseek_val.csv").read_text(encoding="utf-8").splitlines()
    lines[1] = lines[1].replace("oven_", "gone_")
    Path("partial.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["answer", "--samples", "partial.csv", "--kb", "kb.sqlite", "--index", "idx/images", "--images", "images",
            "--pipeline", "extractive", "--no-resume"]
    _run([*args, "--out", "partial.jsonl"])
    _run(["--fail-on-error", *args, "--out", "partial2.jsonl"], code=4)
    # bad flags or input: 2, nothing run
    _run(["score", "infoseek", "-p", "preds.jsonl", "-r", "nope.csv"], code=2)
