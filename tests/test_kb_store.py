"""KBStore: lookups by any url spelling, BM25 search and its ordering, safe query text, threads."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kbvqa.data.schema import Article, Section
from kbvqa.kb.base import InMemoryKB, KnowledgeBase, SearchHit
from kbvqa.kb.importer import build_kb
from kbvqa.kb.store import KBError, KBStore, fts_query, open_kb, plan_query

W = "https://en.wikipedia.org/wiki/"


def A(title, *sections, url=None):
    return Article(url=url or W + title.replace(" ", "_"), title=title,
                   sections=[Section(index=i, title=t, text=x) for i, (t, x) in enumerate(sections)])


ARTICLES = [
    A("Eiffel Tower",
      ("Summary", "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris."),
      ("Height", "The tower is 330 metres tall. Its height was increased by antennas."),
      ("Visitors", "Millions of visitors climb the tower every year.")),
    A("Big Ben",
      ("Summary", "Big Ben is the nickname for the Great Bell of the clock in London."),
      ("Tower", "The Elizabeth Tower is 96 metres tall and houses the clock.")),
    A("Bee", ("Summary", "Bees are winged insects closely related to wasps and ants, known for pollination.")),
    A("Edificio España", ("Summary", "A skyscraper in Madrid, Spain; the building has 25 floors."),
      url=W + "Edificio_Espa%C3%B1a"),
]


@pytest.fixture(scope="module")
def kb(tmp_path_factory):
    p = tmp_path_factory.mktemp("kb") / "kb.sqlite"
    build_kb(ARTICLES, p)
    with KBStore(p) as store:
        yield store


def test_protocol_and_basics(kb):
    assert isinstance(kb, KBStore)
    k: KnowledgeBase = kb  # structural: get/search/__contains__/__len__
    assert len(k) == 4
    assert W + "Big_Ben" in kb and "http://en.m.wikipedia.org/wiki/big_Ben/" in kb
    assert W + "Nope" not in kb and 42 not in kb
    assert kb.get(W + "Nope") is None
    assert list(kb.iter_urls(chunk=2)) == [W + "Eiffel_Tower", W + "Big_Ben", W + "Bee", W + "Edificio_España"]
    assert [a.title for a in kb] == ["Eiffel Tower", "Big Ben", "Bee", "Edificio España"]
    assert kb.get("https://en.wikipedia.org/wiki/Edificio_España").sections[0].text.startswith("A skyscraper")
    s = kb.stats()
    assert s["articles"] == 4 and s["sections"] == 7 and s["format"] == "kbvqa-kb" and s["size_bytes"] > 0


def test_search_ranking(kb):
    hits = kb.search("How tall is the Eiffel Tower?", k=5)
    assert all(isinstance(h, SearchHit) for h in hits)
    assert hits[0].url == W + "Eiffel_Tower"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(h.score > 0 for h in hits)
    top = kb.search("height antennas", k=1)[0]
    assert (top.title, top.section_index, top.section_title) == ("Eiffel Tower", 1, "Height")
    # porter stemming: "pollinating" finds "pollination"; remove_diacritics: "espana" finds "España"
    assert kb.search("pollinating insect")[0].url == W + "Bee"
    assert kb.search("Madrid floors")[0].url == W + "Edificio_España"
    assert len(kb.search("tower", k=2)) == 2
    assert kb.search("zzzunknownword") == []
    assert kb.search("   ") == [] and kb.search("tower", k=0) == []


def test_title_weighs_more(tmp_path):
    build_kb([A("One", ("Clock", "some words here")), A("Two", ("Other", "clock words here"))], tmp_path / "kb.sqlite")
    with KBStore(tmp_path / "kb.sqlite") as kb:
        assert [h.url for h in kb.search("clock")] == [W + "One", W + "Two"]


@pytest.mark.parametrize("q", ['"unbalanced', "wrought-iron", "title:tower", "tower AND OR NOT", "NEAR(a b)",
                               "(tower", "tower*", "^tower", "a + b - c", "'; DROP TABLE articles; --", "ü ß 東京",
                               "AND", "OR OR", "\x00", "_", " ".join(f"w{i}" for i in range(300)) + " tower"])
def test_query_text_never_raises(kb, q):
    assert isinstance(kb.search(q), list)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=60))
def test_any_text_is_a_safe_query(kb, q):
    hits = kb.search(q, k=3)
    assert len(hits) <= 3


def test_fts_query_sanitiser():
    assert fts_query("What is the height of the tower?") == '"height" OR "tower"'
    assert fts_query("the of") == '"the" OR "of"'  # only stopwords: keep them rather than nothing
    assert fts_query("wrought-iron: \"x\"") == '"wrought" OR "iron" OR "x"'
    assert fts_query("?!") is None


def test_search_in_one_article(kb):
    hits = kb.search_in("http://en.wikipedia.org/wiki/Eiffel_Tower", "tower tall metres", k=5)
    assert hits and {h.url for h in hits} == {W + "Eiffel_Tower"}
    assert hits[0].section_title == "Height"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert kb.search_in(W + "Big_Ben", "pollination") == []
    with pytest.raises(KeyError, match="not in the KB"):
        kb.search_in(W + "Nope", "tower")


def test_same_answers_as_in_memory_kb(kb):
    mem = InMemoryKB(ARTICLES)
    for url in kb.iter_urls():
        assert kb.get(url).model_dump() == mem.get(url).model_dump() | {"url": url}


def test_threads_share_one_store(kb):
    errors = []

    def work():
        try:
            for _ in range(50):
                assert kb.search("tower")[0].url in (W + "Eiffel_Tower", W + "Big_Ben")
                assert kb.get(W + "Bee").title == "Bee"
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_read_only_by_default(tmp_path):
    p = tmp_path / "kb.sqlite"
    build_kb(ARTICLES, p)
    with KBStore(p) as kb:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            kb._db.execute("DELETE FROM articles")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["kb.sqlite"]  # no -wal/-shm left behind


def test_open_is_fast_and_checks_format(tmp_path):
    p = tmp_path / "kb.sqlite"
    build_kb(ARTICLES, p)
    t = time.perf_counter()
    KBStore(p).close()
    assert time.perf_counter() - t < 0.5
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.close()
    with pytest.raises(KBError, match="not a kbvqa KB"):
        KBStore(other)
    txt = tmp_path / "notes.txt"
    txt.write_text("hello")
    with pytest.raises(KBError, match="not a SQLite KB"):
        KBStore(txt)
    with pytest.raises(FileNotFoundError):
        KBStore(tmp_path / "missing.sqlite")
    with pytest.raises(FileNotFoundError):
        open_kb(tmp_path / "missing.json")


def test_plan_query_keeps_rare_words_within_budget():
    df = {"tower": 50_000, "height": 100, "paris": 9_000}
    assert plan_query("What is the height of the tower?", df, 100_000, 10_000) == ['"height"']
    assert plan_query("height of the tower in Paris", df, 100_000, 10_000) == ['"height" OR "paris"']
    assert plan_query("height tower", df, 100_000, 100_000) == ['"height" OR "tower"']  # big budget: all words
    # every word over budget: AND the rarest first, then the rarest alone if the AND finds nothing
    assert plan_query("tower paris", {"tower": 50_000, "paris": 40_000}, 100_000, 10_000) == [
        '"paris" AND "tower"', '"paris"']
    assert plan_query("tower", df, 100_000, 10) == ['"tower"']
    assert plan_query("The Who", {}, 100, 10) == ['"the who"']  # function words only: one phrase
    assert plan_query(" ?! ", {}, 100, 10) == []


def test_store_uses_sampled_frequencies(tmp_path):
    arts = [A(f"Item {i}", ("Body", f"common filler words plus marker{i}" + (" half" if i % 2 else "")))
            for i in range(400)]
    build_kb(arts, tmp_path / "kb.sqlite")
    with KBStore(tmp_path / "kb.sqlite", max_scored=50) as kb:
        df = dict(kb._db.execute("SELECT term, df FROM term_df").fetchall())
        assert 300 <= df["common"] <= 500 and "marker7" not in df
        assert kb.search("common marker7")[0].url == W + "Item_7"  # 'common' left out, rare word kept
        hits = kb.search("common half", k=5)  # both frequent: AND of the two
        assert len(hits) == 5 and all(h.text.endswith("half") for h in hits)
    with KBStore(tmp_path / "kb.sqlite") as kb:  # default budget: everything is scored
        assert len(kb.search("common", k=500)) == 400


@pytest.mark.parametrize("which", ["text", "image"])
@pytest.mark.parametrize("part", [".json", ".npy"])
def test_a_damaged_index_file_is_named_with_how_to_rebuild(tmp_path, which, part):
    """A dense section index or an image index whose description or vectors were overwritten is one
    ValueError naming the file and the `kbvqa index` command, not a JSON or NumPy traceback."""
    import numpy as np

    from kbvqa.kb.image_index import ImageIndex
    from kbvqa.kb.text_index import TextIndex

    vectors = np.eye(4, dtype=np.float32)[:3]
    if which == "text":
        TextIndex.from_rows("emb", 4, vectors, {"https://en.wikipedia.org/wiki/A": (0, 3)}, [1, 2, 3]).save(tmp_path / "t")
        load, stem = (lambda: TextIndex.load(tmp_path / "t")), tmp_path / "t"
    else:
        idx = ImageIndex("enc", 4)
        idx.add(vectors, [f"https://en.wikipedia.org/wiki/{c}" for c in "ABC"])
        idx.save(tmp_path / "i")
        load, stem = (lambda: ImageIndex.load(tmp_path / "i")), tmp_path / "i"
    target = stem.with_suffix(part)
    assert target.is_file()
    target.write_bytes(b"\x00" * 16 + target.read_bytes()[16:])
    with pytest.raises(ValueError) as exc:
        load()
    msg = str(exc.value)
    assert str(stem) in msg and f"kbvqa index {which if which == 'text' else 'images'}" in msg, msg
