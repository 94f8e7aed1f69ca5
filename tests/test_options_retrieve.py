"""`kbvqa retrieve`'s one options object (RetrieveOptions): defaults written once and shown in --help,
flag > [retrieve] of --config > default, errors that name the flag or the file and key, the stage
handed its own config unchanged, the manifest recording the options as used, and one run as a user
runs it."""

import json

import pytest
from PIL import Image
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.cli.options import default_of
from kbvqa.kb.image_index import ImageIndex
from kbvqa.models.image_encoders import HistogramEncoder
from kbvqa.pipelines.retrieve import RetrieveOptions, build_retrieve_job, retrieve_file, retrieve_options
from kbvqa.runner.options import OptionsError

COLOURS = {"Red": (250, 5, 5), "Green": (5, 250, 5), "Blue": (5, 5, 250)}
WIKI = "https://en.wikipedia.org/wiki/"


@pytest.fixture()
def data(tmp_path):
    """data/: three colour images as a KB image index, and samples whose images are relative to their file."""
    root = tmp_path / "data"
    (root / "images").mkdir(parents=True)
    for name, rgb in COLOURS.items():
        Image.new("RGB", (32, 32), rgb).save(root / "images" / f"{name}.png")
    enc = HistogramEncoder()
    index = ImageIndex(enc.name, enc.dim)
    index.add(enc.encode([Image.open(root / "images" / f"{n}.png") for n in COLOURS]), [WIKI + n for n in COLOURS])
    index.save(root / "idx" / "images")
    rows = [{"id": n.lower(), "question": "What colour is this?", "answers": [n], "images": [f"images/{n}.png"],
             "entity": {"url": WIKI + n}} for n in COLOURS]
    rows.append({"id": "gone", "question": "What colour is this?", "answers": ["Red"], "images": ["images/gone.png"],
                 "entity": {"url": WIKI + "Red"}})
    (root / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return root


def test_help_shows_the_class_defaults():
    res = CliRunner().invoke(app, ["retrieve", "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    k, batch = default_of(RetrieveOptions, "retrieve.k"), default_of(RetrieveOptions, "batch_size")
    assert (k, batch) == (20, 64)  # RetrieveConfig's k and the options' batch size, each written once
    assert f"Default {k}." in next(x for x in lines if "--k " in x)
    assert f"Default {batch}." in next(x for x in lines if "--batch-size" in x)


def test_flag_over_file_over_default(tmp_path):
    toml = tmp_path / "kbvqa.toml"
    toml.write_text('[retrieve]\nbatch_size = 8\n[retrieve.retrieve]\nk = 2\n[retrieve.run]\nlimit = 3\n',
                    encoding="utf-8")
    opts = retrieve_options(toml, k=5, limit=None, device=None)
    assert opts.retrieve.k == 5  # flag over the file
    assert opts.batch_size == 8 and opts.run.limit == 3  # the file
    assert opts.max_wait == default_of(RetrieveOptions, "max_wait") and opts.run.resume is True  # defaults
    assert opts.concurrency() == 16  # not set: twice the batch size (one home for the value)
    assert retrieve_options(toml, concurrency=3).concurrency() == 3


def test_bad_values_name_their_source(tmp_path, data):
    with pytest.raises(OptionsError, match="--batch-size"):
        retrieve_options(batch_size=0)
    toml = tmp_path / "kbvqa.toml"
    toml.write_text('[retrieve]\nbatch_size = "many"\n', encoding="utf-8")
    with pytest.raises(OptionsError, match=r"kbvqa\.toml \[retrieve\]: batch_size"):
        retrieve_options(toml)
    toml.write_text('[retrieve.run]\nconcurency = 4\n', encoding="utf-8")  # misspelt
    res = CliRunner().invoke(app, ["retrieve", "--index", str(data / "idx" / "images"), "--samples",
                                   str(data / "samples.jsonl"), "--out", str(tmp_path / "r.jsonl"),
                                   "--config", str(toml)])
    assert res.exit_code == 2 and "run.concurency" in res.output and "Traceback" not in res.output


def test_the_stage_gets_its_config_unchanged_and_keywords_use_the_same_builder(tmp_path, data):
    enc = HistogramEncoder()
    index = ImageIndex.load(data / "idx" / "images")
    opts = retrieve_options(k=2, batch_size=4)
    job = build_retrieve_job(index, enc, opts, image_root=data)
    assert job.stages[0].config is opts.retrieve
    assert job.ctx.resources["image_batcher"].max_batch == 4
    run = retrieve_file(data / "samples.jsonl", data / "idx" / "images", out=tmp_path / "r.jsonl", k=1)
    assert run.k == 1 and run.counts == {"ok": 3, "error": 1}
    options = json.loads((tmp_path / "r.run.manifest.json").read_text())["run_config"]["options"]
    assert options["retrieve"] == {"k": 1} and options["batch_size"] == 64


def test_cli_run_as_a_user_runs_it(tmp_path, data, monkeypatch):
    """Relative paths from another working directory, the response cache on, a config file whose
    k the flag overrides; the manifest records the options as used."""
    (data / "kbvqa.toml").write_text('[retrieve]\nbatch_size = 2\n[retrieve.retrieve]\nk = 3\n', encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    res = CliRunner().invoke(app, ["retrieve", "--index", "../data/idx/images", "--samples", "../data/samples.jsonl",
                                   "--out", "R.jsonl", "--config", "../data/kbvqa.toml", "--k", "2"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert (info["ok"], info["error"], info["k"]) == (3, 1, 2)
    recs = {r["id"]: r for r in map(json.loads, (work / "R.jsonl").read_text().splitlines())}
    assert all(len(recs[n.lower()]["retrieved"]) == 2 and recs[n.lower()]["retrieved"][0] == WIKI + n for n in COLOURS)
    assert recs["gone"]["status"] == "error" and "gone.png" in recs["gone"]["reason"]
    manifest = json.loads((work / "R.run.manifest.json").read_text())
    options = manifest["run_config"]["options"]
    assert options["retrieve"] == {"k": 2} and options["batch_size"] == 2  # flag; file
    assert options["samples"] == "../data/samples.jsonl" and options["config"] == "../data/kbvqa.toml"
    assert options["run"]["concurrency"] is None  # not set: twice the batch size, as the runner ran it
    assert manifest["runner"]["concurrency"] == 4
