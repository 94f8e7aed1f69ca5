"""`kbvqa kb` commands: import a wiki JSON into the SQLite/FTS5 store, search it, show an article, stats."""

from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Iterator, Optional

import typer

from kbvqa.cli.common import emit_json, fail, print_result
from kbvqa.cli.options import flags, option
from kbvqa.pipelines.kb_import import KBImportOptions as O


app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)


_fail = partial(fail, code=1)  # data and kb errors exit 1 (their documented code)


def _open(path: Path):
    from kbvqa.kb.store import KBError, open_kb
    try:
        return open_kb(path)
    except (FileNotFoundError, KBError, ValueError, sqlite3.DatabaseError, OSError) as e:
        _fail(str(e))


@contextmanager
def _reading(path: Path) -> Iterator[Any]:
    """The KB at `path`, open for one command: a KB damaged where the command reads it (a page of its
    FTS index overwritten) ends in the store's one line naming the file and how to rebuild it."""
    from kbvqa.kb.store import KBError

    store = _open(path)
    try:
        with store:
            yield store
    except KBError as e:
        _fail(str(e))


@app.command("import")
def import_cmd(
    wiki: Path = typer.Argument(..., help="E-VQA/EchoSight wiki JSON (url -> article), JSONL, or .gz of either."),
    out: Path = typer.Option(..., "--out", "-o", help="KB file to write (.sqlite)."),
    config: Optional[Path] = option(O, "config", exists=True, dir_okay=False,
                                    help="kbvqa.toml whose [kb.import] table holds these settings (flags win)."),
    batch_size: Optional[int] = option(O, "batch_size", min=1,
                                       help="Articles per insert batch (default: 1000 when the index is "
                                            "built in shard processes, 2000 in one process)."),
    workers: Optional[int] = option(O, "workers", min=1,
                                    help="FTS indexing processes (default: one per core, at most 4, for files "
                                         "from 32 MiB; 1 below). Every number gives the same search results."),
    force: Optional[bool] = option(O, "force", "--force", help="Replace OUT if it exists."),
    on_duplicate: Optional[str] = option(O, "on_duplicate", help="keep_first (count and report) or error."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Stream-import a wiki file into a SQLite KB with an FTS5 index over sections. Every setting is
    one KBImportOptions; the KB's kb_info records it as used (`import_options`)."""
    from kbvqa.pipelines.kb_import import import_kb, kb_import_options
    try:
        st = import_kb(kb_import_options(**flags(O, locals())), progress=progress)
    except (FileNotFoundError, FileExistsError, IsADirectoryError, ValueError, sqlite3.DatabaseError,
            OSError) as e:  # ValueError: OptionsError and KBFormatError too
        _fail(str(e))
    typer.echo(f"imported {st.articles} articles, {st.sections} sections into {out} in {st.seconds:.1f} s "
               f"({st.articles_per_s:,.0f} articles/s)")
    if st.duplicates:
        typer.echo(f"skipped {st.duplicates} duplicate urls (first kept), e.g. {', '.join(st.duplicate_examples[:3])}")


@app.command("search")
def search_cmd(
    kb: Path = typer.Argument(..., help="KB file (.sqlite) or wiki JSON (imported to a cache on first use)."),
    query: str = typer.Argument(..., help="Free text; any punctuation is safe."),
    k: int = typer.Option(10, "--k", "-k", min=1, help="Number of sections to return."),
    in_url: Optional[str] = typer.Option(None, "--in", help="Rank only the sections of this article."),
    as_json: bool = typer.Option(False, "--json", help="One JSON list on stdout."),
) -> None:
    """BM25 search over KB sections."""
    with _reading(kb) as store:
        try:
            hits = store.search_in(in_url, query, k) if in_url else store.search(query, k)
        except KeyError as e:
            _fail(str(e.args[0]))
    if as_json:
        emit_json([h.__dict__ for h in hits])
        return
    if not hits:
        typer.echo("no matches")
        return
    from kbvqa.report.summaries import kb_hits_table

    print_result(kb_hits_table([h.__dict__ for h in hits]))


@app.command("show")
def show_cmd(
    kb: Path = typer.Argument(..., help="KB file or wiki JSON."),
    url: str = typer.Argument(..., help="Article url (any spelling: http/https, encoded or not)."),
    as_json: bool = typer.Option(False, "--json", help="The article as JSON."),
) -> None:
    """Print one article."""
    with _reading(kb) as store:
        a = store.get(url)
    if a is None:
        _fail(f"{url!r} is not in {kb}")
    if as_json:
        emit_json(a.model_dump(mode="json"))
        return
    typer.echo(f"{a.title}\n{a.url}\n{len(a.sections)} sections, {len(a.image_urls)} images")
    for s in a.sections:
        text = s.text if len(s.text) <= 300 else s.text[:297] + "..."
        typer.echo(f"\n[{s.index}] {s.title}\n{text}")


@app.command("stats")
def stats_cmd(
    kb: Path = typer.Argument(..., help="KB file or wiki JSON."),
    lengths: bool = typer.Option(False, "--lengths", help="Also read every section: tokens per section and per "
                                 "article (mean, median, p95, max; the paper's §4.1 section lengths)."),
    tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", help="Count with the Hugging Face tokenizer "
                                             "saved in this folder (default: whitespace tokens)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="With --lengths: the first N articles only."),
    as_json: bool = typer.Option(False, "--json", help="As JSON."),
) -> None:
    """Counts and provenance of a KB (read from its import record); with --lengths, section and
    article lengths in tokens, the tokenisation named."""
    with _reading(kb) as store:
        st = store.stats()
        if lengths:
            from kbvqa.kb.stats import length_stats

            try:
                st["lengths"] = length_stats(store, tokenizer=tokenizer, limit=limit)
            except ValueError as e:
                _fail(str(e))
    if as_json:
        emit_json(st)
        return
    from kbvqa.kb.stats import length_rows
    from kbvqa.report.summaries import kb_stats_table

    rows = {k: v for k, v in st.items() if k != "lengths"}
    rows.update(length_rows(st["lengths"]) if "lengths" in st else {})
    print_result(kb_stats_table(rows, title=str(kb)))
