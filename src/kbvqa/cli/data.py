"""`kbvqa data` commands: convert between benchmark formats; dataset statistics."""

from __future__ import annotations

import itertools
from functools import partial
from pathlib import Path
from typing import Optional

import typer

from kbvqa.cli.common import emit_json, fail, print_result
from kbvqa.data.errors import DataError, SkipReport
from kbvqa.data.formats import FORMATS, detect_format, read_samples, write_samples
from kbvqa.data.generic import parse_mapping
from kbvqa.data.stats import dataset_stats


app = typer.Typer(no_args_is_help=True)
_FORMATS = ", ".join(sorted(FORMATS))
_SHOW_SKIPPED = 50


_fail = partial(fail, code=1)  # data and kb errors exit 1 (their documented code)


def _mapping(text: Optional[str]) -> Optional[dict[str, str]]:
    try:
        return parse_mapping(text)
    except ValueError as e:
        _fail(f"--mapping: {e}")
        return None


def _report_skipped(report: SkipReport) -> None:
    for kind, n in report.warnings.items():
        typer.echo(f"warning: {n} {kind.replace('_', ' ')} (e.g. {'; '.join(report.examples[kind])})", err=True)
    if not report.count:
        return
    typer.echo(f"skipped {report.count} invalid row(s):")
    for row, reason in report.skipped[:_SHOW_SKIPPED]:
        typer.echo(f"  row {row}: {reason}")
    if report.count > _SHOW_SKIPPED:
        typer.echo(f"  ... and {report.count - _SHOW_SKIPPED} more")


@app.command("convert")
def convert(
    src: Path = typer.Argument(..., help="Input file."),
    dst: Path = typer.Argument(..., help="Output file."),
    from_fmt: Optional[str] = typer.Option(None, "--from", help=f"Input format ({_FORMATS}); detected when omitted."),
    to_fmt: Optional[str] = typer.Option(None, "--to", help=f"Output format ({_FORMATS}); detected from the extension."),
    qtypes: Optional[Path] = typer.Option(None, "--qtypes", help="InfoSeek question-type JSONL for the input."),
    qtypes_out: Optional[Path] = typer.Option(None, "--qtypes-out", help="Also write an InfoSeek question-type JSONL."),
    mapping: Optional[str] = typer.Option(None, "--mapping", help="Generic formats: field=column,... (e.g. id=qid,question=q)."),
    sep: str = typer.Option("|", "--sep", help="Generic formats: separator for answers/images given as strings."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Skip (and list) invalid rows instead of stopping."),
    limit: Optional[int] = typer.Option(None, "--limit", min=0, help="Convert at most N samples."),
    allow_empty: bool = typer.Option(False, "--allow-empty", help="Write an empty file for an input with no samples "
                                                                  "(otherwise an error)."),
) -> None:
    """Convert a benchmark file between formats (lossless for same-format round trips)."""
    m = _mapping(mapping)
    report = SkipReport()
    try:
        fin = from_fmt or detect_format(src)
        fout = to_fmt or _out_format(dst, fin, generic=m is not None)
        for name in (fin, fout):
            if name not in FORMATS:
                _fail(f"unknown format {name!r}; known: {_FORMATS}")
        if m is not None and not {fin, fout} & {"jsonl", "csv", "parquet"}:
            _fail("--mapping only applies to the generic jsonl/csv/parquet formats")
        read_opts = {"sep": sep} if fin in ("jsonl", "csv", "parquet") else {}
        samples = read_samples(src, fin, qtypes=qtypes, mapping=m if fin in ("jsonl", "csv", "parquet") else None,
                               skip_invalid=skip_invalid, report=report, **read_opts)
        if limit is not None:
            samples = itertools.islice(samples, limit)
        if qtypes_out is not None and fout != "infoseek":
            _fail("--qtypes-out only applies when writing the infoseek format")
        write_opts: dict = {"qtypes_out": qtypes_out} if fout == "infoseek" else {}
        if fout in ("jsonl", "csv", "parquet"):
            write_opts.update(mapping=m, sep=sep)
        samples = _non_empty(samples, src, allow_empty)
        n = write_samples(samples, dst, fout, **write_opts)
    except (DataError, ValueError) as e:
        _fail(str(e))
        return
    typer.echo(f"wrote {n} sample(s) {fin} -> {fout}: {dst}")
    _report_skipped(report)


def _non_empty(samples, src: Path, allow_empty: bool):
    """The samples, or a DataError when there are none and the user did not say that is fine."""
    first = next(iter(samples), None)
    if first is None:
        if not allow_empty:
            raise DataError("no samples in the input (an empty file?); pass --allow-empty if that is intended",
                            file=src)
        return iter(())
    return itertools.chain([first], samples)


def _out_format(dst: Path, fin: str, generic: bool = False) -> str:
    """The output format implied by the extension: same family as the input, or generic with --mapping."""
    suffix = dst.suffix.lower()
    if suffix == ".parquet":
        return "parquet"
    if generic and suffix in (".jsonl", ".json", ".csv"):
        return "csv" if suffix == ".csv" else "jsonl"
    if suffix in (".jsonl", ".json"):
        return fin if fin in ("infoseek", "jsonl") else "kbvqa"
    if suffix == ".csv":
        return fin if fin in ("evqa", "ara", "csv") else "evqa"
    raise ValueError(f"cannot tell the output format from {dst.name!r}; pass --to")


@app.command("stats")
def stats(
    path: Path = typer.Argument(..., help="Benchmark file."),
    from_fmt: Optional[str] = typer.Option(None, "--from", help=f"Format ({_FORMATS}); detected when omitted."),
    qtypes: Optional[Path] = typer.Option(None, "--qtypes", help="InfoSeek question-type JSONL."),
    mapping: Optional[str] = typer.Option(None, "--mapping", help="Generic formats: field=column,..."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Skip (and count) invalid rows."),
) -> None:
    """Counts by type/split/dataset, answer lengths, multi-part/numeric answers, missing fields."""
    report = SkipReport()
    try:
        fmt = from_fmt or detect_format(path)
        m = _mapping(mapping) if fmt in ("jsonl", "csv", "parquet") else None
        result = dataset_stats(read_samples(path, fmt, qtypes=qtypes, mapping=m, skip_invalid=skip_invalid,
                                            report=report))
    except (DataError, ValueError) as e:
        _fail(str(e))
        return
    result["skipped"] = report.count
    result["warnings"] = dict(report.warnings)  # duplicate ids, samples without answers: counted, not silent
    if as_json:
        emit_json(result)
        return
    from kbvqa.report.summaries import dataset_stats_table

    print_result(dataset_stats_table(result, title=path.name))
    _report_skipped(report)
