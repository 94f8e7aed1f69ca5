"""Output helpers every command shares, so errors, JSON and tables look the same across jobs."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterable, NoReturn, Sequence, TypeVar

import typer

if TYPE_CHECKING:
    from kbvqa.report.tables import ResultTable


T = TypeVar("T")

#: Exit codes of every per-record job (documented in docs/reference.md, "Exit codes"):
EXIT_OK = 0  # every record ok (or already done)
EXIT_USAGE = 2  # bad flags, config or input: nothing ran (`fail`)
EXIT_ALL_FAILED = 3  # the job ran and not one record ended ok
EXIT_SOME_FAILED = 4  # some records ended error/invalid, and --fail-on-error was given

def _fail_on_error() -> bool:
    """`kbvqa --fail-on-error`, read from the root command's parameters (no process-wide state)."""
    try:
        from typer._click.globals import get_current_context  # this typer carries its own click
    except ImportError:  # pragma: no cover - a typer on the public click package
        from click import get_current_context

    ctx = get_current_context(silent=True)
    return bool(ctx is not None and ctx.find_root().params.get("fail_on_error"))


def top_reasons(reasons: Iterable[str] | dict[str, int], n: int = 3) -> list[tuple[str, int]]:
    """The `n` most common failure reasons, alike ones grouped: quoted names, paths and numbers are
    masked for the grouping (so 33 "missing image 'a.jpg'" lines are one reason), and each group is
    shown by its first reason as written."""
    import re
    from collections import Counter

    counts: Counter[str] = Counter()
    example: dict[str, str] = {}
    items = reasons.items() if isinstance(reasons, dict) else ((r, 1) for r in reasons)
    for reason, k in items:
        text = " ".join(str(reason or "no reason recorded").split())
        key = re.sub(r"\d+", "N", re.sub(r"'[^']*'|\"[^\"]*\"|(?:[\w.~-]*/)+[\w.~-]*", "…", text))
        counts[key] += k
        example.setdefault(key, text)
    return [(example[key][:320], k) for key, k in counts.most_common(n)]  # room for a path and its fix


def journal_reasons(journal: Any) -> list[str]:
    """The reasons of a runner journal's records that did not end ok (for `end_job`)."""
    from pathlib import Path

    from kbvqa.runner import read_results

    if journal is None or not Path(journal).is_file():
        return []
    return [str(r.get("reason", "")) for r in read_results(Path(journal)) if r.get("status") != "ok"]


def end_job(ok: int, failed: dict[str, int], *, skipped: int = 0, what: str = "record(s)",
            needs_model: int = 0, reasons: Iterable[str] | dict[str, int] | None = None,
            hint: str = "see their `reason`; `kbvqa journal status OUT` counts them; --resume re-runs them") -> None:
    """Finish a per-record job by the exit-code convention: counts of what did not end ok go to
    stderr with the most common `reasons`; not one record ok → EXIT_ALL_FAILED (scripts and CI
    notice a job that produced nothing); some error/invalid → EXIT_SOME_FAILED under
    --fail-on-error, else 0.

    `needs_model` records (a stage that cannot decide without a model, run offline) are counted
    apart from error and invalid: they are not failures, so they never make --fail-on-error exit 4,
    but they are not ok either, so a run where every record needs a model still exits 3 (it
    produced nothing); a line says how to continue."""
    bad = {k: v for k, v in failed.items() if v}
    shown = {**bad, **({"needs_model": needs_model} if needs_model else {})}
    if shown:
        typer.echo(f"{sum(shown.values())} {what} did not end ok: " + ", ".join(f"{k} {v}" for k, v in shown.items())
                   + f" ({hint})", err=True)
    common = top_reasons(reasons or []) if bad else []
    if common:
        typer.echo("most common reasons:", err=True)
        for text, k in common:
            typer.echo(f"  {k} x {text}", err=True)
    if needs_model:
        typer.echo(f"{needs_model} {what} need a model (needs_model is not a failure): configure the stage's role "
                   "(--llm URL --model NAME, or --config) and run again with --resume", err=True)
    if shown and ok == 0 and skipped == 0:
        raise typer.Exit(code=EXIT_ALL_FAILED)
    if bad and _fail_on_error():
        raise typer.Exit(code=EXIT_SOME_FAILED)


def journal_outcome(journal: Any, ids: Iterable[str] | None = None) -> tuple[int, dict[str, int], int, list[str]]:
    """What a runner journal holds (its last line per id; only `ids` when given): records ok, the
    failures by status, records needing a model, and the failures' reasons — the whole output, so a
    resumed run that re-sent only its failed records is judged by everything it now holds."""
    from collections import Counter
    from pathlib import Path

    from kbvqa.runner import read_results

    counts: Counter[str] = Counter()
    reasons: list[str] = []
    wanted = None if ids is None else set(ids)
    if journal is not None and Path(journal).is_file():
        for r in read_results(Path(journal)):
            if wanted is not None and r.get("id") not in wanted:
                continue
            status = str(r.get("status") or "error")
            counts[status] += 1
            if status not in ("ok", "needs_model"):
                reasons.append(str(r.get("reason", "")))
    ok, needs_model = counts.pop("ok", 0), counts.pop("needs_model", 0)
    failed = {"error": counts.pop("error", 0), "invalid": counts.pop("invalid", 0), **counts}
    return ok, failed, needs_model, reasons


def end_journal_job(journal: Any, *, what: str = "record(s)", ids: Iterable[str] | None = None) -> None:
    """`end_job` for a job whose counts are its journal's (`journal_outcome`): the judges and the
    studies that call one (`score judge`, `score ivr12`, `study agent-failures`)."""
    ok, failed, needs_model, reasons = journal_outcome(journal, ids)
    end_job(ok, failed, what=what, needs_model=needs_model, reasons=reasons)


# The model-call limits every command that calls a model offers (kbvqa.models.config.RoleConfig; a command
# takes them as one group, kbvqa.cli.flag_groups.ModelLimits); None keeps what the role's config says
# (defaults: connect 10 s, read 60 s, no deadline, auto, 4 retries).
TIMEOUT = typer.Option(None, "--timeout", min=0.1, help="Read timeout of one model request, seconds.")
CONNECT_TIMEOUT = typer.Option(None, "--connect-timeout", min=0.1, help="Connect timeout, seconds.")
DEADLINE = typer.Option(None, "--deadline", min=0.1, help="Cap on one model call with all its retries, seconds.")
STRUCTURED_OUTPUT = typer.Option(None, "--structured-output",
                                 help="auto (JSON schema, falling back when the server refuses it) | json_schema | "
                                      "json_object | off.")
MAX_RETRIES = typer.Option(None, "--max-retries", min=0, help="Retries of a model request (429/5xx/timeouts).")


def include_dropped_option(
    ctx: typer.Context,
    include_dropped: bool = typer.Option(False, "--include-dropped",
                                         help="Read an audited file's dropped rows as references (refused by "
                                              "default: score the fixed split, `kbvqa audit split`)."),
) -> None:
    """Group callback of `kbvqa score` / `kbvqa study`: `kbvqa score --include-dropped infoseek ...` lets the
    reference loaders accept `drop` rows for this command only (kbvqa.evaluate.io.including_dropped)."""
    if include_dropped:
        from kbvqa.evaluate.io import including_dropped

        ctx.with_resource(including_dropped())


def job_errors() -> tuple[type[BaseException], ...]:
    """What a retrieval or answer job reports as one `error:` line (bad input, files, config, options)."""
    from kbvqa.data.errors import DataError
    from kbvqa.kb.store import KBError

    return (FileNotFoundError, ValueError, ImportError, OSError, KeyError, DataError, KBError)


def fail(exc: BaseException | str, code: int = 2) -> NoReturn:
    """One line on stderr (secrets redacted), no traceback, non-zero exit. An executor failure
    (kbvqa.runner.executor.ExecutorError) exits with its own code (5: workers lost, --resume finishes);
    a write failure (a full disk, a read-only folder) exits 1 with the line naming the path."""
    from kbvqa.data.redact import redact

    executor = sys.modules.get("kbvqa.runner.executor")
    if executor is not None and isinstance(exc, executor.ExecutorError):
        code = exc.exit_code
    if isinstance(exc, BaseException):  # a full disk or a read-only folder: exit 1, naming the path
        from kbvqa.runner.write_errors import EXIT_WRITE_FAILED, write_failure

        line = write_failure(exc)
        if line is not None:
            exc, code = line, EXIT_WRITE_FAILED
    typer.echo(f"error: {redact(str(exc))}", err=True)
    raise typer.Exit(code=code)


def run_or_fail(run: Callable[[], T], errors: tuple[type[BaseException], ...]) -> T:
    """`run()`; what it raises of `errors` (bad input, config, files) ends the command by `fail`."""
    try:
        return run()
    except errors as exc:
        fail(exc)


def emit_json(obj: Any) -> None:
    """Exactly one JSON document on stdout (machine-readable output never mixes with tables)."""
    sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _min_width(header: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    """The narrowest a rich table can be without cutting a word of a header or a cell."""
    def widest_word(text: str) -> int:
        return max((len(w) for w in str(text).split()), default=0)

    cols = [max([widest_word(h)] + [widest_word(r[i]) for r in rows if i < len(r)])
            for i, h in enumerate(header)]
    return sum(cols) + 3 * len(cols) + 1


def table_renderable(title: str, header: Sequence[str], rows: Iterable[Sequence[Any]], width: int) -> Any:
    """The rich table for a terminal `width` columns wide: a table too wide for it (at a word per line)
    with few rows is shown transposed (its first column's cells become the headers), and whatever is
    still too long folds onto the next line — a header or a cell is never cut to "…"."""
    from rich.markup import escape
    from rich.table import Table

    cells = [[f"{v:.2f}" if isinstance(v, float) else str(v) for v in r] for r in rows]
    header = [str(h) for h in header]
    if cells and len(cells) <= 8 and len(header) > 2 and _min_width(header, cells) > width:
        turned = [[header[0], *[r[0] for r in cells]]]
        turned += [[h, *[r[i] if i < len(r) else "" for r in cells]] for i, h in enumerate(header) if i]
        if _min_width(turned[0], turned[1:]) < _min_width(header, cells):
            header, cells = turned[0], turned[1:]
    t = Table(title=escape(title))
    for h, w in zip(header, _fitted_widths(header, cells, width)):
        t.add_column(escape(h), overflow="fold", width=w)
    for r in cells:
        t.add_row(*[escape(c) for c in r])
    return t


def _fitted_widths(header: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> list[int | None]:
    """Column widths for a table wider than the terminal whose words still fit: each column gets its
    longest word and a share of what is left, in proportion to how much more it would use (rich's own
    narrowing evens out the widest columns and so breaks long words). None: rich's choice is fine."""
    def longest(text: str, words: bool) -> int:
        parts = str(text).split() if words else str(text).splitlines()
        return max((len(p) for p in parts), default=0)

    n = len(header)
    room = width - (3 * n + 1)  # borders and padding
    cols = [[h, *(r[i] for r in rows if i < len(r))] for i, h in enumerate(header)]
    natural = [max(longest(c, False) for c in col) for col in cols]
    least = [max(1, max(longest(c, True) for c in col)) for col in cols]
    if sum(natural) <= room or sum(least) > room:
        return [None] * n
    spare, want = room - sum(least), [a - b for a, b in zip(natural, least)]
    return [b + (spare * w // sum(want) if sum(want) else 0) for b, w in zip(least, want)]


def print_table(title: str, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """A rich table that fits the terminal (`table_renderable`); floats shown with 2 decimals, every
    cell escaped (values may contain [brackets])."""
    from rich.console import Console

    console = Console()
    console.print(table_renderable(title, header, rows, console.width))


def emit_result(result: Any, as_json: bool, tables: Callable[[Any], Any]) -> None:
    """What a command shows of `result`: with --json one JSON document (`emit_json`), else the report
    table or tables `tables(result)` makes, each by `print_result` (built only when shown)."""
    if as_json:
        emit_json(result)
        return
    made = tables(result)
    for table in made if isinstance(made, (list, tuple)) else [made]:
        print_result(table)


def print_result(table: "ResultTable") -> None:
    """A report table (kbvqa.report.tables.ResultTable) by `print_table`, its cells formatted the
    table's way, then its notes one per line, each wrapped at 80 columns between words."""
    from kbvqa.report.tables import wrap_text

    print_table(table.caption, table.columns, [[table.fmt(v) for v in r] for r in table.rows])
    for note in table.notes:
        if note:
            typer.echo(wrap_text(note))
