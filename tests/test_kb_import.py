"""Importing E-VQA / EchoSight wiki files: formats, duplicates, malformed input, streaming."""

from __future__ import annotations

import gzip
import json
import sqlite3

import pytest

from kbvqa.data.schema import Article, Section
from kbvqa.kb.importer import ImportStats, KBFormatError, build_kb, default_batch_size, import_wiki_json
from kbvqa.kb.store import KBStore, open_kb

W = "https://en.wikipedia.org/wiki/"


def article(title, sections, images=(), **extra):
    return {"title": title, "section_titles": [t for t, _ in sections], "section_texts": [x for _, x in sections],
            "image_urls": list(images), **extra}


def wiki_dict():
    return {
        W + "Eiffel_Tower": article("Eiffel Tower", [
            ("Summary", "The Eiffel Tower is a wrought-iron lattice tower in Paris, France."),
            ("History", "It was designed by the company of Gustave Eiffel and built from 1887 to 1889."),
            ("Height", "The tower is 330 metres tall, about the same height as an 81-storey building."),
        ], images=["https://upload.wikimedia.org/eiffel.jpg"], url=W + "Eiffel_Tower",
            image_reference_descriptions=["The tower at night"], image_section_indices=[0]),
        # percent-encoded key; the same article is looked up by its Unicode spelling
        W + "Edificio_Espa%C3%B1a": article("Edificio España", [
            ("Summary", "Edificio España is a skyscraper in Madrid, Spain, completed in 1953."),
        ], url=W + "Edificio_Espa%C3%B1a"),
        W + "Zürich": article("Zürich", [("Summary", "Zürich is the largest city in Switzerland.")]),
        # http duplicate of the first article: must be skipped and counted
        "http://en.wikipedia.org/wiki/Eiffel_Tower": article("Eiffel Tower (dup)", [("Summary", "duplicate")]),
        W + "Empty": article("Empty", []),
    }


@pytest.fixture
def wiki_json(tmp_path):
    p = tmp_path / "wiki.json"
    p.write_text(json.dumps(wiki_dict(), ensure_ascii=False, indent=1), encoding="utf-8")
    return p


def test_import_mapping_json(wiki_json, tmp_path):
    out = tmp_path / "kb.sqlite"
    st = import_wiki_json(wiki_json, out, batch_size=2)  # several batches, duplicate in a later one
    assert isinstance(st, ImportStats)
    assert (st.articles, st.sections, st.duplicates) == (4, 5, 1)
    assert st.duplicate_examples == [W + "Eiffel_Tower"]
    assert st.seconds > 0 and st.articles_per_s > 0
    assert not (tmp_path / "kb.sqlite.partial").exists()
    with KBStore(out) as kb:
        assert len(kb) == 4
        a = kb.get("http://en.wikipedia.org/wiki/Eiffel_Tower")
        assert a.title == "Eiffel Tower"  # first occurrence kept, not the duplicate
        assert [s.title for s in a.sections] == ["Summary", "History", "Height"]
        assert [s.index for s in a.sections] == [0, 1, 2]
        assert a.image_urls == ["https://upload.wikimedia.org/eiffel.jpg"]
        # unknown/extra fields survive in meta
        assert a.meta == {"image_reference_descriptions": ["The tower at night"], "image_section_indices": [0]}
        es = kb.get(W + "Edificio_España")
        assert es is not None and es.url == W + "Edificio_España" and es.title == "Edificio España"
        assert "https://en.m.wikipedia.org/wiki/z%C3%BCrich" in kb
        assert kb.get(W + "Empty").sections == []
        assert kb.stats()["duplicates"] == 1


def test_import_jsonl_and_gzip(tmp_path):
    rows = [dict(article(v["title"], list(zip(v["section_titles"], v["section_texts"]))), url=k)
            for k, v in wiki_dict().items()]
    p = tmp_path / "wiki.jsonl"
    p.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n\n", encoding="utf-8")
    st = import_wiki_json(p, tmp_path / "a.sqlite")
    assert (st.articles, st.duplicates) == (4, 1)
    gz = tmp_path / "wiki.jsonl.gz"
    gz.write_bytes(gzip.compress(p.read_bytes()))
    st2 = import_wiki_json(gz, tmp_path / "b.sqlite")
    assert (st2.articles, st2.sections) == (st.articles, st.sections)
    with KBStore(tmp_path / "b.sqlite") as kb:
        assert kb.get(W + "Zürich").sections[0].text.startswith("Zürich is")


def test_import_json_array(tmp_path):
    p = tmp_path / "arr.json"
    p.write_text(json.dumps([dict(article("A", [("S", "alpha text")]), url=W + "A")]))
    assert import_wiki_json(p, tmp_path / "kb.sqlite").articles == 1


def test_lengths_mismatch_names_file_key_and_field(tmp_path):
    d = wiki_dict()
    d[W + "Broken"] = {"title": "Broken", "section_titles": ["a", "b"], "section_texts": ["only one"]}
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(d))
    out = tmp_path / "kb.sqlite"
    with pytest.raises(KBFormatError) as e:
        import_wiki_json(p, out)
    msg = str(e.value)
    assert "bad.json" in msg and W + "Broken" in msg and "section_titles has 2" in msg and "section_texts has 1" in msg
    assert not out.exists() and not (tmp_path / "kb.sqlite.partial").exists()


@pytest.mark.parametrize("value, needle", [
    ({"title": "X", "section_titles": ["a"], "section_texts": [3]}, "section_texts[0]"),
    ({"title": "X", "section_titles": "a", "section_texts": []}, "'section_titles' must be a list"),
    ({"title": 5}, "'title' must be a string"),
    ({"title": "X", "image_urls": [1]}, "image_urls"),
    ([1, 2], "must be a JSON object"),
])
def test_field_errors(tmp_path, value, needle):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({W + "A": {"title": "ok"}, W + "X": value}))
    with pytest.raises(KBFormatError, match="article 2") as e:
        import_wiki_json(p, tmp_path / "kb.sqlite")
    assert needle in str(e.value) and W + "X" in str(e.value)


def test_invalid_json_names_last_good_key(tmp_path):
    p = tmp_path / "trunc.json"
    p.write_text('{"%sA": {"title": "A", "section_titles": [], "section_texts": []}, "%sB": {"title": ' % (W, W))
    with pytest.raises(KBFormatError, match=r"trunc\.json: invalid JSON after article 1 \(key '.*/A'\)"):
        import_wiki_json(p, tmp_path / "kb.sqlite")


def test_invalid_jsonl_names_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps({"url": W + "A", "title": "A"}) + "\n{not json}\n")
    with pytest.raises(KBFormatError, match=r"bad\.jsonl: line 2: invalid JSON"):
        import_wiki_json(p, tmp_path / "kb.sqlite")
    p.write_text(json.dumps({"title": "no url"}) + "\n")
    with pytest.raises(KBFormatError, match=r"line 1: field 'url'"):
        import_wiki_json(p, tmp_path / "kb2.sqlite")


def test_empty_and_non_json_files(tmp_path):
    p = tmp_path / "empty.json"
    p.write_text("  \n")
    with pytest.raises(KBFormatError, match="empty"):
        import_wiki_json(p, tmp_path / "kb.sqlite")
    p.write_text("hello")
    with pytest.raises(KBFormatError, match="expected"):
        import_wiki_json(p, tmp_path / "kb.sqlite")
    with pytest.raises(FileNotFoundError):
        import_wiki_json(tmp_path / "missing.json", tmp_path / "kb.sqlite")


def test_on_duplicate_error(wiki_json, tmp_path):
    with pytest.raises(KBFormatError, match=r"duplicate url .*Eiffel_Tower.*first seen as"):
        import_wiki_json(wiki_json, tmp_path / "kb.sqlite", on_duplicate="error")
    assert not (tmp_path / "kb.sqlite").exists()


def test_refuses_to_overwrite(wiki_json, tmp_path):
    out = tmp_path / "kb.sqlite"
    import_wiki_json(wiki_json, out)
    with pytest.raises(FileExistsError, match="already exists"):
        import_wiki_json(wiki_json, out)
    assert import_wiki_json(wiki_json, out, overwrite=True).articles == 4


def test_never_json_load(wiki_json, tmp_path, monkeypatch):
    """The whole-file parse must stream (ijson); json.load would hold the 2M-article KB in memory."""
    def boom(*a, **k):
        raise AssertionError("json.load called")
    monkeypatch.setattr(json, "load", boom)
    real_loads = json.loads

    def guarded_loads(s, *a, **k):  # per-line loads are fine; a whole-file loads is not
        assert len(s) < 2000, "json.loads on a large chunk"
        return real_loads(s, *a, **k)
    monkeypatch.setattr(json, "loads", guarded_loads)
    assert import_wiki_json(wiki_json, tmp_path / "kb.sqlite").articles == 4


def test_build_kb_from_articles(tmp_path):
    arts = [Article(url="http://en.wikipedia.org/wiki/alpha", title="Alpha",
                    sections=[Section(index=1, title="B", text="second"), Section(index=0, title="A", text="first")],
                    meta={"wikidata_id": "Q1"}),
            Article(url=W + "Beta", title="", sections=[Section(index=0, text="beta text")]),
            Article(url=W + "alpha", title="Alpha again")]
    st = build_kb(arts, tmp_path / "kb.sqlite")
    assert (st.articles, st.sections, st.duplicates) == (2, 3, 1)
    with KBStore(tmp_path / "kb.sqlite") as kb:
        a = kb.get(W + "Alpha")
        assert a.url == W + "Alpha" and [s.text for s in a.sections] == ["first", "second"]
        assert a.meta == {"wikidata_id": "Q1"}
        assert kb.get(W + "Beta").title == "Beta"  # empty title falls back to the url's title
    bad = [Article(url=W + "X", sections=[Section(index=3, text="gap")])]
    with pytest.raises(KBFormatError, match="section indices"):
        build_kb(bad, tmp_path / "bad.sqlite")


def test_finished_db_is_not_wal_and_has_fts(wiki_json, tmp_path):
    out = tmp_path / "kb.sqlite"
    import_wiki_json(wiki_json, out)
    db = sqlite3.connect(out)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert db.execute("INSERT INTO fts(fts) VALUES('integrity-check')") is not None
    db.close()


def test_open_kb_imports_json_once(wiki_json, tmp_path):
    kb = open_kb(wiki_json)
    cache = tmp_path / "wiki.json.kb.sqlite"
    assert cache.is_file() and len(kb) == 4
    kb.close()
    mtime = cache.stat().st_mtime_ns
    with open_kb(wiki_json) as kb2:  # fresh cache reused, not re-imported
        assert kb2.get(W + "Eiffel_Tower") is not None
    assert cache.stat().st_mtime_ns == mtime
    with open_kb(cache) as kb3:  # the sqlite file opens directly
        assert len(kb3) == 4
    d = wiki_dict()
    d[W + "New"] = article("New", [("S", "fresh")])
    wiki_json.write_text(json.dumps(d))
    with open_kb(wiki_json) as kb4:  # source changed: re-imported
        assert len(kb4) == 5


def test_progress_callback_and_bar(wiki_json, tmp_path):
    calls = []
    import_wiki_json(wiki_json, tmp_path / "a.sqlite", batch_size=1, progress=lambda *a: calls.append(a))
    phases = [c[0] for c in calls]
    assert phases[0] == "load" and phases[-1] == "index" and calls[-1][1:] == (1, 1)
    size = wiki_json.stat().st_size
    assert ("load", size, size) in calls
    assert import_wiki_json(wiki_json, tmp_path / "b.sqlite", progress=True).articles == 4


def test_open_kb_cache_dir(wiki_json, tmp_path):
    cache_dir = tmp_path / "cache"
    with open_kb(wiki_json, cache_dir=cache_dir) as kb:
        assert len(kb) == 4
    files = list(cache_dir.iterdir())
    assert len(files) == 1 and files[0].name.startswith("wiki.json.") and files[0].name.endswith(".kb.sqlite")
    assert not (tmp_path / "wiki.json.kb.sqlite").exists()


def test_batch_size_defaults_to_the_number_of_indexing_processes(wiki_json, tmp_path):
    """Sharded imports hand smaller batches to their shards (faster and smaller, measured) and build the
    same KB as one process with its larger default; a size below 1 is refused."""
    assert default_batch_size(1) == 2000 and default_batch_size(2) == default_batch_size(4) == 1000
    one = import_wiki_json(wiki_json, tmp_path / "one.sqlite", workers=1)
    two = import_wiki_json(wiki_json, tmp_path / "two.sqlite", workers=2)
    assert (one.articles, one.sections) == (two.articles, two.sections) and one.articles > 0
    with pytest.raises(ValueError, match="batch_size"):
        import_wiki_json(wiki_json, tmp_path / "bad.sqlite", batch_size=0)
