"""The SQLite + FTS5 KB store: open an imported wiki KB in milliseconds and query it.

Built by `kb.importer` (or `build_kb`); implements the `kb.base.KnowledgeBase` protocol, so stages
use it interchangeably with `InMemoryKB`. Opening reads one small table (no scan), so a 2M-article
KB opens as fast as a 100-article one, and memory stays flat: articles are read on demand.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from kbvqa.data.schema import Article, Section
from kbvqa.data.text import SEARCH_STOPWORDS
from kbvqa.data.urls import canonical_url
from kbvqa.kb.base import SearchHit
from kbvqa.kb.importer import FORMAT_NAME, FORMAT_VERSION, TOKEN_RE, import_wiki_json

__all__ = ["KBStore", "KBError", "open_kb", "fts_query", "plan_query"]

SQLITE_MAGIC = b"SQLite format 3\x00"
_MAX_TOKENS = 256  # of a query, read (a pasted paragraph stays cheap)
_MAX_TERMS = 32  # of those, put in one MATCH expression



class KBError(RuntimeError):
    """The file is not a usable kbvqa KB (wrong format, version, missing, or damaged); the message
    names the file and what to do."""


#: What a KB of this format holds, table -> the columns the queries read (the FTS5 shadow tables by
#: name only). Checked at open from the schema alone — no data page is read, so a 2M-article KB opens
#: as fast as before; damage to the data pages shows at query time instead (`KBStore._reading`).
_TABLES: dict[str, tuple[str, ...]] = {
    "kb_info": ("key", "value"),
    "articles": ("id", "url", "title", "first_section", "n_sections", "image_urls", "meta"),
    "sections": ("id", "article_id", "idx", "title", "text"),
    "term_df": ("term", "df"),
    "fts": ("title", "text"), "fts_data": (), "fts_idx": (), "fts_config": (),
}


def reimport_hint(path: Path | str, source: str | None = None) -> str:
    """What to do about a KB file that cannot be used: import its wiki file again over it."""
    wiki = source or "WIKI.json"
    return f"re-import it: kbvqa kb import {wiki} --out {path} --force"


def _tokens(text: str) -> list[str]:
    seen: dict[str, None] = {}
    for t in TOKEN_RE.findall(text.lower()):
        t = t.replace("_", " ").strip()
        if t:
            seen.setdefault(t, None)
    return list(seen)[:_MAX_TOKENS]


def _quote(t: str) -> str:
    return '"' + t.replace('"', '""') + '"'


def fts_query(text: str) -> str | None:
    """Turn arbitrary user text into a safe FTS5 MATCH expression (quoted terms OR'ed), or None.

    Quotes, hyphens, colons, parentheses and AND/OR/NOT/NEAR are FTS5 syntax; only the word
    tokens survive, each as a quoted string, so no user text can raise a syntax error. Function
    words are dropped unless the query has nothing else.
    """
    toks = _tokens(text)
    content = ([t for t in toks if t not in SEARCH_STOPWORDS] or toks)[:_MAX_TERMS]
    return " OR ".join(_quote(t) for t in content) if content else None


def plan_query(text: str, df: dict[str, int], n_sections: int, budget: int) -> list[str]:
    """MATCH expressions to try in order, keeping the number of sections BM25 must score near `budget`.

    FTS5 scores every section that matches, so an OR of frequent words scores most of the KB
    (hundreds of ms). The rarest words carry nearly all of the BM25 signal: words are added
    rarest-first while the estimated matches stay within the budget; if even the rarest word is
    over budget, the two or three rarest are AND-ed first (falling back to the rarest alone
    when that finds nothing). A query of function words only becomes one phrase.
    """
    toks = _tokens(text)
    if not toks:
        return []
    content = [t for t in toks if t not in SEARCH_STOPWORDS]
    if not content:
        return [_quote(" ".join(toks[:_MAX_TERMS]))]
    ranked = sorted(content, key=lambda t: df.get(t, 0))  # stable: ties keep query order
    chosen: list[str] = []
    total = 0
    for t in ranked:
        d = df.get(t, 0)
        if not chosen or (total + d <= budget and len(chosen) < _MAX_TERMS):
            chosen.append(t)
            total += d
    if total <= budget or len(ranked) == 1:
        return [" OR ".join(_quote(t) for t in chosen)]
    est, conj = float(n_sections or 1), []
    for t in ranked[:3]:
        conj.append(t)
        est *= df.get(t, 0) / max(n_sections, 1)
        if len(conj) >= 2 and est <= budget:
            break
    return [" AND ".join(_quote(t) for t in conj), _quote(ranked[0])]


class KBStore:
    """Read access to a KB database. Thread-safe (one connection behind a lock; `check_same_thread=False`)."""

    def __init__(self, path: str | os.PathLike, *, readonly: bool = True, max_scored: int = 10_000):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: no such KB file")
        with open(self.path, "rb") as f:
            if f.read(16) != SQLITE_MAGIC:
                raise KBError(f"{self.path}: not a SQLite KB (import a wiki JSON with `kbvqa kb import`)")
        uri = self.path.resolve().as_uri() + ("?mode=ro" if readonly else "?mode=rw")
        self._db = sqlite3.connect(uri, uri=True, check_same_thread=False)
        self._lock = threading.RLock()
        try:
            info = dict(self._db.execute("SELECT key, value FROM kb_info").fetchall())
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise KBError(f"{self.path}: not a kbvqa KB, or a damaged one ({e}); {reimport_hint(self.path)}") from None
        if info.get("format") != FORMAT_NAME:
            self._db.close()
            raise KBError(f"{self.path}: kb_info.format is {info.get('format')!r}, expected {FORMAT_NAME!r}")
        if info.get("version") != str(FORMAT_VERSION):
            self._db.close()
            raise KBError(f"{self.path}: KB format version {info.get('version')}, this kbvqa reads "
                          f"{FORMAT_VERSION}; re-import the wiki file")
        self._info = info
        try:
            self._check_schema()
            self._len = int(info["articles"])
            self._n_sections = int(info["sections"])
        except (KBError, KeyError, ValueError) as e:
            self._db.close()
            raise e if isinstance(e, KBError) else KBError(
                f"{self.path}: kb_info lacks a count ({e}); {self._hint()}") from None
        self.max_scored = max_scored  # sections BM25 may score per query before rare-first planning kicks in
        self._db.execute("PRAGMA cache_size=-65536")

    def _check_schema(self) -> None:
        """Every table and column the queries read is there (a dropped table or a renamed column is
        named at open, not met as an OperationalError in the middle of a run)."""
        with self._reading():
            names = {n for (n,) in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            for table, columns in _TABLES.items():
                if table not in names:
                    raise KBError(f"{self.path}: the KB has no table {table!r} (damaged or changed after import); "
                                  f"{self._hint()}")
                if not columns:
                    continue
                have = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
                missing = [c for c in columns if c not in have]
                if missing:
                    raise KBError(f"{self.path}: table {table!r} of the KB has no column {', '.join(missing)} "
                                  f"(damaged or changed after import); "
                                  f"{self._hint()}")

    def _hint(self) -> str:
        return reimport_hint(self.path, self._info.get("source"))  # the wiki file this KB was imported from

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """A query on the KB file: SQLite's "database disk image is malformed", "no such table" or an
        FTS5 corruption error becomes a KBError naming the file and how to rebuild it."""
        try:
            yield
        except sqlite3.ProgrammingError:  # our own misuse (a closed store), not the file's state
            raise
        except sqlite3.DatabaseError as e:
            raise KBError(f"{self.path}: the KB cannot be read, damaged ({e}); "
                          f"{self._hint()}") from None

    def __getstate__(self) -> dict[str, Any]:
        """Pickle as the path (Ray actors): the copy reopens the file read-only on its side, so every
        node needs the KB at the same absolute path (or on shared storage)."""
        return {"path": str(self.path.resolve()), "max_scored": self.max_scored}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], max_scored=state["max_scored"])  # type: ignore[misc]

    # -- protocol ---------------------------------------------------------------------------------
    def get(self, url: str) -> Article | None:
        """The article with this url (any spelling canonical_url accepts), or None."""
        with self._lock, self._reading():
            row = self._db.execute(
                "SELECT id, url, title, first_section, n_sections, image_urls, meta FROM articles WHERE url=?",
                (canonical_url(url),)).fetchone()
            if row is None:
                return None
            _, curl, title, first, n, images, meta = row
            secs = self._db.execute("SELECT idx, title, text FROM sections WHERE id BETWEEN ? AND ? ORDER BY id",
                                    (first, first + n - 1)).fetchall()
        return Article(url=curl, title=title, sections=[Section(index=i, title=t, text=x) for i, t, x in secs],
                       image_urls=json.loads(images), meta=json.loads(meta))

    def search(self, query: str, k: int = 10) -> list[SearchHit]:
        """Top-k sections by BM25 (title matches weigh double); score = -bm25, higher is better.

        Words so frequent that OR-ing them would score more than `max_scored` sections are left
        out, rarest kept (see `plan_query`); on a small KB every content word is used.
        """
        return self._search(query, k, None)

    def search_in(self, url: str, query: str, k: int = 10) -> list[SearchHit]:
        """Sections of one article ranked by BM25 against `query`; KeyError if the article is absent."""
        with self._lock, self._reading():
            row = self._db.execute("SELECT first_section, n_sections FROM articles WHERE url=?",
                                   (canonical_url(url),)).fetchone()
        if row is None:
            raise KeyError(f"{url!r} is not in the KB {self.path}")
        first, n = row
        if n == 0:
            return []
        return self._search(query, k, (first, first + n - 1))

    def _search(self, query: str, k: int, rowids: tuple[int, int] | None) -> list[SearchHit]:
        if not isinstance(query, str):
            raise TypeError(f"query must be a str, got {type(query).__name__}")
        if k <= 0:
            return []
        where = "fts MATCH ?" + (" AND rowid BETWEEN ? AND ?" if rowids else "")
        sql = (f"SELECT a.url, a.title, s.idx, s.title, s.text, h.r FROM "
               f"(SELECT rowid AS rid, rank AS r FROM fts WHERE {where} ORDER BY rank LIMIT ?) h "
               f"JOIN sections s ON s.id = h.rid JOIN articles a ON a.id = s.article_id ORDER BY h.r, s.id")
        rows: list = []
        with self._lock, self._reading():
            if rowids:  # one article: at most a few dozen sections, no planning needed
                plans = [m] if (m := fts_query(query)) else []
            else:
                toks = _tokens(query)
                df = dict(self._db.execute(f"SELECT term, df FROM term_df WHERE term IN ({','.join('?' * len(toks))})",
                                           toks).fetchall()) if toks else {}
                plans = plan_query(query, df, self._n_sections, self.max_scored)
            for match in plans:
                params: tuple = (match, *rowids, k) if rowids else (match, k)
                rows = self._db.execute(sql, params).fetchall()
                if rows:
                    break
        return [SearchHit(url=u, title=t, section_index=i, section_title=st, text=x, score=-r)
                for u, t, i, st, x, r in rows]

    def __contains__(self, url: object) -> bool:
        if not isinstance(url, str):
            return False
        with self._lock, self._reading():
            return self._db.execute("SELECT 1 FROM articles WHERE url=?", (canonical_url(url),)).fetchone() is not None

    def __len__(self) -> int:
        return self._len

    # -- iteration and info -----------------------------------------------------------------------
    def iter_urls(self, chunk: int = 10_000) -> Iterator[str]:
        """Canonical urls in import order, read in chunks (the lock is not held between chunks)."""
        last = 0
        while True:
            with self._lock, self._reading():
                rows = self._db.execute("SELECT id, url FROM articles WHERE id > ? ORDER BY id LIMIT ?",
                                        (last, chunk)).fetchall()
            if not rows:
                return
            last = rows[-1][0]
            for _, u in rows:
                yield u

    def __iter__(self) -> Iterator[Article]:
        """Articles in import order (like InMemoryKB)."""
        for u in self.iter_urls():
            a = self.get(u)
            if a is not None:
                yield a

    def stats(self) -> dict[str, Any]:
        """Counts and provenance recorded at import, plus the file size."""
        info = dict(self._info)
        out: dict[str, Any] = {"path": str(self.path), "size_bytes": self.path.stat().st_size}
        for key in ("articles", "sections", "duplicates"):
            out[key] = int(info.pop(key, 0))
        if "import_seconds" in info:
            out["import_seconds"] = float(info.pop("import_seconds"))
        out.update(info)
        return out

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> "KBStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KBStore({str(self.path)!r}, articles={self._len})"


def _is_sqlite(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(16) == SQLITE_MAGIC


_KB_SUFFIXES = (".sqlite", ".sqlite3", ".db")


def _refuse_damaged_kb(path: Path) -> None:
    """A file named like a KB, or starting like neither JSON nor gzip, whose first 16 bytes are not
    SQLite's header: a KB whose first page was overwritten, not a wiki file to import (the importer
    would only say it expected '{' or '[')."""
    with open(path, "rb") as f:
        head = f.read(64)
    text = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    if path.suffix.lower() not in _KB_SUFFIXES and (text[:1] in (b"{", b"[") or head[:2] == b"\x1f\x8b"):
        return
    raise KBError(f"{path}: neither a SQLite KB (its first bytes are not SQLite's header: found {head[:16]!r}) "
                  f"nor a wiki JSON/JSONL; if it was a KB it is damaged: {reimport_hint(path)}")


def _fresh_cache(cache: Path, src: Path) -> bool:
    """True if `cache` is a KB imported from `src` as it is now (same size and mtime)."""
    if not cache.is_file():
        return False
    try:
        with KBStore(cache) as kb:
            info = kb._info
    except (KBError, sqlite3.DatabaseError):
        return False
    st = src.stat()
    return info.get("source_size") == str(st.st_size) and info.get("source_mtime_ns") == str(st.st_mtime_ns)


def open_kb(path_or_json: str | os.PathLike, *, cache_dir: str | os.PathLike | None = None,
            progress: bool = False) -> KBStore:
    """Open a KB: a SQLite KB file directly, or a wiki .json/.jsonl(.gz) imported once to a cache.

    The cache sits beside the wiki file (`NAME.kb.sqlite`) or, if that directory is not writable,
    in `cache_dir` / the temp dir; it is re-imported when the wiki file's size or mtime changes.
    """
    p = Path(path_or_json)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such KB or wiki file")
    if _is_sqlite(p):
        return KBStore(p)
    _refuse_damaged_kb(p)
    if cache_dir is not None:
        candidates = [Path(cache_dir)]
    else:
        candidates = [p.parent] if os.access(p.parent, os.W_OK) else []
        candidates.append(Path(tempfile.gettempdir()) / "kbvqa-kb")
    key = hashlib.sha1(str(p.resolve()).encode()).hexdigest()[:12]
    for i, d in enumerate(candidates):
        cache = d / (p.name + ".kb.sqlite") if d == p.parent else d / f"{p.name}.{key}.kb.sqlite"
        if _fresh_cache(cache, p):
            return KBStore(cache)
        try:
            d.mkdir(parents=True, exist_ok=True)
            import_wiki_json(p, cache, progress=progress, overwrite=True)
        except PermissionError:
            if i + 1 < len(candidates):
                continue
            raise
        return KBStore(cache)
    raise KBError(f"{p}: no writable place for the KB cache")  # pragma: no cover
