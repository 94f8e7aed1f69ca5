"""`kbvqa score` commands: InfoSeek (official/strict/reward), E-VQA, short-answer judge, retrieval."""

from __future__ import annotations

import asyncio
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer

from kbvqa.cli.common import emit_json, fail, print_table

app = typer.Typer(no_args_is_help=True, help="Score predictions: InfoSeek, E-VQA, short-answer judge, retrieval.")


class InfoSeekMode(str, Enum):
    official = "official"
    strict = "strict"
    reward = "reward"


class TwoHopPolicy(str, Enum):
    any = "any"
    all = "all"






def _write_items(path: Path, items: list[dict[str, Any]]) -> None:
    from kbvqa.data.jsonl import write_jsonl

    write_jsonl(path, items)




@app.command("infoseek")
def infoseek(
    predictions: Path = typer.Option(..., "--predictions", "-p", exists=True, dir_okay=False,
                                     help="JSONL {data_id, prediction} or kbvqa Prediction {sample_id, answer}."),
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False,
                                    help="Official InfoSeek JSONL, kbvqa JSONL, or ARA CSV."),
    qtypes: Optional[Path] = typer.Option(None, "--qtypes", exists=True, dir_okay=False,
                                          help="InfoSeek question-type JSONL {data_id, question_type}."),
    mode: InfoSeekMode = typer.Option(InfoSeekMode.official, "--mode",
                                      help="official (bit-exact), strict (missing = wrong, coverage, Time "
                                           "leniency extension) or reward (ARA/ReflectiVA)."),
    per_item: Optional[Path] = typer.Option(None, "--per-item", dir_okay=False, help="Write one JSON line per item."),
    as_json: bool = typer.Option(False, "--json", help="Print exactly one JSON object on stdout."),
    no_time_leniency: bool = typer.Option(False, "--no-time-leniency", help="strict mode: disable the Time extension."),
) -> None:
    """InfoSeek accuracy (official / strict / reward)."""
    from kbvqa.evaluate import infoseek as isk
    from kbvqa.evaluate.io import ScoreInputError, load_infoseek_references, load_predictions

    try:
        refs = load_infoseek_references(references, qtypes_path=qtypes, keep_raw=mode is InfoSeekMode.reward)
        preds = load_predictions(predictions)
        want_items = per_item is not None
        if mode is InfoSeekMode.official:
            res = isk.score_official(preds, refs, per_item=want_items)
        elif mode is InfoSeekMode.strict:
            res = isk.score_strict(preds, refs, per_item=want_items, time_leniency=not no_time_leniency)
        else:
            res = isk.score_reward(preds, refs, per_item=want_items)
    except (ScoreInputError, ValueError) as exc:
        fail(exc)
        return
    if per_item is not None:
        _write_items(per_item, res.items)
    s = res.summary
    if mode is InfoSeekMode.official:
        c = res.counts
        note = (f"kbvqa: official rules: {c['n_scored']} predictions scored; "
                f"{c['n_references_without_prediction']} references without a prediction (not counted); "
                f"{c['n_unknown_ids']} predictions with unknown ids ignored; "
                f"{c['n_duplicate_predictions']} duplicate predictions counted again")
        if c["n_references_without_split"]:
            note += f"; {c['n_references_without_split']} references have no data_split (scored as unseen_entity)"
        typer.echo(note, err=True)
    if as_json:
        emit_json(s)
        return
    if mode is InfoSeekMode.reward:
        rows = [(qt, v["accuracy"], v["correct"], v["n"]) for qt, v in s["by_question_type"].items()]
        rows.append(("all", s["accuracy"], s["correct"], s["n"]))
        print_table(f"InfoSeek reward accuracy (coverage {s['coverage']:.2%})",
                    ("type", "accuracy", "correct", "n"),
                    rows)
        for w in s["warnings"]:
            typer.echo(f"warning: {w}", err=True)
        return
    rows = []
    for name in ("unseen_question", "unseen_entity"):
        v = s[f"{name}_score"]
        rows.append((name, v["score"], v["score_string"], v["score_num"], v["score_time"]))
    print_table(f"InfoSeek {mode.value}: final {s['final_score']}",
                ("split", "score", "string", "numerical", "time"),
                rows)
    if mode is InfoSeekMode.strict:
        typer.echo(f"coverage {s['coverage']:.2%} ({s['n_predicted']}/{s['n']}); time leniency rescued "
                   f"{s['extensions']['time_leniency']['n_rescued']} items (kbvqa extension)")


def _judge_client(base_url: Optional[str], model: Optional[str], replay: Optional[Path],
                  config: Optional[Path] = None, role: Optional[str] = None) -> Any:
    """The judge: a model role from kbvqa.toml / KBVQA_<ROLE>_* env (--config / --judge-role), or the
    direct flags; mixing the two is an error so it is always clear which model judged."""
    if config is not None or role is not None:
        if base_url or model or replay is not None:
            raise ValueError("choose either --config/--judge-role or --judge-base-url/--judge-model/--judge-replay")
        from kbvqa.models.config import build_roles, load_model_config

        role = role or "judge"
        cfg = load_model_config(config)
        if role not in cfg.roles:
            where = f"{config}" if config is not None else "the environment"
            raise ValueError(f"model role {role!r} is not configured in {where} "
                             f"(configured: {', '.join(sorted(cfg.roles)) or 'none'})")
        client = build_roles(cfg)[role]
        if isinstance(client, list):
            raise ValueError(f"model role {role!r} lists several models; a judge must be one model")
        return client
    if replay is not None:
        from kbvqa.models.replay import ReplayClient

        return ReplayClient(replay)
    if base_url or model:
        if not (base_url and model):
            raise ValueError("an LLM judge needs both --judge-base-url and --judge-model")
        from kbvqa.models.client import OpenAIChatClient

        return OpenAIChatClient(base_url, model, temperature=0.0)
    return None


_CONFIG_OPT = typer.Option(None, "--config", exists=True, dir_okay=False,
                           help="kbvqa.toml: the judge is built from its [models.<role>] entry.")
_ROLE_OPT = typer.Option(None, "--judge-role", help="Model role used as the judge (default 'judge' with --config).")


@app.command("evqa")
def evqa(
    predictions: Path = typer.Option(..., "--predictions", "-p", exists=True, dir_okay=False),
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False,
                                    help="E-VQA CSV with a data_id column, or kbvqa JSONL."),
    per_item: Optional[Path] = typer.Option(None, "--per-item", dir_okay=False),
    as_json: bool = typer.Option(False, "--json", help="Print exactly one JSON object on stdout."),
    bem_dir: Optional[Path] = typer.Option(None, "--bem-dir", help="Local BEM model directory (see evqa.load_bem)."),
    judge_base_url: Optional[str] = typer.Option(None, "--judge-base-url", help="OpenAI-compatible judge server."),
    judge_model: Optional[str] = typer.Option(None, "--judge-model", help="Judge model name."),
    judge_replay: Optional[Path] = typer.Option(None, "--judge-replay", exists=True, dir_okay=False,
                                                help="Answer judge calls from a recorded cassette."),
    judge_concurrency: int = typer.Option(16, "--judge-concurrency", min=1),
    config: Optional[Path] = _CONFIG_OPT,
    judge_role: Optional[str] = _ROLE_OPT,
    semantic: bool = typer.Option(False, "--semantic",
                                  help="EM-failure fallback: semantic-approx (all-MiniLM-L6-v2 cosine, not BEM)."),
    semantic_threshold: float = typer.Option(0.8, "--semantic-threshold", help="Cosine threshold for --semantic."),
    semantic_model_dir: Optional[Path] = typer.Option(None, "--semantic-model-dir", file_okay=False,
                                                      help="Local sentence-transformers model (default MiniLM)."),
) -> None:
    """E-VQA accuracy: exact match, then an optional equivalence backend when EM fails
    (BEM from --bem-dir, an LLM judge, or --semantic; at most one)."""
    from kbvqa.evaluate import evqa as ev
    from kbvqa.evaluate.io import ScoreInputError, load_predictions

    try:
        client = _judge_client(judge_base_url, judge_model, judge_replay, config, judge_role)
        chosen = [n for n, on in (("--bem-dir", bem_dir is not None), ("an LLM judge", client is not None),
                                  ("--semantic", semantic)) if on]
        if len(chosen) > 1:
            raise ValueError(f"choose one equivalence backend, got {' and '.join(chosen)}")
        backend: Any = None
        if bem_dir is not None:
            backend = ev.load_bem(bem_dir)
        elif client is not None:
            backend = ev.LLMJudgeBackend(client, concurrency=judge_concurrency)
        elif semantic:
            from kbvqa.evaluate.semantic import SemanticBackend

            backend = SemanticBackend(semantic_model_dir, threshold=semantic_threshold)
        refs = ev.load_evqa_references(references)
        preds = load_predictions(predictions)

        async def _run() -> Any:
            try:
                return await ev.score_evqa_async(preds, refs, backend=backend, per_item=per_item is not None)
            finally:  # close the judge's HTTP pool inside the loop that opened it
                if client is not None and hasattr(client, "aclose"):
                    await client.aclose()

        res = asyncio.run(_run())
    except (ScoreInputError, ValueError, RuntimeError, FileNotFoundError) as exc:
        fail(exc)
        return
    if per_item is not None:
        _write_items(per_item, res.items)
    s = res.summary
    if as_json:
        emit_json(s)
        return
    rows = [(k, v["accuracy"], v["correct"], v["n"], v["n_predicted"]) for k, v in s["by_question_type"].items()]
    rows.append(("all", s["accuracy"], s["correct"], s["n"], s["n_predicted"]))
    print_table(f"E-VQA accuracy, scorer {s['scorer']}, coverage {s['coverage']:.2%}", ("question_type", "accuracy", "correct", "n", "predicted"), rows)


def _judge_references(path: Path) -> dict[str, tuple[str, str]]:
    """id -> (question, target) from kbvqa JSONL (`id`, `question`, `answers`) or a CSV with
    `data_id`/`id`, `problem`/`question` and `answer` (SimpleQA / ARA style)."""
    from kbvqa.evaluate.io import ScoreInputError, read_csv, read_jsonl

    out: dict[str, tuple[str, str]] = {}
    if str(path).lower().endswith(".csv"):
        for ln, row in read_csv(path):
            did = row.get("data_id") or row.get("id")
            if not did:
                raise ScoreInputError(path, ln, "data_id", "missing")
            target = (row.get("answer") or "").strip()
            if not target:
                raise ScoreInputError(path, ln, "answer", f"empty gold answer for {did!r}")
            out[did] = (row.get("problem") or row.get("question") or "", target.replace("|", " / "))
    else:
        for ln, obj in read_jsonl(path):
            did = obj.get("id", obj.get("data_id"))
            if not isinstance(did, str) or not did:
                raise ScoreInputError(path, ln, "id", f"must be a non-empty string, got {did!r}")
            texts = [a if isinstance(a, str) else a.get("text", "") for a in obj.get("answers") or []
                     if isinstance(a, (str, dict))]
            texts = [t for t in texts if t and t.strip()]
            if not texts:
                raise ScoreInputError(path, ln, "answers", f"no gold answer for {did!r}")
            target = texts[0] if len(texts) == 1 else "any one of: " + " | ".join(texts)
            out[did] = (obj.get("question") or "", target)
    return out


@app.command("judge")
def judge(
    predictions: Path = typer.Option(..., "--predictions", "-p", exists=True, dir_okay=False),
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False,
                                    help="kbvqa JSONL or CSV (data_id, problem/question, answer)."),
    judge_base_url: Optional[str] = typer.Option(None, "--judge-base-url"),
    judge_model: Optional[str] = typer.Option(None, "--judge-model"),
    judge_replay: Optional[Path] = typer.Option(None, "--judge-replay", exists=True, dir_okay=False),
    config: Optional[Path] = _CONFIG_OPT,
    judge_role: Optional[str] = _ROLE_OPT,
    concurrency: int = typer.Option(16, "--concurrency", min=1),
    per_item: Optional[Path] = typer.Option(None, "--per-item", dir_okay=False),
    as_json: bool = typer.Option(False, "--json", help="Print exactly one JSON object on stdout."),
) -> None:
    """SimpleQA-style short-answer grading (correct / incorrect / not_attempted; invalid and error counted)."""
    from kbvqa.evaluate import judge as jd
    from kbvqa.evaluate.io import ScoreInputError, load_predictions

    try:
        refs = _judge_references(references)
        preds = load_predictions(predictions)
        client = _judge_client(judge_base_url, judge_model, judge_replay, config, judge_role)
        if client is None:
            raise ValueError("no judge configured: pass --config/--judge-role, --judge-base-url and "
                             "--judge-model, or --judge-replay")
    except (ScoreInputError, ValueError, FileNotFoundError) as exc:
        fail(exc)
        return
    by_id: dict[str, Optional[str]] = {}
    unknown = 0
    for p in preds:
        if p.data_id in refs:
            by_id[p.data_id] = p.prediction
        else:
            unknown += 1

    async def _run() -> dict[str, Any]:
        sem = asyncio.Semaphore(concurrency)

        async def one(did: str) -> Any:
            q, target = refs[did]
            async with sem:
                return await jd.judge_answer(client, q, target, by_id[did] or "", sample_id=did)

        todo = [d for d in refs if by_id.get(d)]
        try:
            got = await asyncio.gather(*(one(d) for d in todo))
        finally:
            if hasattr(client, "aclose"):
                await client.aclose()
        return dict(zip(todo, got))

    verdicts = asyncio.run(_run())
    # a missing or empty prediction is not attempted by definition: no judge call, counted separately
    labels = [verdicts[d].label if d in verdicts else "not_attempted" for d in refs]
    summary: dict[str, Any] = {"scorer": "simpleqa-judge", "prompt_version": jd.PROMPT_VERSION,
                               **jd.simpleqa_metrics(labels),
                               "n_missing": sum(1 for d in refs if d not in by_id),
                               "n_empty": sum(1 for d in refs if d in by_id and not by_id[d]),
                               "n_unknown_ids": unknown,
                               "judge": getattr(getattr(client, "provenance", None), "model", None)}
    if per_item is not None:
        rows = []
        for d in refs:
            v = verdicts.get(d)
            rows.append({"data_id": d, "prediction": by_id.get(d), "missing": d not in by_id,
                         "label": v.label if v else "not_attempted", "rationale": v.rationale if v else "no answer"})
        _write_items(per_item, rows)
    if as_json:
        emit_json(summary)
        return
    keys = ("correct", "incorrect", "not_attempted", "invalid", "error", "accuracy_given_attempted", "f1")
    print_table(f"Short-answer judge ({summary['n']} items)",
                ("metric", "value"),
                [(k, f"{summary[k]:.4f}") for k in keys])


def _parse_ks(text: str) -> list[int]:
    try:
        ks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"--k must be comma-separated integers, got {text!r}") from None
    if not ks or min(ks) < 1:
        raise typer.BadParameter(f"--k values must be positive, got {text!r}")
    return ks


@app.command("retrieval")
def retrieval(
    records: Path = typer.Option(..., "--records", exists=True, dir_okay=False,
                                 help="JSONL {id, retrieved: [urls], stage: initial|post}."),
    references: Path = typer.Option(..., "--references", "-r", exists=True, dir_okay=False,
                                    help="kbvqa JSONL (entity.url) or CSV with wikipedia_url."),
    k: str = typer.Option("1,3,5,10,20", "--k", help="Comma-separated K values."),
    two_hop: TwoHopPolicy = typer.Option(TwoHopPolicy.any, "--two-hop",
                                         help="Several gold urls: any one in top K, or all of them."),
    texts: Optional[Path] = typer.Option(None, "--texts", exists=True, dir_okay=False,
                                         help="JSONL {url, text}: adds answer-in-retrieved-text recall."),
    as_json: bool = typer.Option(False, "--json", help="Print exactly one JSON object on stdout."),
) -> None:
    """Recall@K and MRR per retrieval stage (missing records count as misses)."""
    from kbvqa.data.urls import canonical_url
    from kbvqa.evaluate import retrieval as rt
    from kbvqa.evaluate.io import ScoreInputError, read_jsonl

    ks = _parse_ks(k)
    try:
        refs = rt.load_retrieval_references(references)
        recs, dup = rt.load_retrieval_records(records)
        out = rt.retrieval_metrics(recs, refs, ks=ks, two_hop=two_hop.value)
        out["n_duplicate_records"] = dup
        if texts is not None:
            table: dict[str, str] = {}
            for ln, obj in read_jsonl(texts):
                if not isinstance(obj.get("url"), str) or not isinstance(obj.get("text"), str):
                    raise ScoreInputError(texts, ln, "url/text", "each line needs string url and text")
                table[canonical_url(obj["url"])] = obj["text"]
            out["answer_in_text"] = {stage: rt.answer_in_text_recall(r, refs, table.get, ks=ks)
                                     for stage, r in recs.items()}
    except (ScoreInputError, ValueError) as exc:
        fail(exc)
        return
    if as_json:
        emit_json(out)
        return
    rows = []
    for stage, m in out["stages"].items():
        rows.append((stage, *[f"{100 * m['recall'][f'@{kk}']:.2f}" for kk in out["ks"]], f"{m['mrr']:.4f}",
                     m["n_missing"]))
    print_table(f"Retrieval ({out['n_references']} references, two_hop={two_hop.value})",
                ("stage", *[f"R@{kk}" for kk in out["ks"]], "MRR", "missing"),
                rows)


class MethodFormat(str, Enum):
    iba = "iba"
    echosight = "echosight"
    reflectiva = "reflectiva"
    wikiprf = "wikiprf"
    comem = "comem"
    generic = "generic"


class DuplicatePolicy(str, Enum):
    error = "error"
    last = "last"
    first = "first"


@app.command("convert-predictions")
def convert_predictions(
    source: Path = typer.Argument(..., exists=True, help="The method's output file or directory."),
    method: MethodFormat = typer.Option(..., "--method", help="Output format (see kbvqa.evaluate.methods)."),
    out: Path = typer.Option(..., "--out", "-o", dir_okay=False, help="kbvqa prediction JSONL to write."),
    references: Optional[Path] = typer.Option(None, "--references", "-r", exists=True, dir_okay=False,
                                              help="Align ids: missing/unknown counted, unknown dropped."),
    dataset: str = typer.Option("infoseek", "--dataset", help="infoseek | evqa (IBA reads more keys for evqa)."),
    duplicates: DuplicatePolicy = typer.Option(DuplicatePolicy.error, "--duplicates",
                                               help="error (default), or keep the last / first line per id."),
    id_key: str = typer.Option("data_id", "--id-key", help="generic: id key (dotted path)."),
    answer_key: str = typer.Option("prediction", "--answer-key", help="generic: answer key (dotted path)."),
    extract: Optional[str] = typer.Option(None, "--extract", help="generic: 'comem' to apply CoMEM's extraction."),
    raw_outputs: Optional[Path] = typer.Option(None, "--raw-outputs", exists=True, dir_okay=False,
                                               help="wikiprf legacy: *_raw_outputs.jsonl supplying the ids."),
    allow_gt_order: bool = typer.Option(False, "--allow-gt-order",
                                        help="wikiprf legacy: assign ids by reference row order (reported)."),
    as_json: bool = typer.Option(False, "--json", help="Print the conversion report as one JSON object."),
) -> None:
    """Convert a published method's outputs to kbvqa prediction lines {data_id, prediction, method, parse_rule}."""
    from kbvqa.evaluate import methods as mt
    from kbvqa.evaluate.io import ScoreInputError

    try:
        res = mt.convert(method.value, source, references=references, dataset=dataset, duplicates=duplicates.value,
                         id_key=id_key, answer_key=answer_key, extract=extract, raw_outputs=raw_outputs,
                         allow_gt_order=allow_gt_order)
    except (ScoreInputError, ValueError, FileNotFoundError) as exc:
        fail(exc)
        return
    n = mt.write_predictions(out, res.predictions)
    summary = {**res.summary(), "out": str(out), "n_written": n}
    for w in res.warnings:
        typer.echo(f"warning: {w}", err=True)
    if as_json:
        emit_json(summary)
        return
    a = res.alignment
    rows = [("lines read", a.n_input), ("written", n), ("duplicate ids", f"{len(a.duplicates)} ({a.duplicate_policy})"),
            ("null predictions", a.n_null_predictions)]
    if a.n_references is not None:
        rows += [("references", a.n_references), ("missing ids", a.n_missing), ("unknown ids (dropped)", a.n_unknown)]
    rows += [(f"rule {k}", v) for k, v in res.parse_rules.items()]
    print_table(f"{method.value} -> {out}", ("", "count"), rows)
