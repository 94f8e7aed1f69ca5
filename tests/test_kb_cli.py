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


# --- a damaged KB in one line (issue 34 item 7) ----------------------------------------------------

def _damage(kb, kind: str) -> None:
    """Damage the KB file as a disk, a crash or a hand edit would: a page overwritten, a table dropped,
    a column renamed."""
    import sqlite3

    db = sqlite3.connect(kb)
    roots = dict(db.execute("SELECT name, rootpage FROM sqlite_master"))
    size = db.execute("PRAGMA page_size").fetchone()[0]
    if kind.startswith("page:"):
        db.close()
        page = 1 if kind == "page:1" else roots[kind[5:]]
        with open(kb, "r+b") as f:
            f.seek((page - 1) * size)
            f.write(b"\xde\xad\xbe\xef" * (size // 4))
        return
    db.executescript({"drop fts": "DROP TABLE fts", "drop articles": "DROP TABLE articles",
                      "rename column": "ALTER TABLE sections RENAME COLUMN text TO body"}[kind])
    db.close()


@pytest.mark.parametrize("kind,says", [
    ("page:sections", "database disk image is malformed"),
    ("page:fts_idx", "database disk image is malformed"),  # the FTS index's own pages
    ("page:fts_data", "cannot be read"),
    ("page:1", "not SQLite's header"),
    ("drop fts", "no table 'fts'"),
    ("drop articles", "no table 'articles'"),
    ("rename column", "table 'sections' of the KB has no column text"),
])
def test_a_damaged_kb_is_one_line_naming_the_file_and_the_fix(wiki, tmp_path, kind, says):
    kb = tmp_path / "kb.sqlite"
    assert runner.invoke(app, ["kb", "import", str(wiki), "-o", str(kb), "--no-progress"]).exit_code == 0
    _damage(kb, kind)
    for args in (["search", str(kb), "tall tower"], ["show", str(kb), W + "Eiffel_Tower"], ["stats", str(kb)]):
        r = runner.invoke(app, ["kb", *args])
        if kind in ("page:fts_idx",) and args[0] != "search":
            assert r.exit_code == 0, r.output  # only the search reads the FTS index: the rest still works
            continue
        if kind == "page:sections" and args[0] == "stats":
            assert r.exit_code == 0, r.output  # stats read kb_info alone
            continue
        assert r.exit_code == 1, (args, r.output)
        line = r.output.strip()
        assert line.count("\n") == 0 and "Traceback" not in r.output, (args, r.output)
        assert line.startswith(f"error: {kb}") and says in line and "kbvqa kb import" in line, (args, line)
        if kind != "page:1":  # the KB's own record of its wiki file names what to import
            assert f"kbvqa kb import {wiki} --out {kb} --force" in line, line


def test_a_wiki_file_with_its_start_overwritten(tmp_path, wiki):
    data = bytearray(wiki.read_bytes())
    data[:6] = b"\x00" * 6
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"  \n" + bytes(data))
    r = runner.invoke(app, ["kb", "import", str(bad), "-o", str(tmp_path / "o.sqlite"), "--no-progress"])
    assert r.exit_code == 1 and r.output.strip().count("\n") == 0, r.output
    assert f"{bad}: byte 3: expected '{{' or '['" in r.output and "\\x00\\x00" in r.output, r.output
    assert "the start of the file is overwritten" in r.output


def test_jobs_that_open_a_damaged_kb(wiki, tmp_path):
    """A job refuses a KB whose tables are gone before any record runs (exit 2, one line); damage met
    only when a record reads it ends that record `error` with the same line as its reason (exit 3)."""
    samples = tmp_path / "s.jsonl"
    samples.write_text(json.dumps({"id": "s1", "question": "How tall is it?", "answers": [{"text": "330 metres"}],
                                   "entity": {"url": W + "Eiffel_Tower"}}) + "\n", encoding="utf-8")
    for kind, code in (("drop fts", 2), ("page:sections", 3)):
        kb = tmp_path / f"{kind.replace(' ', '_').replace(':', '_')}.sqlite"
        assert runner.invoke(app, ["kb", "import", str(wiki), "-o", str(kb), "--no-progress"]).exit_code == 0
        _damage(kb, kind)
        r = runner.invoke(app, ["audit", "run", str(samples), "--kb", str(kb), "--out", str(tmp_path / "a.jsonl"),
                                "--no-resume"])
        assert r.exit_code == code, (kind, r.output)
        assert "Traceback" not in r.output and f"{kb}: the KB" in r.stderr and "kbvqa kb import" in r.stderr
        if code == 2:
            assert r.stderr.strip().count("\n") == 0, r.stderr
        else:
            assert "1 x KBError" in r.stderr, r.stderr


def test_a_wiki_file_damaged_inside_is_one_line(tmp_path, wiki):
    data = bytearray(wiki.read_bytes())
    at = data.index(b"lattice")
    data[at:at + 4] = b'\x00"}{'
    bad = tmp_path / "inside.json"
    bad.write_bytes(bytes(data))
    r = runner.invoke(app, ["kb", "import", str(bad), "-o", str(tmp_path / "o.sqlite"), "--no-progress"])
    assert r.exit_code == 1 and r.output.strip().count("\n") == 0, r.output  # the parser's pointer line joined
    assert f"{bad}: invalid JSON" in r.output and "Traceback" not in r.output
