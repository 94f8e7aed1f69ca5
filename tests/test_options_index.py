"""`kbvqa index images|text`'s one options object each (ImageIndexOptions, TextIndexOptions): defaults
written once and shown in --help (the encoder batch shared with `kbvqa retrieve`, the FAISS settings
the index's own IndexParams), flag > [index.images]/[index.text] of --config > default, errors that
name the flag or the file and key, the build handed the options unchanged, the index's .json
recording them as used, and one run as a user runs it."""

import json

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.cli.options import default_of
from kbvqa.data.schema import Article, Section
from kbvqa.kb.image_index import ImageIndex, IndexParams
from kbvqa.kb.importer import build_kb
from kbvqa.kb.text_index import TextIndex
from kbvqa.pipelines import index as pipeline
from kbvqa.pipelines.index import (ImageIndexOptions, TextIndexOptions, build_text_index, image_index_options,
                                   text_index_options)
from kbvqa.pipelines.retrieve import RetrieveOptions
from kbvqa.runner.options import OptionsError

WIKI = "https://en.wikipedia.org/wiki/"
COLOURS = {"Red": (250, 5, 5), "Green": (5, 250, 5), "Blue": (5, 5, 250)}
runner = CliRunner()


@pytest.fixture()
def data(tmp_path):
    """data/: a three-article KB whose images are in data/images."""
    root = tmp_path / "data"
    (root / "images").mkdir(parents=True)
    for name, rgb in COLOURS.items():
        Image.new("RGB", (32, 32), rgb).save(root / "images" / f"{name}.png")
    build_kb([Article(url=WIKI + n, title=n, sections=[Section(index=0, title="Colour", text=f"{n} is a colour.")],
                      image_urls=[f"https://upload.wikimedia.org/x/{n}.png"]) for n in COLOURS], root / "kb.sqlite")
    return root


def _help(*cmd):
    """Each flag's help as one line ({"--kind": "--kind <flat|ivf|hnsw> ... Default flat."})."""
    res = runner.invoke(app, [*cmd, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    entries: dict[str, str] = {}
    for line in res.output.splitlines():
        words = line.split()
        if words and words[0].startswith("--"):
            flag = words[0]
            entries[flag] = line
        elif words and entries:
            entries[flag] += " " + " ".join(words)
    return entries


def test_help_shows_the_class_defaults():
    images = _help("index", "images")
    assert default_of(ImageIndexOptions, "batch_size") == default_of(RetrieveOptions, "batch_size") == 64  # shared
    assert "Default 64." in images["--batch-size"]
    assert "Default colorgrad-hist-v1." in images["--encoder"]
    assert "Default flat." in images["--kind"] and "Default auto." in images["--rule"]
    params = IndexParams()
    assert f"Default {params.nprobe}." in images["--nprobe"] and f"Default {params.m}." in images["--m"]
    assert f"Default {params.ef_search}." in images["--ef-search"]
    text = _help("index", "text")
    assert f"Default {default_of(TextIndexOptions, 'batch_size')}." in text["--batch-size"]
    assert "Default 1500." in text["--max-chars"]


def test_flag_over_file_over_default(tmp_path):
    toml = tmp_path / "kbvqa.toml"
    toml.write_text('[index.images]\nkind = "ivf"\nbatch_size = 8\n[index.images.params]\nnprobe = 4\nm = 8\n'
                    '[index.text]\nmax_chars = 300\nbatch_articles = 2\n', encoding="utf-8")
    opts = image_index_options(toml, nprobe=2, kind=None, batch_size=None)
    assert opts.params.nprobe == 2 and opts.kind == "ivf" and opts.batch_size == 8 and opts.params.m == 8
    assert opts.params.ef_search == IndexParams().ef_search and opts.rule == "auto" and opts.config == toml
    assert opts.given("params.nprobe") and not opts.given("params.ef_search")
    text = text_index_options(toml, max_chars=100)
    assert (text.max_chars, text.batch_articles, text.batch_size) == (100, 2, 64)


def test_bad_values_name_their_source(tmp_path, data):
    with pytest.raises(OptionsError, match="--nprobe"):
        image_index_options(nprobe=0)
    with pytest.raises(OptionsError, match=r"--encoder: .*unknown image encoder 'nope'"):
        image_index_options(encoder="nope")
    toml = tmp_path / "kbvqa.toml"
    toml.write_text('[index.images.params]\nef_search = "deep"\n[index.text]\nmax_char = 3\n', encoding="utf-8")
    with pytest.raises(OptionsError, match=r"kbvqa\.toml \[index\.images\]: params\.ef_search"):
        image_index_options(toml)
    with pytest.raises(OptionsError, match=r"kbvqa\.toml \[index\.text\]: max_char: Extra inputs"):
        text_index_options(toml)
    res = runner.invoke(app, ["index", "images", "--kb", str(data / "kb.sqlite"), "--images", str(data / "images"),
                              "--out", str(tmp_path / "x"), "--config", str(toml)])
    assert res.exit_code == 2 and "params.ef_search" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["index", "images", "--kb", str(data / "kb.sqlite"), "--images", str(data / "images"),
                              "--out", str(tmp_path / "x"), "--encoder", "nope"])
    assert res.exit_code == 2 and "--encoder" in res.output and "unknown image encoder" in res.output


def test_the_build_gets_the_options_unchanged_and_the_index_records_them(tmp_path, data, monkeypatch):
    seen = {}
    build = pipeline.build_image_index

    def spy(kb, root, encoder, opts=None, **kw):
        seen["opts"] = opts
        return build(kb, root, encoder, opts, **kw)

    monkeypatch.setattr(pipeline, "build_image_index", spy)
    opts = image_index_options(kb=data / "kb.sqlite", images=data / "images", out=tmp_path / "idx" / "img",
                               kind="hnsw", ef_search=32, batch_size=2)
    built = pipeline.index_images(opts)
    assert seen["opts"] is opts
    assert built.index.params == opts.params.model_dump()  # the FAISS settings as the index took them
    meta = json.loads(built.path.read_text())
    assert meta["options"] == opts.used() and meta["options"]["params"]["ef_search"] == 32
    back = ImageIndex.load(tmp_path / "idx" / "img")
    assert back.options == opts.used() and back._faiss.hnsw.efSearch == 32


class _Embedder:
    """A stand-in sentence embedder: records the texts it was given (no model is loaded)."""

    name, dim = "fake-embedder", 4

    def __init__(self, model_dir=None, *, device=None, batch_size=0):
        self.batch_size, self.texts = batch_size, []
        _Embedder.last = self

    def encode(self, texts):
        self.texts += list(texts)
        return np.ones((len(texts), self.dim), dtype=np.float32) / 2


def test_text_build_reads_its_options_and_records_them(tmp_path, data):
    from kbvqa.kb.store import KBStore

    opts = text_index_options(max_chars=12, batch_articles=1)
    emb = _Embedder()
    with KBStore(data / "kb.sqlite") as kb:
        index, stats = build_text_index(kb, emb, opts)
    assert stats["sections"] == 3 and index.options == opts.used()
    assert all(len(t) <= 12 + 20 for t in emb.texts)  # each section cut to max_chars (titles in front)
    index.save(tmp_path / "t")
    assert TextIndex.load(tmp_path / "t").options["max_chars"] == 12


def test_cli_run_as_a_user_runs_it(tmp_path, data, monkeypatch):
    """Relative paths from another working directory, the response cache on, a config file under the
    flags; the index's .json records the options as used, and `kbvqa retrieve` reads the index."""
    (data / "kbvqa.toml").write_text('[index.images]\nbatch_size = 2\nkind = "ivf"\n[index.text]\nbatch_size = 5\n',
                                     encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    res = runner.invoke(app, ["index", "images", "--kb", "../data/kb.sqlite", "--images", "../data/images",
                              "--out", "idx/images", "--config", "../data/kbvqa.toml", "--nprobe", "3"])
    assert res.exit_code == 0, res.output
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert (info["vectors"], info["kind"], info["images_missing"]) == (3, "ivf", 0)
    options = json.loads((work / "idx" / "images.json").read_text())["options"]
    assert options["batch_size"] == 2 and options["params"]["nprobe"] == 3 and options["kind"] == "ivf"
    assert options["kb"] == "../data/kb.sqlite" and options["config"] == "../data/kbvqa.toml"
    samples = work / "s.jsonl"
    samples.write_text(json.dumps({"id": "r", "question": "Which colour?", "answers": ["Red"],
                                   "images": ["Red.png"]}) + "\n", encoding="utf-8")
    res = runner.invoke(app, ["retrieve", "--index", "idx/images", "--samples", "s.jsonl", "--images", "../data/images",
                              "--out", "R.jsonl", "--k", "1"])
    assert res.exit_code == 0, res.output
    assert json.loads((work / "R.jsonl").read_text())["retrieved"] == [WIKI + "Red"]

    monkeypatch.setattr("kbvqa.models.text_embed.TextEmbedder", _Embedder)
    res = runner.invoke(app, ["index", "text", "--kb", "../data/kb.sqlite", "--out", "idx/text",
                              "--config", "../data/kbvqa.toml", "--max-chars", "40"])
    assert res.exit_code == 0, res.output
    assert _Embedder.last.batch_size == 5  # the file's value reached the embedder
    options = json.loads((work / "idx" / "text.json").read_text())["options"]
    assert (options["batch_size"], options["max_chars"], options["out"]) == (5, 40, "idx/text")
