"""`kbvqa study ...`: grouped accuracy with CIs, unfixed-vs-fixed comparisons, with/without retrieval.

Each command prints a table (or one JSON object with --json) and, with --out DIR, writes
DIR/<kind>.study.json and renders the results folder (tables, plots, index.html) unless --no-report.
Predictions are kbvqa JSONL ({data_id, prediction} or {sample_id, answer}); convert method outputs
first with `kbvqa score convert-predictions`.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer

from kbvqa.cli.common import emit_json, fail, print_table

app = typer.Typer(no_args_is_help=True,
                  help="Studies: accuracy by group with bootstrap CIs, split comparisons and ranking "
                       "reversals, with/without-retrieval 2x2.")


class Scorer(str, Enum):
    infoseek_strict = "infoseek-strict"
    infoseek_reward = "infoseek-reward"
    evqa = "evqa"
    evqa_semantic = "evqa-semantic"








def _semantic(scorer: Scorer, threshold: float) -> Any:
    if scorer is not Scorer.evqa_semantic:
        return None
    from kbvqa.evaluate.semantic import SemanticBackend

    return SemanticBackend(threshold=threshold)


def _save(out: Optional[Path], kind: str, obj: dict[str, Any], report: bool) -> None:
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{kind}.study.json"
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=1), encoding="utf-8")
    typer.echo(f"wrote {path}", err=True)
    if report:
        from kbvqa.report.results import build_report, collect_inputs

        res = build_report(collect_inputs(out), out, title=f"kbvqa study: {out.name}")
        typer.echo(f"report: {res.html} ({len(res.tables)} table files, {len(res.plots)} plots)", err=True)


_COMMON_RESAMPLES = typer.Option(2000, "--resamples", min=1, help="Bootstrap resamples.")
_COMMON_SEED = typer.Option(0, "--seed", help="Bootstrap seed (same seed, same intervals).")


@app.command("by-type")
def by_type(
    predictions: Path = typer.Option(..., "--predictions", "-p", exists=True, dir_okay=False),
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False),
    by: str = typer.Option("question_type", "--by", help="Reference field, CSV column or meta key (meta.KEY)."),
    scorer: Scorer = typer.Option(..., "--scorer"),
    qtypes: Optional[Path] = typer.Option(None, "--qtypes", exists=True, dir_okay=False,
                                          help="InfoSeek question-type JSONL (official references)."),
    name: str = typer.Option("", "--name", help="Method name shown in tables (default: the file stem)."),
    resamples: int = _COMMON_RESAMPLES,
    seed: int = _COMMON_SEED,
    semantic_threshold: float = typer.Option(0.8, "--semantic-threshold"),
    out: Optional[Path] = typer.Option(None, "--out", file_okay=False, help="Results folder."),
    no_report: bool = typer.Option(False, "--no-report", help="With --out: write only the JSON."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Accuracy per question type (or any reference field) with seeded bootstrap 95% CIs."""
    from kbvqa.evaluate import studies as st
    from kbvqa.evaluate.io import ScoreInputError

    try:
        refs = st.load_references(references, scorer.value, qtypes=qtypes)
        sc = st.score_items(predictions, refs, scorer.value, label=name or predictions.stem,
                            semantic_backend=_semantic(scorer, semantic_threshold))
        labels = None if by in ("question_type", "qtype") else st.group_labels(references, by)
        res = st.by_group(sc, by, labels, n_resamples=resamples, seed=seed)
    except (ScoreInputError, ValueError, FileNotFoundError) as exc:
        fail(exc)
        return
    _save(out, f"by-{_slug(by)}-{_slug(sc.label)}", res, not no_report)
    if as_json:
        emit_json(res)
        return
    rows = [(g["group"], g["n"], g["accuracy"], f"[{g['ci_low']:.2f}, {g['ci_high']:.2f}]") for g in res["groups"]]
    o = res["overall"]
    rows.append(("all", o["n"], o["estimate"], f"[{o['low']:.2f}, {o['high']:.2f}]"))
    print_table(f"{sc.label}: accuracy by {by} (scorer {res['scorer']})", (by, "n", "accuracy %", "95% CI"), rows)


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def _parse_methods(specs: list[str]) -> dict[str, tuple[Path, Path]]:
    out: dict[str, tuple[Path, Path]] = {}
    for spec in specs:
        if "=" not in spec:
            raise typer.BadParameter(f"--method expects NAME=PRED.jsonl or NAME=PRED_A.jsonl,PRED_B.jsonl, got {spec!r}")
        name, paths = spec.split("=", 1)
        if not name or name in out:
            raise typer.BadParameter(f"--method names must be non-empty and unique, got {name!r}")
        parts = paths.split(",")
        if len(parts) not in (1, 2):
            raise typer.BadParameter(f"--method {name}: one prediction file, or two separated by a comma")
        pa, pb = Path(parts[0]), Path(parts[-1])
        for p in {pa, pb}:
            if not p.is_file():
                raise typer.BadParameter(f"--method {name}: {p} is not a file")
        out[name] = (pa, pb)
    return out


@app.command("compare")
def compare(
    references_a: Path = typer.Option(..., "--references-a", exists=True, dir_okay=False, help="e.g. unfixed."),
    references_b: Path = typer.Option(..., "--references-b", exists=True, dir_okay=False, help="e.g. fixed."),
    method: list[str] = typer.Option(..., "--method", help="NAME=PRED.jsonl (scored on both splits) or "
                                                           "NAME=PRED_A.jsonl,PRED_B.jsonl; repeat per method."),
    scorer: Scorer = typer.Option(..., "--scorer"),
    names: str = typer.Option("A,B", "--split-names", help="Labels of the two splits, e.g. unfixed,fixed."),
    qtypes: Optional[Path] = typer.Option(None, "--qtypes", exists=True, dir_okay=False),
    allow_partial: bool = typer.Option(False, "--allow-partial",
                                       help="Pair on the common ids when the splits differ (counts reported)."),
    resamples: int = _COMMON_RESAMPLES,
    seed: int = _COMMON_SEED,
    semantic_threshold: float = typer.Option(0.8, "--semantic-threshold"),
    out: Optional[Path] = typer.Option(None, "--out", file_okay=False),
    no_report: bool = typer.Option(False, "--no-report"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Per-method accuracy on two aligned splits, paired deltas with CIs, and ranking reversals."""
    from kbvqa.evaluate import studies as st
    from kbvqa.evaluate.io import ScoreInputError

    split_names = tuple(x.strip() for x in names.split(","))
    if len(split_names) != 2 or not all(split_names):
        raise typer.BadParameter("--split-names needs two comma-separated labels")
    specs = _parse_methods(method)
    try:
        ra = st.load_references(references_a, scorer.value, qtypes=qtypes)
        rb = st.load_references(references_b, scorer.value, qtypes=qtypes)
        sem = _semantic(scorer, semantic_threshold)
        runs = {n: (st.score_items(pa, ra, scorer.value, label=n, semantic_backend=sem),
                    st.score_items(pb, rb, scorer.value, label=n, semantic_backend=sem))
                for n, (pa, pb) in specs.items()}
        res = st.compare_splits(runs, split_names=split_names, n_resamples=resamples, seed=seed,  # type: ignore[arg-type]
                                allow_partial=allow_partial)
    except (ScoreInputError, ValueError, FileNotFoundError) as exc:
        fail(exc)
        return
    res["references"] = {split_names[0]: str(references_a), split_names[1]: str(references_b)}
    _save(out, "compare", res, not no_report)
    if as_json:
        emit_json(res)
        return
    a, b = split_names
    rows = [(m["method"], m["accuracy_a"], m["accuracy_b"], m["delta"],
             f"[{m['delta_ci']['low']:.2f}, {m['delta_ci']['high']:.2f}]", m["rank_a"], m["rank_b"])
            for m in res["methods"]]
    print_table(f"{a} vs {b} (scorer {res['scorer']})", ("method", f"acc {a}", f"acc {b}", "delta", "95% CI",
                                                   f"rank {a}", f"rank {b}"), rows)
    for p in res["pairs"]:
        if p["status"] == "reversed":
            typer.echo(f"reversal: {p['method_1']} vs {p['method_2']} ({a}: {p['diff_a']:+.2f}, {b}: {p['diff_b']:+.2f})")


@app.command("retrieval-2x2")
def retrieval_2x2(
    with_pred: Path = typer.Option(..., "--with", exists=True, dir_okay=False, help="Run with retrieval."),
    without_pred: Path = typer.Option(..., "--without", exists=True, dir_okay=False, help="Run without retrieval."),
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False),
    scorer: Scorer = typer.Option(..., "--scorer"),
    qtypes: Optional[Path] = typer.Option(None, "--qtypes", exists=True, dir_okay=False),
    resamples: int = _COMMON_RESAMPLES,
    seed: int = _COMMON_SEED,
    semantic_threshold: float = typer.Option(0.8, "--semantic-threshold"),
    out: Optional[Path] = typer.Option(None, "--out", file_okay=False),
    no_report: bool = typer.Option(False, "--no-report"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Both correct / only with retrieval / only without / neither, for two runs of one model."""
    from kbvqa.evaluate import studies as st
    from kbvqa.evaluate.io import ScoreInputError

    try:
        refs = st.load_references(references, scorer.value, qtypes=qtypes)
        sem = _semantic(scorer, semantic_threshold)
        w = st.score_items(with_pred, refs, scorer.value, label=with_pred.stem, semantic_backend=sem)
        wo = st.score_items(without_pred, refs, scorer.value, label=without_pred.stem, semantic_backend=sem)
        res = st.retrieval_2x2(w, wo, n_resamples=resamples, seed=seed)
    except (ScoreInputError, ValueError, FileNotFoundError) as exc:
        fail(exc)
        return
    _save(out, "retrieval-2x2", res, not no_report)
    if as_json:
        emit_json(res)
        return
    o = res["overall"]
    rows = [(k.replace("_", " "), o[k], o[f"{k}_pct"]) for k in ("both_correct", "only_with", "only_without", "neither")]
    print_table(f"with vs without retrieval (scorer {res['scorer']}, n={o['n']})", ("outcome", "count", "%"), rows)
    g = res["gain"]
    typer.echo(f"gain {g['estimate']:+.2f} points, 95% CI [{g['low']:.2f}, {g['high']:.2f}]; "
               f"exact McNemar p = {res['mcnemar_p']:.4g}")


@app.command("augmentation-recall")
def augmentation_recall(
    samples: Optional[Path] = typer.Option(None, "--samples", help="Augmented samples (`kbvqa augment` OUT/"
                                                                   "samples.jsonl): retrieve with --index, in one go."),
    index: Optional[Path] = typer.Option(None, "--index", help="Image index (`kbvqa index images`) to retrieve with."),
    model_dir: Optional[Path] = typer.Option(None, "--model-dir", help="The index encoder's local model dir."),
    records: Optional[list[Path]] = typer.Option(None, "--records", help="Or: retrieval records already made, "
                                                                         "ids suffixed __anchor/__intra/__inter/"
                                                                         "__blank/__double (one or more files)."),
    references: Optional[Path] = typer.Option(None, "--references", help="Gold urls: kbvqa JSONL or CSV with "
                                                                          "wikipedia_url (default: --samples)."),
    ks: str = typer.Option("1,5,10,20", "--ks", help="Comma-separated K values."),
    stage: str = typer.Option("initial", "--stage", help="Which retrieval stage to tabulate."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write the rows as JSON here (and, when this "
                                                           "command retrieved, the records beside it)."),
) -> None:
    """Augmentation study (seed 000's Table 2): Recall@K per variant side by side, deltas against the anchor."""
    from kbvqa.evaluate.io import read_jsonl
    from kbvqa.evaluate.retrieval import load_retrieval_references
    from kbvqa.pipelines.answer import augmentation_recall_table, markdown_table

    if bool(records) == bool(samples and index):
        fail("give either --samples with --index (retrieve here) or --records (already retrieved)")
    k_values = [int(x) for x in ks.split(",") if x.strip()]
    try:
        refs = load_retrieval_references(references or samples)  # type: ignore[arg-type]
        if records:
            recs = [obj for p in records for _, obj in read_jsonl(p)]
        else:
            from kbvqa.data.formats import read_samples
            from kbvqa.kb.image_index import ImageIndex
            from kbvqa.models.image_encoders import get_encoder
            from kbvqa.stages.answer.retrieve import batch_retrieve

            idx = ImageIndex.load(index)  # type: ignore[arg-type]
            enc = get_encoder(idx.encoder, model_dir)
            recs = list(batch_retrieve((s.dump() for s in read_samples(samples)), idx, enc,  # type: ignore[arg-type]
                                       image_root=samples.parent, k=max(k_values)))  # type: ignore[union-attr]
            if out:
                rec_path = out.with_name(out.stem + ".records.jsonl")
                rec_path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
        rows = augmentation_recall_table(recs, refs, ks=k_values, stage=stage)
    except (OSError, ValueError, KeyError) as e:
        fail(e)
    typer.echo(markdown_table(rows))
    if out:
        out.write_text(json.dumps(rows, indent=2), encoding="utf-8")
