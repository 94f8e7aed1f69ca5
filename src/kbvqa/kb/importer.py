"""Import an E-VQA / EchoSight wiki JSON (or JSONL) into the SQLite + FTS5 KB store.

The 2M-article E-VQA KB does not fit in memory as Python objects, so the file is stream-parsed
(ijson; never `json.load` of the whole file) and written in big batches inside one transaction.
The FTS5 index is external-content (the text is stored once, in `sections`); sections are indexed
batch by batch into a large in-memory FTS5 hash in a background thread (so parsing overlaps the
SQLite work), and the segments are merged once at the end.

FTS5 tokenising (porter + unicode61) is most of an import and runs inside SQLite on one core. With
`workers >= 2` (the default for big files on a multi-core machine) it runs in that many shard
processes instead: the parent parses and writes `articles` and `sections` as before and hands every
kept section (its global rowid, title and text) to one shard, which indexes it into a contentless
FTS5 table of its own database file. At the end the shards' index segments are copied into the KB's
FTS5 table (segment ids renumbered, document sizes and totals added up; see `_merge_shards`), so the
index is exactly the one a single process builds: the same documents, tokens, positions and BM25
statistics, hence the same search results.

Accepted inputs (detected by content, optionally gzip-compressed):
  * a JSON object mapping url -> article (`title`, `section_titles`, `section_texts`, `image_urls`,
    `image_reference_descriptions`, `image_section_indices`, `url`, ...): the E-VQA / EchoSight format;
  * JSONL, one article object (with a `url`) per line;
  * a JSON array of article objects.
Fields other than url/title/section_titles/section_texts/image_urls are kept in the `meta` column.
"""

from __future__ import annotations

import gzip
import json
import os
import queue
import re
import sqlite3
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping

import ijson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from kbvqa.data.schema import Article
from kbvqa.data.urls import canonical_url, url_to_title

TOKEN_RE = re.compile(r"\w+")  # the word tokens queries and the df sample agree on

__all__ = ["ImportConfig", "ImportStats", "KBFormatError", "import_wiki_json", "build_kb", "auto_workers",
           "FORMAT_NAME", "FORMAT_VERSION", "SCHEMA_SQL"]

FORMAT_NAME = "kbvqa-kb"
FORMAT_VERSION = 1
KNOWN_FIELDS = ("url", "title", "section_titles", "section_texts", "image_urls")
ARTICLE_FIELDS = KNOWN_FIELDS + ("image_reference_descriptions", "image_section_indices")
OnDuplicate = Literal["keep_first", "error"]
ProgressFn = Callable[[str, int, int], None]  # (phase, done, total)

SCHEMA_SQL = """
CREATE TABLE kb_info(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE articles(
    id INTEGER PRIMARY KEY,
    url TEXT NOT NULL UNIQUE,        -- canonical url (data.urls.canonical_url): the KB key
    raw_url TEXT NOT NULL,           -- as written in the source file
    title TEXT NOT NULL,
    first_section INTEGER NOT NULL,  -- sections of an article have ids first_section .. +n_sections-1
    n_sections INTEGER NOT NULL,
    image_urls TEXT NOT NULL,        -- JSON list
    meta TEXT NOT NULL               -- JSON object: every other source field
);
CREATE TABLE sections(
    id INTEGER PRIMARY KEY,
    article_id INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    title TEXT NOT NULL,
    text TEXT NOT NULL
);
CREATE TABLE term_df(            -- estimated section frequency of common words (query planning)
    term TEXT PRIMARY KEY,
    df INTEGER NOT NULL
) WITHOUT ROWID;
CREATE VIRTUAL TABLE fts USING fts5(
    title, text, content='sections', content_rowid='id',
    tokenize='porter unicode61 remove_diacritics 2'
);
"""


class ImportConfig(BaseModel):
    """How an import writes the KB: the only place these defaults are written. `kbvqa kb import`
    nests it as it is (kbvqa.pipelines.kb_import.KBImportOptions.importer), and the KB's kb_info
    records the settings it ran with (`import_options`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    batch_size: int | None = Field(None, ge=1)  # articles per insert batch (None: default_batch_size(workers))
    on_duplicate: OnDuplicate = "keep_first"  # a canonical url seen twice: keep the first (counted) or "error"
    workers: int | None = Field(None, ge=1)  # FTS indexing processes (None: auto_workers of the file size)

    @field_validator("on_duplicate", mode="before")
    @classmethod
    def _known_policy(cls, value: Any) -> Any:
        if value not in ("keep_first", "error"):
            raise ValueError(f"on_duplicate must be 'keep_first' or 'error', got {value!r}")
        return value


class KBFormatError(ValueError):
    """The wiki file is malformed; the message names the file, the article (key or line) and the field."""


@dataclass
class ImportStats:
    """What an import did; `articles` counts distinct canonical urls kept."""

    articles: int = 0
    sections: int = 0
    duplicates: int = 0
    seconds: float = 0.0
    articles_per_s: float = 0.0
    load_seconds: float = 0.0   # parse + insert + FTS tokenising (overlapped)
    index_seconds: float = 0.0  # FTS segment merge (optimize), ANALYZE, finalise
    workers: int = 1  # FTS indexing processes (1: in the importing process)
    shard_peak_rss_mb: list[float] = field(default_factory=list)  # each shard process's peak RSS
    duplicate_examples: list[str] = field(default_factory=list)  # first few canonical urls seen twice
    source: str = ""
    out: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------------------------------
# Parsing: every reader yields (position, raw_url, article_dict), position naming the article for errors.

def _open_raw(path: Path):
    raw = open(path, "rb")
    with open(path, "rb") as probe:
        magic = probe.read(2)
    return raw, (gzip.GzipFile(fileobj=raw, mode="rb") if magic == b"\x1f\x8b" else raw)


def _one_line(exc: BaseException) -> str:
    """A JSON parser's message on one line (yajl's points at the bad byte on a second one)."""
    return " ".join(str(exc).split())


def _sniff(path: Path) -> str:
    """'mapping' (url -> article), 'jsonl' (article per line) or 'array'; by content, not by name."""
    raw, f = _open_raw(path)
    try:
        read = f.read(4096)
        head = read.lstrip()
        if head.startswith(b"\xef\xbb\xbf"):
            head = head[3:].lstrip()
        if not head:
            raise KBFormatError(f"{path}: file is empty (expected a wiki JSON object or JSONL)")
        if head[:1] == b"[":
            return "array"
        if head[:1] != b"{":
            at = len(read) - len(head)  # after leading whitespace and a byte-order mark
            raise KBFormatError(f"{path}: byte {at}: expected '{{' or '[' to start a wiki JSON/JSONL file, "
                                f"found {head[:20]!r}: the start of the file is overwritten or it is not a wiki "
                                "file (a KB is opened by `kbvqa kb search`, not imported)")
    finally:
        f.close()
        raw.close()
    raw, f = _open_raw(path)
    try:
        events = ijson.parse(f, multiple_values=True)
        try:
            prefix, ev, value = next(events)  # start_map
            prefix, ev, first_key = next(events)
            if ev == "end_map":
                return "mapping"  # {} : an empty KB
            prefix, ev, value = next(events)
        except (ijson.JSONError, ijson.IncompleteJSONError) as e:
            raise KBFormatError(f"{path}: invalid JSON at the start of the file: {_one_line(e)}") from None
        except StopIteration:
            raise KBFormatError(f"{path}: truncated JSON at the start of the file") from None
        # The first value is itself an object -> url -> article mapping; a string/list -> an article.
        # A key that is an article field name means the object is itself an article.
        return "mapping" if ev == "start_map" and first_key not in ARTICLE_FIELDS else "jsonl"
    finally:
        f.close()
        raw.close()


def _iter_mapping(path: Path, f) -> Iterator[tuple[str, str, Any]]:
    n = 0
    last = None
    try:
        for key, value in ijson.kvitems(f, "", use_float=True, buf_size=1 << 18):
            n += 1
            last = key
            yield f"article {n} (key {key!r})", key, value
    except (ijson.JSONError, ijson.IncompleteJSONError) as e:
        where = f"after article {n} (key {last!r})" if last is not None else "before the first article"
        raise KBFormatError(f"{path}: invalid JSON {where}: {_one_line(e)}") from None


def _iter_array(path: Path, f) -> Iterator[tuple[str, str, Any]]:
    n = 0
    try:
        for value in ijson.items(f, "item", use_float=True, buf_size=1 << 18):
            n += 1
            url = value.get("url") if isinstance(value, dict) else None
            yield f"item {n - 1}" + (f" (url {url!r})" if url else ""), url, value
    except (ijson.JSONError, ijson.IncompleteJSONError) as e:
        raise KBFormatError(f"{path}: invalid JSON after item {n - 1}: {_one_line(e)}") from None


def _iter_jsonl(path: Path, f) -> Iterator[tuple[str, str, Any]]:
    for lineno, line in enumerate(f, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise KBFormatError(f"{path}: line {lineno}: invalid JSON: {e}") from None
        url = value.get("url") if isinstance(value, dict) else None
        yield f"line {lineno}" + (f" (url {url!r})" if url else ""), url, value


def _to_row(src: str, where: str, key: Any, value: Any) -> tuple[str, str, str, list[tuple[str, str]], list[str], dict]:
    """Validate one source article; returns (canonical url, raw url, title, sections, image_urls, meta)."""
    def bad(msg: str) -> KBFormatError:
        return KBFormatError(f"{src}: {where}: {msg}")

    if not isinstance(value, dict):
        raise bad(f"article must be a JSON object, got {type(value).__name__}")
    inner_url = value.get("url")
    if key is None:
        key = inner_url
    if not isinstance(key, str) or not key.strip():
        raise bad(f"field 'url': missing or not a non-empty string ({inner_url!r})")
    titles = value.get("section_titles", [])
    texts = value.get("section_texts", [])
    if not isinstance(titles, list):
        raise bad(f"field 'section_titles' must be a list, got {type(titles).__name__}")
    if not isinstance(texts, list):
        raise bad(f"field 'section_texts' must be a list, got {type(texts).__name__}")
    if len(titles) != len(texts):
        raise bad(f"section_titles has {len(titles)} entries but section_texts has {len(texts)}")
    for name, seq in (("section_titles", titles), ("section_texts", texts)):
        if not set(map(type, seq)) <= {str}:  # one C-level pass; the loop below only names the culprit
            for i, s in enumerate(seq):
                if not isinstance(s, str):
                    raise bad(f"field '{name}[{i}]' must be a string, got {type(s).__name__}")
    images = value.get("image_urls", [])
    if not isinstance(images, list) or not all(isinstance(u, str) for u in images):
        raise bad("field 'image_urls' must be a list of strings")
    title = value.get("title")
    if title is None:
        title = url_to_title(key)
    elif not isinstance(title, str):
        raise bad(f"field 'title' must be a string, got {type(title).__name__}")
    meta = {k: v for k, v in value.items() if k not in KNOWN_FIELDS}
    canon = canonical_url(key)
    if isinstance(inner_url, str) and inner_url != key and canonical_url(inner_url) != canon:
        meta["source_url_field"] = inner_url  # key and inner url disagree: keep both, key wins
    return canon, key, title, list(zip(titles, texts)), images, meta


# --------------------------------------------------------------------------------------------------
# Writing

FTS_PGSZ = 8000
FTS_TOKENIZE = "porter unicode61 remove_diacritics 2"  # must match SCHEMA_SQL's fts table
_SEG_SHIFT = 37  # FTS5 %_data rowid = segid << 37 | dlidx << 36 | height << 31 | page (fts5_index.c)
_SHARD_HASHSIZE = 24 << 20


def _varint(v: int) -> bytes:
    """SQLite's varint (big-endian 7-bit groups; a 9th byte carries 8 bits), as FTS5 records use."""
    if v < 0:
        raise ValueError("negative varint")
    if v >= 1 << 56:
        out = [v & 0xFF]
        v >>= 8
        for _ in range(8):
            out.append((v & 0x7F) | 0x80)
            v >>= 7
        return bytes(reversed(out))
    groups = [v & 0x7F]
    v >>= 7
    while v:
        groups.append((v & 0x7F) | 0x80)
        v >>= 7
    return bytes(reversed(groups))


def _read_varints(b: bytes, i: int = 0) -> list[int]:
    out = []
    n = len(b)
    while i < n:
        v = 0
        for k in range(9):
            c = b[i]
            i += 1
            if k == 8:
                v = (v << 8) | c
                break
            v = (v << 7) | (c & 0x7F)
            if not c & 0x80:
                break
        out.append(v)
    return out


class _FormatUnknown(RuntimeError):
    """An FTS5 structure record this code cannot read (nothing has been changed)."""


def _parse_structure(block: bytes) -> tuple[bytes, int, list[list[tuple[int, int, int]]]]:
    """An FTS5 structure record (%_data rowid 10, SQLite 3.x format 4): (cookie, write counter,
    levels of (segid, first page, last page)). Refuses what it does not know (an ongoing merge)."""
    v = _read_varints(block, 4)
    if len(v) < 3 or block[4:8] == b"\xff\x00\x00\x01":  # too short, or the V2 layout of newer SQLite
        raise _FormatUnknown("unexpected FTS5 structure record (SQLite's FTS5 format changed?)")
    n_level, n_seg, counter = v[0], v[1], v[2]
    i, levels = 3, []
    for _ in range(n_level):
        n_merge, n = v[i], v[i + 1]
        i += 2
        if n_merge:
            raise _FormatUnknown("FTS5 shard has an unfinished incremental merge")
        levels.append([(v[i + 3 * j], v[i + 3 * j + 1], v[i + 3 * j + 2]) for j in range(n)])
        i += 3 * n
    if i != len(v) or sum(len(lv) for lv in levels) != n_seg:
        raise _FormatUnknown("unexpected FTS5 structure record (SQLite's FTS5 format changed?)")
    return block[:4], counter, levels


def _merge_shards(db: sqlite3.Connection, paths: list[Path]) -> None:
    """Copy the FTS5 index segments of shard databases into the (empty) `fts` table of `db`.

    An FTS5 index is a set of segments listed in the structure record; each segment is a b-tree of
    terms -> doclists (rowid, positions) in %_data rows keyed by segment id and page, plus %_idx
    rows. Shards index disjoint rowids with the same tokenizer and page size, so their segments are
    valid segments of one index: copied with fresh segment ids, with every shard's %_docsize rows
    and the summed averages record (row count, tokens per column), they form the index a single
    process would have built, up to how documents are grouped into segments (which no query sees).
    `db` must be in autocommit mode; the copy is one transaction.
    """
    _, main_counter, main_levels = _parse_structure(db.execute("SELECT block FROM fts_data WHERE id=10").fetchone()[0])
    if any(main_levels) or db.execute("SELECT count(*) FROM fts_docsize").fetchone()[0]:
        raise RuntimeError("the KB's FTS index is not empty; cannot merge shards into it")
    cookie = db.execute("SELECT block FROM fts_data WHERE id=10").fetchone()[0][:4]
    levels: list[list[tuple[int, int, int]]] = []
    totals: list[int] = []
    counter = main_counter
    next_seg = 1
    mask = (1 << _SEG_SHIFT) - 1
    names = [f"shard{i}" for i in range(len(paths))]
    for name, path in zip(names, paths):  # ATTACH and DETACH cannot run inside a transaction
        db.execute(f"ATTACH DATABASE ? AS {name}", (str(path),))
    try:
        db.execute("BEGIN")
        for name in names:
            _, c, lv = _parse_structure(db.execute(f"SELECT block FROM {name}.fts_data WHERE id=10").fetchone()[0])
            counter += c
            avg = _read_varints(db.execute(f"SELECT block FROM {name}.fts_data WHERE id=1").fetchone()[0])
            if avg:
                totals = [a + b for a, b in zip(avg, totals)] if totals else avg
            for li, segs in enumerate(lv):
                while len(levels) <= li:
                    levels.append([])
                for segid, first, last in segs:
                    new = next_seg
                    next_seg += 1
                    if new >= 1 << 16:
                        raise RuntimeError("too many FTS5 segments to merge")
                    db.execute(f"INSERT INTO main.fts_data(id, block) SELECT (id & ?) | (? << ?), block "
                               f"FROM {name}.fts_data WHERE id >= ? AND id < ?",
                               (mask, new, _SEG_SHIFT, segid << _SEG_SHIFT, (segid + 1) << _SEG_SHIFT))
                    db.execute(f"INSERT INTO main.fts_idx(segid, term, pgno) SELECT ?, term, pgno FROM {name}.fts_idx "
                               "WHERE segid = ?", (new, segid))
                    levels[li].append((new, first, last))
            db.execute(f"INSERT INTO main.fts_docsize(id, sz) SELECT id, sz FROM {name}.fts_docsize")
        body = [_varint(len(levels)), _varint(sum(len(lv) for lv in levels)), _varint(counter)]
        for segs in levels:
            body += [_varint(0), _varint(len(segs))]
            for seg in segs:
                body += [_varint(x) for x in seg]
        db.execute("UPDATE main.fts_data SET block = ? WHERE id = 10", (cookie + b"".join(body),))
        db.execute("UPDATE main.fts_data SET block = ? WHERE id = 1", (b"".join(_varint(x) for x in totals),))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    finally:
        for name in names:
            db.execute(f"DETACH DATABASE {name}")


# A shard process runs this code in a fresh interpreter (`python -c`): standard library only, so it
# starts in milliseconds and small, and never re-runs the caller's __main__ as multiprocessing's
# spawn would. It indexes (rowid, title, text) batches from the socket into a contentless FTS5 table
# (tokenizer and page size as the KB's), merges its segments into one and reports its peak RSS. A
# receiving thread keeps the socket drained, so the parent never waits while SQLite is busy here.
_SHARD_CODE = r"""
import queue, resource, sqlite3, sys, threading
from multiprocessing.connection import Connection
conn = Connection(int(sys.argv[1]))
path, hashsize, pgsz, tokenize = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
inbox = queue.Queue(maxsize=1)
def peak_mb():  # VmHWM: this process's own peak (ru_maxrss keeps the forking parent's across exec)
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
def receive():
    while True:
        try:
            item = conn.recv()
        except (EOFError, OSError):
            item = None
        inbox.put(item)
        if item is None or item == "end":
            return
try:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    for pragma in ("page_size=8192", "journal_mode=OFF", "synchronous=OFF", "locking_mode=EXCLUSIVE",
                   "cache_size=-4096", "temp_store=MEMORY"):
        db.execute("PRAGMA " + pragma)
    db.execute("CREATE VIRTUAL TABLE fts USING fts5(title, text, content='', tokenize='%s')" % tokenize)
    db.execute("INSERT INTO fts(fts, rank) VALUES('pgsz', ?)", (pgsz,))
    db.execute("INSERT INTO fts(fts, rank) VALUES('hashsize', ?)", (hashsize,))
    db.execute("BEGIN")
    threading.Thread(target=receive, daemon=True).start()
    n = 0
    while True:
        rows = inbox.get()
        if rows is None:
            sys.exit(3)  # the parent went away: leave quietly, it removes the file
        if rows == "end":
            db.execute("INSERT INTO fts(fts) VALUES('optimize')")
            db.execute("COMMIT")
            db.close()
            conn.send(("done", {"sections": n, "peak_rss_mb": peak_mb(), "cpu_s": sum(resource.getrusage(resource.RUSAGE_SELF)[:2])}))
            break
        db.executemany("INSERT INTO fts(rowid, title, text) VALUES (?,?,?)", rows)
        n += len(rows)
except Exception as e:
    try:
        conn.send(("error", "%s: %s" % (type(e).__name__, e)))
    except OSError:
        pass
    sys.exit(1)
"""


class _Shard:
    """The parent's handle on one shard process: a fresh interpreter (no inherited threads or SQLite
    handles, and unlike multiprocessing's spawn it never re-runs the caller's __main__ script),
    talking pickled batches over a socket pair."""

    def __init__(self, path: Path):
        import socket
        import subprocess
        import sys
        from multiprocessing.connection import Connection

        self.path = path
        self.remove()
        parent, child = socket.socketpair()
        try:
            self.proc = subprocess.Popen([sys.executable, "-S", "-c", _SHARD_CODE, str(child.fileno()), str(path),
                                          str(_SHARD_HASHSIZE), str(FTS_PGSZ), FTS_TOKENIZE],
                                         pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL)
        finally:
            child.close()
        self.conn = Connection(parent.detach())

    def _failure(self) -> RuntimeError:
        msg = ""
        try:
            if self.conn.poll(1.0):
                kind, msg = self.conn.recv()
        except (EOFError, OSError):
            pass
        return RuntimeError(f"FTS shard process {self.path.name} failed: {msg or f'exit code {self.proc.poll()}'}")

    def send(self, rows: list[tuple[int, str, str]]) -> None:
        try:
            self.conn.send(rows)
        except OSError:
            raise self._failure() from None

    def close_input(self) -> None:
        self.send("end")  # type: ignore[arg-type]

    def wait(self) -> dict:
        try:
            kind, info = self.conn.recv()
        except (EOFError, OSError):
            raise self._failure() from None
        self.proc.wait()
        if kind != "done":
            raise RuntimeError(f"FTS shard process {self.path.name} failed: {info}")
        return info

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.conn.close()

    def remove(self) -> None:
        for p in (self.path, Path(f"{self.path}-journal")):
            if p.exists():
                p.unlink()


_to_json = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(x, ensure_ascii=False), one encoder for all rows


class _Writer:
    """Batched writer into a fresh database file.

    Full batches go to a background thread that does the SQLite work (sqlite3 releases the GIL while
    it runs), so parsing the next batch overlaps with inserting and FTS-indexing the previous one.
    Sections are indexed as they are inserted, into a large in-memory FTS5 hash that is flushed
    rarely; `finish()` merges the segments (optimize) and writes kb_info.
    """

    FTS_HASHSIZE = 64 << 20  # bytes of pending index kept in memory before a segment is written
    # Document frequencies of common words are estimated from a sample of sections; the store uses
    # them to keep OR queries from scoring most of the KB (see KBStore.search).
    SAMPLE_EVERY = 16
    SAMPLE_CAP = 50_000

    def __init__(self, out: Path, config: ImportConfig, progress: ProgressFn | None, workers: int,
                 record: Mapping[str, Any] | None = None):
        """`config` as validated (its batch size, None: `default_batch_size(workers)`); `workers` the
        processes this import uses; `record` what kb_info keeps as `import_options` (default: `config`)."""
        batch_size = default_batch_size(workers) if config.batch_size is None else config.batch_size
        self.out = out
        self.tmp = out.with_name(out.name + ".partial")
        for p in (self.tmp, Path(str(self.tmp) + "-journal")):
            if p.exists():
                p.unlink()
        self.shards: list[_Shard] = []
        self._next_shard = 0
        self.db = sqlite3.connect(self.tmp, isolation_level=None, check_same_thread=False)
        try:
            # the parent's page cache only serves appends when the shards index (their FTS hash is theirs)
            cache = "cache_size=-131072" if workers < 2 else "cache_size=-16384"
            for pragma in ("page_size=8192", "journal_mode=OFF", "synchronous=OFF", "locking_mode=EXCLUSIVE",
                           cache, "temp_store=MEMORY"):
                self.db.execute(f"PRAGMA {pragma}")
            self.db.executescript(SCHEMA_SQL)
            self.db.execute("INSERT INTO fts(fts, rank) VALUES('pgsz', ?)", (FTS_PGSZ,))
            self.db.execute("INSERT INTO fts(fts, rank) VALUES('hashsize', ?)", (self.FTS_HASHSIZE,))
            if workers >= 2:
                self.shards = [_Shard(Path(f"{self.tmp}.shard{i}")) for i in range(workers)]
            self.db.execute("BEGIN")
        except BaseException:
            for sh in self.shards:
                sh.kill()
            self.db.close()
            raise
        self.batch_size = batch_size
        self.on_duplicate = config.on_duplicate
        self.record = {**(record if record is not None else config.model_dump(mode="json")),
                       "resolved": {"batch_size": batch_size, "workers": workers}}
        self.progress = progress
        self.stats = ImportStats(out=str(out))
        self.next_article = 1
        self.next_section = 1
        self.art_rows: list[tuple] = []
        self.sec_rows: list[tuple] = []
        self.where: dict[int, str] = {}  # article id -> position (only for on_duplicate='error')
        self.df_sample: Counter[str] = Counter()
        self.sampled = 0
        self.t0 = time.perf_counter()
        # bounds memory to ~3 batches in flight (2 with shards, whose own inboxes hold one more each)
        self._queue: queue.Queue = queue.Queue(maxsize=2 if workers < 2 else 1)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kb-import-writer", daemon=True)
        self._thread.start()

    def add(self, canon: str, raw: str, title: str, sections: list[tuple[str, str]], images: list[str],
            meta: dict, where: str = "") -> None:
        aid = self.next_article
        self.next_article += 1
        first = self.next_section
        self.next_section += len(sections)
        self.art_rows.append((aid, canon, raw, title, first, len(sections),
                              _to_json(images), _to_json(meta)))
        self.sec_rows.extend((first + i, aid, i, t, x) for i, (t, x) in enumerate(sections))
        if self.sampled < self.SAMPLE_CAP:
            for i, (t, x) in enumerate(sections):
                if (first + i) % self.SAMPLE_EVERY == 0:
                    self.sampled += 1
                    self.df_sample.update(set(TOKEN_RE.findall(f"{t} {x}".lower())))
        if self.on_duplicate == "error":
            self.where[aid] = where
        if len(self.art_rows) >= self.batch_size:
            self._hand_off()

    def _hand_off(self) -> None:
        if self._error is not None:
            raise self._error
        if self.art_rows:
            self._queue.put((self.art_rows, self.sec_rows, self.where))
            self.art_rows, self.sec_rows, self.where = [], [], {}

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is None:
                try:
                    self._write(*item)
                except BaseException as e:  # surfaced in the parsing thread at the next hand-off
                    self._error = e

    def _write(self, art_rows: list[tuple], sec_rows: list[tuple], where: dict[int, str]) -> None:
        db = self.db
        before = db.total_changes
        db.executemany("INSERT OR IGNORE INTO articles VALUES (?,?,?,?,?,?,?,?)", art_rows)
        inserted = db.total_changes - before
        if inserted < len(art_rows):  # duplicates: find which ids were ignored, drop their sections
            lo, hi = art_rows[0][0], art_rows[-1][0]
            kept = {r[0] for r in db.execute("SELECT id FROM articles WHERE id BETWEEN ? AND ?", (lo, hi))}
            dropped = [r for r in art_rows if r[0] not in kept]
            if self.on_duplicate == "error":
                r = dropped[0]
                first = db.execute("SELECT raw_url FROM articles WHERE url=?", (r[1],)).fetchone()
                raise KBFormatError(f"{self.stats.source}: {where.get(r[0], 'article')}: duplicate url "
                                    f"{r[1]!r} (first seen as {first[0]!r}); on_duplicate='error'")
            self.stats.duplicates += len(dropped)
            room = 10 - len(self.stats.duplicate_examples)
            self.stats.duplicate_examples.extend(r[1] for r in dropped[:max(room, 0)])
            sec_rows = [s for s in sec_rows if s[1] in kept]
        db.executemany("INSERT INTO sections VALUES (?,?,?,?,?)", sec_rows)
        if self.shards:  # the shard tokenises while this thread inserts the next batch
            shard = self.shards[self._next_shard % len(self.shards)]
            self._next_shard += 1
            shard.send([(s[0], s[3], s[4]) for s in sec_rows])
        else:
            db.executemany("INSERT INTO fts(rowid, title, text) VALUES (?,?,?)", ((s[0], s[3], s[4]) for s in sec_rows))
        self.stats.articles += inserted
        self.stats.sections += len(sec_rows)

    def _stop(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def finish(self, source: str, source_stat: os.stat_result | None) -> ImportStats:
        self._hand_off()
        self._stop()
        if self._error is not None:
            raise self._error
        db = self.db
        if self.shards:
            for sh in self.shards:
                sh.close_input()
            reports = [sh.wait() for sh in self.shards]  # each shard merges its own segments meanwhile
            t_load = time.perf_counter()
            if self.progress:
                self.progress("index", 0, 1)
            db.execute("COMMIT")
            db.close()  # FTS5 caches the index structure per connection: merge on a fresh one
            self.db = db = sqlite3.connect(self.tmp, isolation_level=None, check_same_thread=False)
            for pragma in ("journal_mode=OFF", "synchronous=OFF", "locking_mode=EXCLUSIVE", "cache_size=-131072",
                           "temp_store=MEMORY"):
                db.execute(f"PRAGMA {pragma}")
            try:
                _merge_shards(db, [sh.path for sh in self.shards])
            except _FormatUnknown:
                # an FTS5 record layout this code does not know (a future SQLite): index the stored
                # sections here instead, as a one-process import would (same index, slower)
                db.execute("INSERT INTO fts(fts) VALUES('rebuild')")
                db.execute("INSERT INTO fts(fts) VALUES('optimize')")
            db.execute("BEGIN")
            for sh in self.shards:
                sh.remove()
            self.stats.workers = len(self.shards)
            self.stats.shard_peak_rss_mb = [round(r.get("peak_rss_mb", 0.0), 1) for r in reports]
        else:
            t_load = time.perf_counter()
            if self.progress:
                self.progress("index", 0, 1)
        if not self.shards:
            # one process: merge the flushed segments into one. Shards merged their own in parallel;
            # their K segments stay as they are (a query reads K b-trees instead of one: the same
            # hits and scores, and merging them here would be one more pass on one core)
            db.execute("INSERT INTO fts(fts) VALUES('optimize')")
        db.execute("INSERT INTO fts(fts, rank) VALUES('rank', 'bm25(2.0, 1.0)')")  # title hits weigh double
        st = self.stats
        info = {"format": FORMAT_NAME, "version": str(FORMAT_VERSION), "articles": str(st.articles),
                "sections": str(st.sections), "duplicates": str(st.duplicates), "source": source,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "import_options": json.dumps(self.record, sort_keys=True)}
        if source_stat is not None:
            info["source_size"] = str(source_stat.st_size)
            info["source_mtime_ns"] = str(source_stat.st_mtime_ns)
        db.executemany("INSERT INTO kb_info VALUES (?,?)", list(info.items()))
        if self.sampled:
            scale = st.sections / self.sampled
            floor = max(3, int(0.0005 * self.sampled))
            db.executemany("INSERT INTO term_df VALUES (?,?)",
                           ((t, round(c * scale)) for t, c in self.df_sample.items() if c >= floor))
        db.execute("COMMIT")
        db.execute("ANALYZE")
        # Rollback journal (not WAL) for the finished file: readers never write, and a WAL database
        # opened read-only leaves -wal/-shm files behind and fails in read-only directories.
        db.execute("PRAGMA journal_mode=DELETE")
        t_end = time.perf_counter()
        st.load_seconds = round(t_load - self.t0, 3)
        st.index_seconds = round(t_end - t_load, 3)
        st.seconds = round(t_end - self.t0, 3)
        st.articles_per_s = round(st.articles / st.seconds, 1) if st.seconds > 0 else 0.0
        db.execute("INSERT OR REPLACE INTO kb_info VALUES ('import_seconds', ?)", (str(st.seconds),))
        db.close()
        os.replace(self.tmp, self.out)
        if self.progress:
            self.progress("index", 1, 1)
        return st

    def abort(self) -> None:
        try:
            for sh in self.shards:  # first, so a writer thread blocked on a shard's pipe gets an error
                sh.kill()
            while True:  # unblock the writer thread if it waits on a full queue
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
            self._stop()
            self.db.close()
        finally:
            for sh in self.shards:
                sh.remove()
            if self.tmp.exists():
                self.tmp.unlink()


def _config(config: ImportConfig | None, settings: Mapping[str, Any]) -> ImportConfig:
    """`config` as given, or the library caller's keyword `settings` validated into one."""
    if config is not None and settings:
        raise TypeError(f"pass ImportConfig or its settings, not both ({', '.join(settings)})")
    return config if config is not None else ImportConfig(**settings)


def _prepare_out(out: str | os.PathLike, overwrite: bool) -> Path:
    out = Path(out)
    if out.exists():
        if not overwrite:
            raise FileExistsError(f"{out}: already exists (pass overwrite=True / --force to replace it)")
        if out.is_dir():
            raise IsADirectoryError(f"{out}: is a directory, expected a .sqlite file path")
    out.parent.mkdir(parents=True, exist_ok=True)
    return out


PARALLEL_MIN_BYTES = 32 << 20  # smaller sources import faster in one process than spawning shards


def auto_workers(source_bytes: int) -> int:
    """FTS indexing processes for a source of this size: one per core (at most 4) from 32 MiB up."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(cores, 4)) if source_bytes >= PARALLEL_MIN_BYTES else 1


def default_batch_size(workers: int) -> int:
    """Articles per insert batch. With shard processes a batch is also what one shard indexes at a
    time, and the batches in flight are most of every process's memory. Measured 2026-12-01 with 2
    shards (articles/s, peak MB over all processes): 100k articles 1,683/s 533 MB with 2,000, 1,786/s
    423 MB with 1,000, 1,866/s 364 MB with 500; 1M articles 1,771/s 562 MB, 1,684/s 437 MB, 1,482/s
    370 MB. 1,000 stays under 500 MB at every size. One process writes faster in larger batches."""
    return 1000 if workers >= 2 else 2000


def import_wiki_json(path: str | os.PathLike, out: str | os.PathLike, config: ImportConfig | None = None, *,
                     progress: bool | ProgressFn = False, overwrite: bool = False,
                     record: Mapping[str, Any] | None = None, **settings: Any) -> ImportStats:
    """Stream-import a wiki JSON/JSONL file into a new KB database at `out`, as `config` says (or,
    for a library caller, `settings`: batch_size, on_duplicate, workers, validated into one).

    Duplicate canonical urls keep the first article (counted in `ImportStats.duplicates`) unless
    `on_duplicate='error'`. `progress=True` draws a rich progress bar (bytes read, then indexing);
    a callable gets (phase, done, total). The database is written to `out.partial` and renamed at
    the end, so a failed import never leaves a half-built KB at `out`.

    `workers`: FTS indexing processes (None: `auto_workers` of the file size; 1: all in this process).
    Any number of workers gives a KB whose searches return exactly what a one-process import's do.
    `batch_size`: articles per insert batch (None: `default_batch_size` for the number of workers).
    kb_info's `import_options` records `record` (the job's options as used; default: the config),
    with the batch size and workers the import resolved.
    """
    config = _config(config, settings)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such wiki file")
    out = _prepare_out(out, overwrite)
    kind = _sniff(path)
    total = path.stat().st_size
    bar = _ImportProgress(total) if progress is True else None
    progress_fn: ProgressFn | None = bar.update if bar else (progress or None)  # type: ignore[assignment]
    n_workers = auto_workers(total) if config.workers is None else config.workers
    raw, f = _open_raw(path)
    try:
        writer = _Writer(out, config, progress_fn, n_workers, record)
    except BaseException:
        f.close()
        raw.close()
        if bar:
            bar.close()
        raise
    writer.stats.source = str(path)
    try:
        reader = {"mapping": _iter_mapping, "jsonl": _iter_jsonl, "array": _iter_array}[kind](path, f)
        n = 0
        for where, key, value in reader:
            canon, rawurl, title, sections, images, meta = _to_row(str(path), where, key, value)
            writer.add(canon, rawurl, title, sections, images, meta, where)
            n += 1
            if progress_fn and n % writer.batch_size == 0:
                progress_fn("load", raw.tell(), total)
        if progress_fn:
            progress_fn("load", total, total)
        stats = writer.finish(str(path.resolve()), path.stat())
    except BaseException:
        writer.abort()
        raise
    finally:
        f.close()
        raw.close()
        if bar:
            bar.close()
    return stats


def build_kb(articles: Iterable[Article], out: str | os.PathLike, config: ImportConfig | None = None, *,
             overwrite: bool = False, **settings: Any) -> ImportStats:
    """Write Article objects into a new KB database (tests, demos, converters); `config` (or
    `settings`) as in `import_wiki_json`, except that workers None means 1 (in this process: there
    is no file size to size the shards by)."""
    config = _config(config, settings)
    out = _prepare_out(out, overwrite)
    writer = _Writer(out, config, None, config.workers or 1)
    writer.stats.source = "<articles>"
    try:
        for n, a in enumerate(articles):
            if not isinstance(a, Article):
                raise TypeError(f"build_kb: item {n} is {type(a).__name__}, expected kbvqa Article")
            secs = sorted(a.sections, key=lambda s: s.index)
            if [s.index for s in secs] != list(range(len(secs))):
                raise KBFormatError(f"build_kb: item {n} ({a.url!r}): section indices must be 0..{len(secs) - 1}, "
                                    f"got {[s.index for s in a.sections]}")
            writer.add(canonical_url(a.url), a.url, a.title or url_to_title(a.url),
                       [(s.title, s.text) for s in secs], list(a.image_urls), dict(a.meta), f"item {n} ({a.url!r})")
        return writer.finish("<articles>", None)
    except BaseException:
        writer.abort()
        raise


class _ImportProgress:
    """Two phases on the one progress bar: megabytes parsed (and indexed as they go), then the FTS merge."""

    def __init__(self, total: int):
        from kbvqa.progress import ProgressBar

        self.total = total
        self.bar = ProgressBar(total, "parse, load, index", True)
        self.merging = False

    def update(self, phase: str, done: int, total: int) -> None:
        if phase == "load":
            self.bar.update(completed=done, note=f"{done / 1e6:,.1f}/{self.total / 1e6:,.1f} MB")
        elif not self.merging:
            self.merging = True
            self.bar.update(completed=self.total, description="merge FTS index", note="")
        elif done >= total:
            self.bar.update(completed=self.total)

    def close(self) -> None:
        self.bar.close()
