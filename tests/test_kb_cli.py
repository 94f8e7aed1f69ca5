"""`kbvqa kb ...` through typer's CliRunner: import, search, show, stats and one-line errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app

W = "https://en.wikipedia.org/wiki/"
runner = CliRunner()


@pytest.fixture
def wiki(tmp_path):
    d = {
        W + "Eiffel_Tower": {"title": "Eiffel Tower", "section_titles": ["Summary", "Height"],
                             "section_texts": ["A lattice tower in Paris.", "The tower is 330 metres tall."],
                             "image_urls": [], "url": W + "Eiffel_Tower"},
        W + "Edificio_Espa%C3%B1a": {"title": "Edificio España", "section_titles": ["Summary"],
                                     "section_texts": ["A skyscraper in Madrid."], "image_urls": []},
        "http://en.wikipedia.org/wiki/Eiffel_Tower": {"title": "dup", "section_titles": [], "section_texts": []},
    }
    p = tmp_path / "wiki.json"
    p.write_text(json.dumps(d))
    return p


def test_import_search_show_stats(wiki, tmp_path):
    out = tmp_path / "kb.sqlite"
    r = runner.invoke(app, ["kb", "import", str(wiki), "--out", str(out), "--batch-size", "1", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "imported 2 articles, 3 sections" in r.output and "skipped 1 duplicate" in r.output

    r = runner.invoke(app, ["kb", "search", str(out), "how tall is the tower?", "--k", "1", "--json"])
    assert r.exit_code == 0, r.output
    hits = json.loads(r.output)
    assert len(hits) == 1 and hits[0]["url"] == W + "Eiffel_Tower" and hits[0]["section_title"] == "Height"

    r = runner.invoke(app, ["kb", "search", str(out), 'tower "AND: -x'])
    assert r.exit_code == 0 and "Eiffel Tower" in r.output

    r = runner.invoke(app, ["kb", "search", str(out), "skyscraper", "--in", W + "Eiffel_Tower", "--json"])
    assert r.exit_code == 0 and json.loads(r.output) == []

    r = runner.invoke(app, ["kb", "show", str(out), "http://en.wikipedia.org/wiki/Edificio_España", "--json"])
    assert r.exit_code == 0, r.output
    art = json.loads(r.output)
    assert art["url"] == W + "Edificio_España" and art["sections"][0]["text"] == "A skyscraper in Madrid."

    r = runner.invoke(app, ["kb", "show", str(out), W + "Eiffel_Tower"])
    assert r.exit_code == 0 and "[1] Height" in r.output

    r = runner.invoke(app, ["kb", "stats", str(out), "--json"])
    assert r.exit_code == 0
    st = json.loads(r.output)
    assert (st["articles"], st["sections"], st["duplicates"]) == (2, 3, 1)
    r = runner.invoke(app, ["kb", "stats", str(out)])
    assert r.exit_code == 0 and "articles" in r.output


def test_search_on_wiki_json_directly(wiki):
    r = runner.invoke(app, ["kb", "search", str(wiki), "Madrid", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)[0]["title"] == "Edificio España"


def test_errors_are_one_line_and_non_zero(wiki, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({W + "X": {"section_titles": ["a"], "section_texts": []}}))
    r = runner.invoke(app, ["kb", "import", str(bad), "--out", str(tmp_path / "o.sqlite"), "--no-progress"])
    assert r.exit_code == 1
    assert r.output.strip().count("\n") == 0 and "error:" in r.output and W + "X" in r.output

    out = tmp_path / "kb.sqlite"
    assert runner.invoke(app, ["kb", "import", str(wiki), "-o", str(out), "--no-progress"]).exit_code == 0
    r = runner.invoke(app, ["kb", "import", str(wiki), "-o", str(out), "--no-progress"])
    assert r.exit_code == 1 and "already exists" in r.output
    assert runner.invoke(app, ["kb", "import", str(wiki), "-o", str(out), "--force", "--no-progress"]).exit_code == 0

    r = runner.invoke(app, ["kb", "show", str(out), W + "Missing"])
    assert r.exit_code == 1 and "not in" in r.output
    r = runner.invoke(app, ["kb", "search", str(tmp_path / "nope.sqlite"), "x"])
    assert r.exit_code == 1 and "no such" in r.output
    r = runner.invoke(app, ["kb", "search", str(out), "x", "--in", W + "Missing"])
    assert r.exit_code == 1 and "not in the KB" in r.output
    r = runner.invoke(app, ["kb", "import", str(wiki), "-o", str(tmp_path / "z.sqlite"), "--on-duplicate", "bogus",
                            "--no-progress"])
    assert r.exit_code == 1 and "on_duplicate" in r.output
