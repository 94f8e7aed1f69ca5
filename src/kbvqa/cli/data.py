"""`kbvqa data` commands: convert between benchmark formats; dataset statistics."""

from __future__ import annotations

import itertools
from functools import partial
from pathlib import Path
from typing import Optional

import typer

from kbvqa.cli.common import emit_json, fail, print_result
from kbvqa.data.errors import DataError, SkipReport
from kbvqa.data.formats import FORMATS, detect_format, non_empty, read_samples, write_samples
from kbvqa.data.generic import GENERIC_FORMATS, TABLE_SOURCES, parse_mapping
from kbvqa.data.stats import dataset_stats


app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)
_FORMATS = ", ".join(sorted(FORMATS))
_SHOW_SKIPPED = 50


_fail = partial(fail, code=1)  # data and kb errors exit 1 (their documented code)


def _mapping(text: Optional[str]) -> Optional[dict[str, str]]:
    try:
        return parse_mapping(text)
    except ValueError as e:
        _fail(f"--mapping: {e}")
        return None


def _table_opts(fmt: str, *, sep: str = "|", split: Optional[str] = None, images_for: Optional[Path] = None) -> dict:
    """Reader options for a table format. A Hugging Face export's embedded images are written next to
    the output `images_for` (OUT.images/, referenced relative to OUT's folder, so they move together);
    a command with no output (stats, compare) never looks at pixels and leaves them out, counted."""
    if split is not None and fmt != "hf":
        raise ValueError("--split only applies to Hugging Face datasets exports (--from hf)")
    opts: dict = {"sep": sep} if fmt in TABLE_SOURCES else {}
    if fmt == "hf":
        opts["split"] = split
        if images_for is None:
            opts["embedded_images"] = "skip"
        else:
            opts.update(image_dir=images_for.parent / f"{images_for.name}.images", image_root=images_for.parent)
    return opts


def _report_skipped(report: SkipReport) -> None:
    for text in report.notes.values():
        typer.echo(f"note: {text}", err=True)
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
    split: Optional[str] = typer.Option(None, "--split", help="Hugging Face export with several splits: the one to "
                                                              "read. Its embedded images go to DST.images/."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Skip (and list) invalid rows instead of stopping."),
    limit: Optional[int] = typer.Option(None, "--limit", min=0, help="Convert at most N samples."),
    allow_empty: bool = typer.Option(False, "--allow-empty", help="Write an empty file for an input with no samples "
                                                                  "(otherwise an error)."),
    image_root: Optional[Path] = typer.Option(None, "--image-root", file_okay=False,
                                              help="--to hf: the folder the image references are under (default: "
                                                   "the input's folder); the images are embedded."),
    license: str = typer.Option("other", "--license", help="--to hf: the dataset card's licence field (an SPDX or "
                                                          "Hub licence id; the source benchmark's terms apply)."),
) -> None:
    """Convert a benchmark file between formats (lossless for same-format round trips). `--to hf DIR`
    writes a Hugging Face dataset folder (Parquet shards with embedded images, a dataset card with the
    audit's provenance) that `datasets.load_dataset(DIR)` reads."""
    m = _mapping(mapping)
    report = SkipReport()
    try:
        fin = from_fmt or detect_format(src)
        fout = to_fmt or _out_format(dst, fin, generic=m is not None)
        for name in (fin, fout):
            if name not in FORMATS:
                _fail(f"unknown format {name!r}; known: {_FORMATS}")
        if m is not None and not {fin, fout} & set(TABLE_SOURCES):
            _fail("--mapping only applies to the table formats (jsonl/csv/parquet/hf)")
        samples = read_samples(src, fin, qtypes=qtypes, mapping=m if fin in TABLE_SOURCES else None,
                               skip_invalid=skip_invalid, report=report,
                               **_table_opts(fin, sep=sep, split=split, images_for=dst))
        if limit is not None:
            samples = itertools.islice(samples, limit)
        if qtypes_out is not None and fout != "infoseek":
            _fail("--qtypes-out only applies when writing the infoseek format")
        write_opts: dict = {"qtypes_out": qtypes_out} if fout == "infoseek" else {}
        if fout in GENERIC_FORMATS:
            write_opts.update(mapping=m, sep=sep)
        if fout == "hf":
            from kbvqa.data.hf_export import write_hf_folder

            n = write_hf_folder(non_empty(samples, src, allow_empty), dst, source=src, license=license,
                                image_root=image_root)
            typer.echo(f"wrote {n} sample(s) {fin} -> hf dataset folder: {dst} (load it with "
                       f"datasets.load_dataset({str(dst)!r}); publish it with `huggingface-cli upload`, see "
                       "docs/interop.md)")
            _report_skipped(report)
            return
        samples = non_empty(samples, src, allow_empty)
        n = write_samples(samples, dst, fout, **write_opts)
    except (DataError, ValueError) as e:
        _fail(str(e))
        return
    typer.echo(f"wrote {n} sample(s) {fin} -> {fout}: {dst}")
    _report_skipped(report)


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
    split: Optional[str] = typer.Option(None, "--split", help="Hugging Face export: the split to count."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Skip (and count) invalid rows."),
    allow_empty: bool = typer.Option(False, "--allow-empty", help="Count an input with no samples (otherwise an "
                                                                  "error)."),
) -> None:
    """Counts by type/split/dataset, answer lengths, multi-part/numeric answers, missing fields."""
    report = SkipReport()
    try:
        fmt = from_fmt or detect_format(path)
        m = _mapping(mapping) if fmt in TABLE_SOURCES else None
        result = dataset_stats(non_empty(read_samples(path, fmt, qtypes=qtypes, mapping=m, skip_invalid=skip_invalid,
                                                      report=report, **_table_opts(fmt, split=split)),
                                         path, allow_empty))
    except (DataError, ValueError) as e:
        _fail(str(e))
        return
    result["skipped"] = report.count
    result["warnings"] = dict(report.warnings)  # duplicate ids, samples without answers: counted, not silent
    result["notes"] = dict(report.notes)
    if as_json:
        emit_json(result)
        return
    from kbvqa.report.summaries import dataset_stats_table

    print_result(dataset_stats_table(result, title=path.name))
    _report_skipped(report)


# `compare` calls a judge model: the model-call limit flags every such command takes. Its settings are
# kbvqa.pipelines.curate.hops.CompareOptions (default None = not given; --help shows the class defaults).
from kbvqa.cli.flag_groups import GROUP, ModelLimits, command, ungrouped  # noqa: E402
from kbvqa.cli.options import with_defaults  # noqa: E402


@command(app, "compare", cls=with_defaults("kbvqa.pipelines.curate.hops:CompareOptions"))
def compare(
    paths: list[Path] = typer.Argument(..., help="Benchmark files (any format kbvqa reads)."),
    from_fmt: Optional[list[str]] = typer.Option(None, "--from", help=f"Format ({_FORMATS}): once for all files or "
                                                                      "once per file; detected when omitted."),
    names: Optional[list[str]] = typer.Option(None, "--name", help="Row label, once per file (default: file stem)."),
    mapping: Optional[str] = typer.Option(None, "--mapping", help="Generic formats: field=column,..."),
    llm: Optional[str] = typer.Option(None, "--llm", help="OpenAI-compatible base URL of the hops judge."),
    model: Optional[str] = typer.Option(None, "--model", help="Judge model name on that server."),
    config: Optional[Path] = typer.Option(None, "--config", help="kbvqa.toml with [models.<role>]; its "
                                                                 "[data.compare] table sets this command's options "
                                                                 "(flags win)."),
    judge_role: Optional[str] = typer.Option(None, "--judge-role", help="The role that estimates reasoning hops."),
    api_key_env: Optional[str] = typer.Option(None, "--api-key-env"),
    hops_sample: Optional[int] = typer.Option(None, "--hops-sample", min=1, help="Judge at most N items per "
                                                                                 "benchmark (the same N every run)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for the judge's journals and compare.json "
                                                           "(needed with a judge)."),
    resume: Optional[bool] = typer.Option(None, "--resume/--no-resume", help="Keep the journals' estimates; ask "
                                                                             "again only failed and invalid ones."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", min=1, help="Judge requests in flight."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    limits: ModelLimits = GROUP,
) -> None:
    """Compare benchmarks (seed 001 Table 1): items, query and answer lengths in words, images per item,
    category and intent coverage, and with a judge model the mean estimated reasoning hops."""
    import json

    from kbvqa.cli.options import flags
    from kbvqa.data.compare import NOTEVQA_PUBLISHED, benchmark_profile
    from kbvqa.models.config import ConfigError
    from kbvqa.pipelines.curate.hops import CompareOptions, hops_roles
    from kbvqa.runner.options import read_table

    if from_fmt and len(from_fmt) not in (1, len(paths)):
        _fail(f"--from: give one format for all files or one per file ({len(paths)}), not {len(from_fmt)}")
    if names and len(names) != len(paths):
        _fail(f"--name: give one per file ({len(paths)}), not {len(names)}")
    labels = list(names) if names else [p.stem for p in paths]
    if len(set(labels)) != len(labels):
        _fail(f"two benchmarks would be called the same ({labels}); give --name for each")
    try:
        opts = CompareOptions.build(read_table(config, CompareOptions.SECTION),
                                    source=None if config is None else str(config),
                                    **flags(CompareOptions, ungrouped(locals())))
        roles = hops_roles(opts)
    except (ConfigError, ValueError) as e:
        fail(e)
    judge = roles.get(opts.hops.role)
    if judge is not None and out is None:
        fail("the hops judge writes resumable journals: give --out DIR")
    rows = []
    m = _mapping(mapping)
    for i, path in enumerate(paths):
        report = SkipReport()
        try:
            fmt = (from_fmt[0] if len(from_fmt) == 1 else from_fmt[i]) if from_fmt else detect_format(path)
            samples = list(read_samples(path, fmt, mapping=m if fmt in TABLE_SOURCES else None, report=report,
                                        **_table_opts(fmt)))
        except (DataError, ValueError) as e:
            _fail(str(e))
            return
        row = benchmark_profile(samples, name=labels[i], fmt=fmt)
        row["file"] = str(path)
        row["warnings"] = dict(report.warnings)
        if judge is not None and out is not None:
            from kbvqa.pipelines.curate.hops import estimate_hops, hop_records

            try:
                row["hops"] = estimate_hops(hop_records(samples, opts.hops_sample), out / f"{labels[i]}.hops.jsonl",
                                            roles, opts, progress=not as_json)
            except (ValueError, OSError) as e:
                fail(e)
        rows.append(row)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare.json").write_text(json.dumps({"benchmarks": rows, "options": opts.used()}, indent=1,
                                                     ensure_ascii=False), encoding="utf-8")
    hops_journals = [out / f"{r['name']}.hops.jsonl" for r in rows if r.get("hops") and out is not None]
    if as_json:
        emit_json({"benchmarks": rows, "options": opts.used()})
        _end_hops(hops_journals)
        return
    from kbvqa.report.tables import ResultTable

    def num(d: Optional[dict], k: str) -> Optional[float]:
        return None if not d or d.get(k) is None else float(d[k])

    table = [{"benchmark": r["name"], "format": r["format"], "items": r["items"],
              "query words (mean)": num(r["query_words"], "mean"),
              "query words (median)": num(r["query_words"], "median"),
              "answer words (mean)": num(r["answer_words"], "mean"),
              "answer words (median)": num(r["answer_words"], "median"),
              "images/item": r["images_per_item"],
              "reference words (mean)": num(r.get("reference_words"), "mean"),
              "reference images/item": num(r.get("reference_images"), "per_item"),
              "categories": r["categories"]["n"] if r["categories"] else None,
              "intents": r["intents"]["n"] if r["intents"] else None,
              "hops": num(r["hops"], "mean") if r["hops"] else None,
              "judged/invalid": f"{r['hops']['judged']}/{r['hops']['invalid']}" if r["hops"] else "n/a"}
             for r in rows]
    p = NOTEVQA_PUBLISHED
    notes = [f"NoteVQA as published (seed 001): {p['items']} items, query {p['query_words']} / short reference "
             f"{p['answer_words']} / interleaved reference {p['reference_words']} words (mean), "
             f"{p['reference_images_per_item']} reference images per item"]
    judged = [r for r in rows if r["hops"]]
    if judged:
        j = judged[0]["hops"]["judge"]
        notes.append(f"hops: judge {j.get('model') or j.get('backend')} at {j.get('base_url', '-')} "
                     f"({j['prompt']}, sha256 {j['prompt_sha256'][:12]}); invalid replies are counted, not averaged")
    else:
        notes.append("hops: n/a (needs a judge model: --llm URL --model M, or --config with [models.judge])")
    for r in rows:
        for kind, n in r["warnings"].items():
            notes.append(f"warning: {r['name']}: {n} {kind.replace('_', ' ')}")
    print_result(ResultTable.from_dicts(table, name="compare", title="benchmark comparison", notes=notes))
    _end_hops(hops_journals)


def _end_hops(journals: list[Path]) -> None:
    """The hops judge's calls end by the exit-code convention (3: not one estimate; 4: some failed,
    under --fail-on-error), counted over every benchmark's journal."""
    from kbvqa.cli.common import end_job, journal_outcome

    ok, failed, reasons = 0, {"error": 0, "invalid": 0}, []
    for journal in journals:
        n_ok, bad, _needs_model, why = journal_outcome(journal)
        ok += n_ok
        reasons += why
        for k, v in bad.items():
            failed[k] = failed.get(k, 0) + v
    if journals:
        end_job(ok, failed, what="hop estimate(s)", reasons=reasons)
