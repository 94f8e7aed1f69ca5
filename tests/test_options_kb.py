"""`kbvqa kb import`'s one options object (KBImportOptions, in pipelines: the KB layer sits below the
runner, so the importer's own settings are the plain pydantic ImportConfig there, nested as it is):
defaults written once and shown in --help, flag > [kb.import] of --config > default, errors that name
the flag or the file and key, the importer handed its config unchanged, kb_info recording the options
as used, and one run as a user runs it."""

import json
import sqlite3

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.kb import importer
from kbvqa.kb.importer import ImportConfig, default_batch_size
from kbvqa.kb.store import KBStore
from kbvqa.pipelines import kb_import
from kbvqa.pipelines.kb_import import KBImportOptions, import_kb, kb_import_options
from kbvqa.runner.options import OptionsError

W = "https://en.wikipedia.org/wiki/"
runner = CliRunner()


@pytest.fixture
def wiki(tmp_path):
    """data/wiki.json: two articles and a duplicate of the first (another spelling of its url)."""
    d = {W + "Eiffel_Tower": {"title": "Eiffel Tower", "section_titles": ["Summary"],
                              "section_texts": ["A lattice tower in Paris."], "image_urls": []},
         W + "Big_Ben": {"title": "Big Ben", "section_titles": ["Summary"], "section_texts": ["A clock tower."]},
         "http://en.wikipedia.org/wiki/Eiffel_Tower": {"title": "dup", "section_titles": [], "section_texts": []}}
    (tmp_path / "data").mkdir()
    p = tmp_path / "data" / "wiki.json"
    p.write_text(json.dumps(d), encoding="utf-8")
    return p


def _import_options(kb):
    with sqlite3.connect(kb) as db:
        return json.loads(db.execute("SELECT value FROM kb_info WHERE key='import_options'").fetchone()[0])


def test_help_shows_the_class_defaults():
    res = runner.invoke(app, ["kb", "import", "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert KBImportOptions().importer.on_duplicate == "keep_first"
    assert "keep_first (count and report) or error. Default keep_first." in text
    assert "--workers" in text and "--config" in text


def test_flag_over_file_over_default(tmp_path):
    toml = tmp_path / "kbvqa.toml"
    toml.write_text('[kb.import]\nforce = true\n[kb.import.importer]\nbatch_size = 10\non_duplicate = "error"\n',
                    encoding="utf-8")
    opts = kb_import_options(toml, batch_size=5, on_duplicate=None, force=None)
    assert opts.importer.batch_size == 5  # the flag
    assert opts.importer.on_duplicate == "error" and opts.force is True  # the file
    assert opts.importer.workers is None and opts.config == toml  # the default: sized from the file at import
    plain = kb_import_options()
    assert plain.importer == ImportConfig() and plain.force is False


def test_bad_values_name_their_source(tmp_path, wiki):
    with pytest.raises(OptionsError, match="--batch-size"):
        kb_import_options(batch_size=0)
    with pytest.raises(OptionsError, match=r"--on-duplicate: .*on_duplicate must be 'keep_first' or 'error'"):
        kb_import_options(on_duplicate="bogus")
    toml = tmp_path / "kbvqa.toml"
    toml.write_text('[kb.import.importer]\nworkers = 0\n', encoding="utf-8")
    with pytest.raises(OptionsError, match=r"kbvqa\.toml \[kb\.import\]: importer\.workers"):
        kb_import_options(toml)
    res = runner.invoke(app, ["kb", "import", str(wiki), "-o", str(tmp_path / "kb.sqlite"), "--config", str(toml),
                              "--no-progress"])
    assert res.exit_code == 1 and "importer.workers" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "kb.sqlite").exists()
    with pytest.raises(ValueError, match="batch_size"):  # a library caller's keywords are validated the same way
        importer.import_wiki_json(wiki, tmp_path / "kb.sqlite", batch_size=0)


def test_the_importer_gets_its_config_unchanged_and_kb_info_records_the_options(tmp_path, wiki, monkeypatch):
    seen = {}
    real = kb_import.import_wiki_json

    def spy(path, out, config=None, **kw):
        seen["config"] = config
        return real(path, out, config, **kw)

    monkeypatch.setattr(kb_import, "import_wiki_json", spy)
    opts = kb_import_options(wiki=wiki, out=tmp_path / "kb.sqlite", workers=1)
    st = import_kb(opts)
    assert seen["config"] is opts.importer
    assert (st.articles, st.duplicates) == (2, 1)
    recorded = _import_options(tmp_path / "kb.sqlite")
    assert recorded == {**opts.used(), "resolved": {"batch_size": default_batch_size(1), "workers": 1}}
    with KBStore(tmp_path / "kb.sqlite") as kb:  # `kbvqa kb stats` shows it
        assert json.loads(kb.stats()["import_options"])["importer"]["workers"] == 1


def test_cli_run_as_a_user_runs_it(tmp_path, wiki, monkeypatch):
    """Relative paths from another working directory, the response cache on, a config file whose
    batch size the flag overrides; kb_info records the options as used."""
    (tmp_path / "data" / "kbvqa.toml").write_text('[kb.import.importer]\nbatch_size = 7\non_duplicate = "error"\n',
                                                  encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    res = runner.invoke(app, ["kb", "import", "../data/wiki.json", "--out", "kb.sqlite", "--config",
                              "../data/kbvqa.toml", "--no-progress"])
    assert res.exit_code == 1 and "on_duplicate='error'" in res.output  # the file's policy refuses the duplicate
    res = runner.invoke(app, ["kb", "import", "../data/wiki.json", "--out", "kb.sqlite", "--config",
                              "../data/kbvqa.toml", "--on-duplicate", "keep_first", "--batch-size", "1",
                              "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "imported 2 articles" in res.output and "skipped 1 duplicate" in res.output
    recorded = _import_options(work / "kb.sqlite")
    assert recorded["importer"] == {"batch_size": 1, "on_duplicate": "keep_first", "workers": None}
    assert recorded["wiki"] == "../data/wiki.json" and recorded["config"] == "../data/kbvqa.toml"
    assert recorded["resolved"] == {"batch_size": 1, "workers": 1}  # a small file: one process
