"""`kbvqa demo`: load -> audit (rules) -> retrieve + answer -> score -> report, end to end.

Offline it uses only embedded defaults (rules audit, histogram image retrieval, extractive answerer,
rule-based scorers). With `llm`/`model` the answerer (and, when asked, the short-answer judge) is an
OpenAI-compatible server; everything else is unchanged so the two runs compare like for like.
"""

from __future__ import annotations

import json
import platform
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbvqa import __version__
from kbvqa.data.jsonl import read_jsonl, write_jsonl
from kbvqa.data.schema import Provenance
from kbvqa.evaluate.infoseek import score_reward, score_strict
from kbvqa.evaluate.io import load_infoseek_references, load_predictions
from kbvqa.evaluate.retrieval import load_retrieval_references, retrieval_metrics
from kbvqa.kb.image_index import ImageIndex
from kbvqa.kb.store import KBStore
from kbvqa.models.image_encoders import HistogramEncoder
from kbvqa.evaluate.augmentation import augmentation_recall_table
from kbvqa.pipelines.audit import audit_file
from kbvqa.pipelines.augment.options import AugmentOptions
from kbvqa.pipelines.augment.run import augment_samples
from kbvqa.pipelines.curate import curate_posts
from kbvqa.pipelines.retrieve import run_retrieval
from kbvqa.demo.bench import DemoBench, build_bench, build_community, build_posts
from kbvqa.evaluate.analyses import demo_analyses
from kbvqa.evaluate.agent import tool_usage
from kbvqa.report.html import Figure, Interleaved, Table, write_page
from kbvqa.report.results import build_report, collect_inputs
from kbvqa.report.summaries import recall_by_variant_table, study_tables
from kbvqa.report.tables import percent
from kbvqa.runner import read_results
from kbvqa.runner.job import Job
from kbvqa.runner.manifest import git_info
from kbvqa.runner.stage import Context
from kbvqa.stages.answer.extractive import ExtractiveAnswer
from kbvqa.stages.answer.generate import GenerateAnswer
from kbvqa.stages.answer.retrieve import ImageRetrieve


@dataclass
class DemoResult:
    out: Path
    report: Path
    manifest: Path
    scores: dict[str, Any] = field(default_factory=dict)
    audit: dict[str, Any] = field(default_factory=dict)
    flaws_found: int = 0
    flaws_total: int = 0
    seconds: float = 0.0
    agent: dict[str, Any] = field(default_factory=dict)  # answers given, forced answers (summary_lines)
    interleaved: dict[str, Any] = field(default_factory=dict)  # IVR-12 summaries and the reference funnel
    curation: dict[str, Any] = field(default_factory=dict)  # the curation funnel (CurateResult.as_dict)


def summary_lines(res: DemoResult) -> list[str]:
    """The seed 001 lines of the demo's terminal summary: the search agent (answers given, how episodes
    ended, forced answers, image-tag validity), IVR-12 (the rules-mode measures, and that there is no
    overall without a judge model) and the curation funnel (posts in, kept per stage, where they stopped)."""
    lines = []
    stats = res.scores.get("agent") or {}
    if stats:
        tags = stats.get("tags") or {}
        lines.append(f"agent: {res.agent.get('answered', 0)} of {stats.get('n', 0)} questions answered; ended by "
                     f"{counts_text(stats.get('terminations'))} (forced answers {res.agent.get('forced', 0)}); "
                     f"image tags {tags.get('valid', 0)}/{tags.get('total', 0)} valid"
                     + ("; with --max-turns 2, {forced} of {n} answers forced".format(**res.agent["budget2"])
                        if (res.agent.get("budget2") or {}).get("n") else ""))
    for side in ("references", "agent"):
        s = (res.interleaved.get(f"ivr12_{side}") or {})
        if not s.get("dimensions"):
            continue
        rules = [f"{d.get('title', k)} {d['mean']:.2f}" for k, d in s["dimensions"].items()
                 if d.get("measured_by") == "rule" and d.get("mean") is not None]
        judged = [k for k, d in s["dimensions"].items() if d.get("measured_by") == "judge"]
        overall = (s.get("overall") or {}).get("mean")
        tags_gate = (s.get("gates") or {}).get("tags_resolve") or {}
        lines.append(f"IVR-12 ({side}, {s.get('mode')} mode, {s.get('n_items')} items): "
                     + (f"rule measures (kbvqa's stand-ins, 1-5) {', '.join(rules)}; " if rules else "")
                     + (f"{len(judged)} dimensions judged; " if judged else "")
                     + f"tag gate {tags_gate.get('pass', 0)} pass / {tags_gate.get('fail', 0)} fail; "
                     + (f"overall {overall:.2f}" if overall is not None else
                        "no overall (needs all 12 dimensions judged by a model)"))
    f = res.curation
    if f.get("stages"):
        reached = [st for st in f["stages"] if st.get("in")]
        stops = {k: v for st in f["stages"] for k, v in (st.get("stopped") or {}).items()}
        where = next((st["stage"] for st in f["stages"] if st.get("stopped")), None)
        intake = f["intake"]
        dup = intake.get("duplicate_id", 0)  # dropped at intake: in the dropped count, not in the posts
        lines.append(f"curation: {intake.get('read', intake.get('posts', 0))} posts read"
                     + (f" ({dup} duplicate id dropped)" if dup else "") + f", {intake.get('posts', 0)} -> "
                     + " -> ".join(f"{st['stage']} {st.get('kept', 0)}" for st in reached)
                     + f"; {f['output'].get('items', 0)} items, {f['output'].get('dropped', 0)} dropped, "
                       f"{f['output'].get('stopped', 0)} stopped" + (f" at {where} ({counts_text(stops)})" if where else ""))
    return lines


def _roles(llm: str | None, model: str | None, api_key_env: str | None, concurrency: int) -> dict[str, Any]:
    if not llm:
        return {}
    if not model:
        raise ValueError("--llm needs --model (the model name the server serves)")
    from kbvqa.models.config import roles_from_flags

    return roles_from_flags(None, llm=llm, model=model, api_key_env=api_key_env, fill=("answerer",),
                            concurrency=concurrency, env={})


def _write_fixed(audited: Path, fixed: Path) -> int:
    """The repaired benchmark and its unfixed twin (the same ids before the audit), as `kbvqa audit split`
    writes them: fixed.jsonl, unfixed.jsonl and the counts in fixed.split.json."""
    from kbvqa.pipelines.audit_split import write_split

    return write_split(audited, fixed, fixed.with_name("unfixed.jsonl"))["fixed"]["rows"]


def _score(predictions: Path, references: Path) -> dict[str, Any]:
    refs = load_infoseek_references(references)
    preds = load_predictions(predictions)
    strict = score_strict(preds, refs, per_item=True)
    reward = score_reward(preds, refs)
    items = {i["data_id"]: i["correct"] for i in strict.items}
    accuracy = round(100.0 * sum(items.values()) / len(refs), 2) if refs else 0.0
    return {"strict": {**strict.summary, "accuracy": accuracy}, "reward": reward.summary, "items": items}


def _answer(image_root: Path, samples: Path, out: Path, index: ImageIndex, kb: KBStore, roles: dict[str, Any],
            concurrency: int, progress: bool) -> Any:
    from kbvqa.data.formats import read_samples

    stages: list[Any] = [ImageRetrieve(), GenerateAnswer() if "answerer" in roles else ExtractiveAnswer()]
    ctx = Context(kb=kb, roles=roles, resources={"image_index": index, "image_encoder": HistogramEncoder(),
                                                 "image_root": image_root})
    job = Job(stages, ctx, description=f"demo answers on {samples.name}",
              # absolute: the viewer finds the references from any folder (a relative --out, as `make demo`)
              run_config={"samples": str(Path(samples).resolve()), "answerer": stages[-1].name})
    return job.run((s.dump() for s in read_samples(samples, "kbvqa")), out=out, concurrency=concurrency,
                   resume=False, progress=progress, close=False)


# The demo's entities are one or two per kind, so the type vocabulary groups them into four coarse
# kinds (enough for intra- and inter-category distractors); questions keep their own noun
# ("the astronaut on the left").
DEMO_TYPES = ("person", "astronaut", "rocket", "tower", "flower", "animal", "drink", "image", "tissue", "city")
DEMO_ALIASES = {"astronaut": "person", "flower": "organism", "animal": "organism", "tissue": "organism",
                "rocket": "artifact", "drink": "artifact", "image": "artifact", "tower": "landmark", "city": "landmark"}
DEMO_FAMILIES = {"person": "people", "organism": "living", "artifact": "made", "landmark": "place"}


def _augment_and_retrieve(fixed: Path, root: Path, out: Path, index: ImageIndex) -> tuple[dict[str, Any], list]:
    """Augment the repaired split, retrieve with every variant's image, Recall@K side by side."""
    from kbvqa.data.formats import read_samples

    opts = AugmentOptions.build(types=[*DEMO_TYPES, "organism", "artifact", "landmark"], aliases=DEMO_ALIASES,
                                families=DEMO_FAMILIES, min_entities=2, height=256, workers=1)
    stats = augment_samples(list(read_samples(fixed, "kbvqa")), root, out, opts)
    samples = [rec for _, rec in read_jsonl(out / "samples.jsonl")]
    run = run_retrieval(samples, index, HistogramEncoder(), out=out / "retrieval.jsonl", image_root=out, k=10,
                        resume=False)
    records = [rec for _, rec in read_jsonl(run.out)]
    refs = load_retrieval_references(out / "samples.jsonl")
    return stats, augmentation_recall_table(records, refs, ks=(1, 3, 5))


def _agent(bench: DemoBench, kb: KBStore, index: ImageIndex, out: Path, progress: bool) -> tuple[Any, dict, Path]:
    """The search agent (embedded baseline policy, local tools over the KB) on the community set."""
    from kbvqa.data.formats import read_samples
    from kbvqa.pipelines.answer import build_answer_job

    community = build_community(bench)
    samples = [s.dump() for s in read_samples(community, "notevqa")]
    job = build_answer_job("agent", kb=kb, index=index, encoder=HistogramEncoder(), image_root=bench.root,
                           kb_images=bench.root, today="2026-12-01")
    named = {"samples": str(community.resolve())}  # the viewer shows each episode's reference beside it
    run = job.run(samples, out=out, resume=False, progress=progress, close=False, run_config=named)
    stats = tool_usage(read_results(out), {s["id"]: [a["text"] if isinstance(a, dict) else a for a in s["answers"]]
                                           for s in samples})
    # the same agent under a 2-turn budget: the harness ends the tool phase and the agent answers in a
    # forced last turn (meta.forced_answer), told why in a notice stored on that step
    tight = build_answer_job("agent", kb=kb, index=index, encoder=HistogramEncoder(), image_root=bench.root,
                             kb_images=bench.root, today="2026-12-01", max_turns=2)
    tight.run(samples[:3], out=out.with_name("budget2.jsonl"), resume=False, progress=False, close=False,
              run_config=named)
    return run, stats, community


def _interleaved_evaluation(bench: DemoBench, kb: KBStore, community: Path, agent_out: Path, out: Path,
                            progress: bool) -> dict[str, Any]:
    """IVR-12 in rules mode (no judge model) on the agent's answers and on the references, their
    comparison, and a reference-construction run over the local tools up to its first VLM stage."""
    from kbvqa.pipelines.reference import build_references, reference_options
    from kbvqa.pipelines.score import ivr12_compare_files, ivr12_files

    out.mkdir(parents=True, exist_ok=True)
    agent = ivr12_files(agent_out, community, [], out=out / "agent.ivr12.jsonl", resume=False,
                        image_root=bench.root, progress=progress)
    refs = ivr12_files(community, community, [], out=out / "references.ivr12.jsonl", resume=False,
                       image_root=bench.root, progress=progress)
    compare = ivr12_compare_files(out / "references.ivr12.summary.json", out / "agent.ivr12.summary.json",
                                  names=("references", "agent"), out=out / "ivr12.compare.json")
    opts = reference_options(samples=community, trajectories=agent_out, out=out / "reference_build", kb=bench.kb,
                             kb_images=bench.root, tools="local", images=bench.root, resume=False)
    funnel = build_references(opts, kb=kb, progress=progress)
    return {"ivr12_agent": agent, "ivr12_references": refs, "ivr12_compare": compare, "reference_funnel": funnel.as_dict()}


def _retrieval_records(predictions: Path, out: Path) -> Path:
    write_jsonl(out, ({"id": rec["id"], "retrieved": rec.get("retrieved", []), "stage": "initial"}
                      for rec in read_results(predictions)))
    return out


_MARKER = ".kbvqa-demo.json"  # what a demo run wrote in its folder, so a rerun removes that and nothing else


def _clear_previous_demo(out: Path) -> None:
    """Make `out` ready for a run: remove what an earlier demo wrote there (listed in its marker) and
    refuse a folder holding anything else — the demo never deletes files it did not write."""
    if not out.exists():
        return
    if not out.is_dir():
        raise ValueError(f"{out}: exists and is not a folder")
    marker = out / _MARKER
    ours: set[str] = set()
    if marker.is_file():
        info = json.loads(marker.read_text(encoding="utf-8"))
        # a run that did not finish listed nothing yet, but it started in an empty folder: all is its own
        ours = set(info["wrote"]) if info.get("complete") else {p.name for p in out.iterdir()}
    for name in sorted(ours):
        p = out / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
    marker.unlink(missing_ok=True)
    others = sorted(p.name for p in out.iterdir())
    if others:
        raise ValueError(f"{out}: holds files the demo did not write ({', '.join(others[:5])}"
                         f"{', ...' if len(others) > 5 else ''}); give --out an empty or new folder")


def _mark(out: Path, complete: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    wrote = sorted(p.name for p in out.iterdir() if p.name != _MARKER) if complete else []
    (out / _MARKER).write_text(json.dumps({"complete": complete, "wrote": wrote}), encoding="utf-8")


def run_demo(out: Path, *, llm: str | None = None, model: str | None = None, api_key_env: str | None = None,
             concurrency: int = 4, progress: bool = False) -> DemoResult:
    started = time.monotonic()
    out = Path(out)
    _clear_previous_demo(out)
    _mark(out, complete=False)
    timings: dict[str, float] = {}

    def tick(name: str, t0: float) -> None:
        timings[name] = round(time.monotonic() - t0, 3)

    t0 = time.monotonic()
    bench = build_bench(out / "bench")
    tick("build_benchmark", t0)

    t0 = time.monotonic()
    kb = KBStore(bench.kb)
    audit = audit_file(bench.samples, kb, out / "audit" / "audited.jsonl", resume=False, progress=progress)
    fixed = out / "audit" / "fixed.jsonl"
    n_fixed = _write_fixed(out / "audit" / "audited.jsonl", fixed)
    tick("audit", t0)

    t0 = time.monotonic()
    encoder = HistogramEncoder()
    index = ImageIndex(encoder.name, encoder.dim)
    urls = list(bench.kb_images)
    index.add(encoder.encode([bench.kb_images[u] for u in urls]), urls)
    index.save(out / "bench" / "image_index")
    tick("index_images", t0)

    roles = _roles(llm, model, api_key_env, concurrency)
    t0 = time.monotonic()
    answers = out / "answers"
    answers.mkdir(parents=True, exist_ok=True)
    run_orig = _answer(bench.root, bench.samples, answers / "predictions_original.jsonl", index, kb, roles,
                       concurrency, progress)
    run_fixed = _answer(bench.root, fixed, answers / "predictions_fixed.jsonl", index, kb, roles, concurrency,
                        progress)
    tick("retrieve_and_answer", t0)

    t0 = time.monotonic()
    scores = {"original": _score(answers / "predictions_original.jsonl", bench.samples),
              "fixed": _score(answers / "predictions_fixed.jsonl", fixed)}
    rr = _retrieval_records(answers / "predictions_original.jsonl", answers / "retrieval_original.jsonl")
    from kbvqa.evaluate.retrieval import load_retrieval_records

    records, _ = load_retrieval_records(rr)
    retrieval = retrieval_metrics(records, load_retrieval_references(bench.samples), ks=(1, 3, 5, 10))
    scores["retrieval"] = retrieval
    tick("score", t0)

    t0 = time.monotonic()
    aug_stats, aug_recall = _augment_and_retrieve(fixed, bench.root, out / "augment", index)
    scores["augmentation_recall"] = aug_recall
    tick("augment_and_retrieve", t0)

    t0 = time.monotonic()  # the same answerer on every variant (images relative to the augment folder)
    _answer(out / "augment", out / "augment" / "samples.jsonl", answers / "predictions_augmented.jsonl", index, kb,
            roles, concurrency, progress)
    analyses = demo_analyses(out)
    studies_report = build_report(collect_inputs(out / "studies"), out / "studies", title="kbvqa demo: studies")
    analyses["plots"] = [str(p.relative_to(out)) for p in studies_report.plots]
    tick("seed000_analyses", t0)

    t0 = time.monotonic()
    curation = curate_posts(build_posts(bench), out / "curate", resume=False)
    tick("curation", t0)

    t0 = time.monotonic()
    agent_run, agent_stats, community = _agent(bench, kb, index, out / "agent" / "predictions.jsonl", progress)
    scores["agent"] = agent_stats
    tick("agent", t0)

    t0 = time.monotonic()
    interleaved = _interleaved_evaluation(bench, kb, community, out / "agent" / "predictions.jsonl",
                                          out / "interleaved", progress)
    tick("interleaved_evaluation", t0)

    audited = {r["id"]: r for r in read_results(out / "audit" / "audited.jsonl")}
    predictions = {r["id"]: r for r in read_results(answers / "predictions_original.jsonl")}
    found = sum(1 for sid in bench.flaws if (audited.get(sid, {}).get("audit") or {}).get("action") in ("drop", "repair")
                or (audited.get(sid, {}).get("audit") or {}).get("tags"))
    producer = next((p.get("producer") for p in predictions.values() if p.get("producer")), None)
    scores_path = out / "scores.json"
    without_items = {k: ({kk: vv for kk, vv in v.items() if kk != "items"} if k in ("original", "fixed") else v)
                     for k, v in scores.items()}
    scores_path.write_text(json.dumps(without_items, indent=2), encoding="utf-8")

    t0 = time.monotonic()
    report = _report(out, bench, audit, audited, predictions, scores, found, n_fixed, producer, aug_stats,
                     list(read_results(out / "agent" / "predictions.jsonl")), interleaved, analyses, curation)
    tick("report", t0)

    manifest = out / "manifest.json"
    manifest.write_text(json.dumps({
        "kbvqa_version": __version__, "git": git_info(), "python": platform.python_version(),
        "command": "kbvqa demo", "llm": {"base_url": llm, "model": model} if llm else None,
        "answerer": producer, "image_encoder": encoder.name, "n_samples": bench.n_samples,
        "n_fixed": n_fixed, "planted_flaws": len(bench.flaws), "planted_flaws_flagged": found,
        "runs": {"audit": audit.get("run"), "answer_original": str(run_orig.manifest),
                 "answer_fixed": str(run_fixed.manifest), "agent": str(agent_run.manifest)},
        "community_set": str(community),
        "interleaved": {**{k: v.get("out") if isinstance(v, dict) else None for k, v in interleaved.items()},
                        "ivr12_compare": str(out / "interleaved" / "ivr12.compare.json")},
        "studies": analyses["paths"], "curation": str(out / "curate" / "funnel.json"),
        "timings_s": timings, "wall_seconds": round(time.monotonic() - started, 3),
    }, indent=2), encoding="utf-8")
    kb.close()
    _mark(out, complete=True)
    agent_preds = list(read_results(out / "agent" / "predictions.jsonl"))
    tight = list(read_results(out / "agent" / "budget2.jsonl"))
    return DemoResult(out=out, report=report, manifest=manifest, scores=scores, audit=audit, flaws_found=found,
                      flaws_total=len(bench.flaws), seconds=time.monotonic() - started,
                      agent={"answered": sum(1 for p in agent_preds if p.get("status") == "ok" and p.get("answer")),
                             "forced": sum(bool((p.get("meta") or {}).get("forced_answer")) for p in agent_preds),
                             "budget2": {"n": len(tight), "forced": sum(bool((p.get("meta") or {}).get("forced_answer"))
                                                                         for p in tight)}},
                      interleaved=interleaved, curation=curation.as_dict())


def _rows(t: Any) -> list[dict[str, str]]:
    """A ResultTable's rows as the page's table rows, cells formatted as the table formats them."""
    return [{c: t.fmt(v) for c, v in zip(t.columns, r)} for r in t.rows]


def counts_text(counts: dict[str, Any] | None) -> str:
    """{'a': 2, 'b': 1} as 'a 2, b 1' (for prose; 'none' when empty)."""
    return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in (counts or {}).items()) or "none"


def _analysis_blocks(analyses: dict[str, Any]) -> list[tuple[str, Any]]:
    """Seed 000's analyses on the demo's runs: every table of every study, with its notes."""
    blocks: list[tuple[str, Any]] = [
        ("h2", "Seed 000 analyses: fix kinds, grounded subset, modification rates, variants, buckets"),
        ("note", f"Each study is also saved as {analyses['studies_dir']}/*.study.json "
                 "(kbvqa report build renders them with plots).")]
    for res in analyses["studies"].values():
        for t in study_tables(res):
            blocks.append(("table", Table(_rows(t), list(t.columns), caption=t.caption)))
            blocks += [("note", n) for n in t.notes]
    blocks += [("note", f"{k} skipped: {why}") for k, why in analyses["skipped"].items()]
    if analyses.get("plots"):
        blocks.append(("figures", [Figure(p, Path(p).stem.replace("-", " ")) for p in analyses["plots"]]))
        blocks.append(("note", "All studies with their tables as md/csv/tex: studies/index.html."))
    return blocks


def _curation_blocks(curation: Any) -> list[tuple[str, Any]]:
    """The curation funnel over the demo's community posts (offline: it stops at the first model stage)."""
    return [("h2", "Curation: community posts to benchmark items (seed 001 §3.1)"),
            ("p", "Posts written about the demo's photographs, including ones each filter should drop. Offline, "
                  "the deterministic stages run and posts stop at the first model stage (needs_model); with "
                  "--llm the funnel runs to the end."),
            ("table", Table(curation.rows(), caption=f"funnel (accounted: {curation.accounted})"))]


def _agent_blocks(out: Path, stats: dict[str, Any], preds: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """The search agent's section: how episodes went, then one interleaved answer and its trajectory."""
    import os

    def rel(path: str | None) -> str | None:
        return os.path.relpath(path, out) if path and os.path.isabs(path) else path

    blocks: list[tuple[str, Any]] = [
        ("h2", "Search agent on the community-style set"),
        ("note", f"{stats['n']} community-style questions (NoteVQA layout), answered by the agent's embedded "
                 "baseline policy with the local tools over the KB (a deterministic baseline, not a model). "
                 f"Scorer: {stats['scorer']}."),
        ("table", Table([{"termination": k, "episodes": v} for k, v in stats["terminations"].items()],
                        caption="how episodes ended (forced answers: "
                                f"{sum(bool((p.get('meta') or {}).get('forced_answer')) for p in preds)})")),
        ("table", Table([{"tool": t, "calls per episode": v,
                          "useful-evidence hit rate, all calls (%) [verbatim rule]": percent(
                              (stats["useful_evidence"]["tools"].get(t) or {}).get("rate", "-"), fraction=True)}
                         for t, v in stats["calls_per_episode"].items()])),
        ("p", f"Image tags: {stats['tags']['valid']} of {stats['tags']['total']} valid "
              f"(violations: {stats['tags']['violations'] or 'none'})."),
    ]
    shown = next((p for p in preds if p.get("status") == "ok" and p.get("images")), None)
    if shown is not None:
        resolved = {(r["query"], r["idx"]): rel(r["image"]) for r in shown["meta"]["provenance"]["resolved"]}
        query = next((s["images"][0] for _, s in read_jsonl(out / "bench" / "community.jsonl")
                      if s["id"] == shown["id"] and s["images"]), None)
        blocks.append(("interleaved", Interleaved(shown.get("answer") or "", resolved,
                                                  question=shown["meta"].get("question", ""),
                                                  query_image=f"bench/{query}" if query else None,
                                                  caption=f"{shown['id']}: ended by {shown['meta']['termination']}")))
        blocks.append(("table", _trajectory_table(shown, "its trajectory")))
    tight = list(read_results(out / "agent" / "budget2.jsonl")) if (out / "agent" / "budget2.jsonl").is_file() else []
    if tight:
        blocks.append(("p", "The same agent with --max-turns 2 on three questions: the harness ends the tool phase, "
                            "then the agent gets one last turn with the tools closed and a notice saying why; what it "
                            "answers is the prediction (meta.forced_answer), the cause stays in meta.termination."))
        blocks.append(("table", Table([{"id": p["id"], "termination": (p.get("meta") or {}).get("termination"),
                                        "forced answer": "yes" if (p.get("meta") or {}).get("forced_answer") else "no",
                                        "answer": (p.get("short_answer") or "")[:120]} for p in tight])))
        blocks.append(("table", _trajectory_table(tight[0], f"{tight[0]['id']} under --max-turns 2")))
    return blocks


def _args_text(args: Any) -> str:
    """A tool call's arguments as text (query = "…"), never a Python dict."""
    if isinstance(args, dict):
        parts = [f"{k} = " + ", ".join(json.dumps(x, ensure_ascii=False) for x in (v if isinstance(v, list) else [v]))
                 for k, v in args.items()]
        return "; ".join(parts) or "-"
    return "-" if args is None else str(args)


def _trajectory_table(pred: dict[str, Any], caption: str) -> Table:
    """An episode's steps, with the harness's notices each step's request carried and its forced turn."""
    return Table([{"turn": t["turn"], "tool": t.get("tool") or ("answer" if t.get("answer") else "-"),
                   "arguments": _args_text(t.get("arguments")), "status": t.get("status", ""),
                   "harness notices": "; ".join(n["kind"] for n in t.get("notices") or []) or "-",
                   "forced": "yes" if t.get("forced") else "",
                   "observation": (t.get("observation") or "")[:240]}
                  for t in pred["trajectory"]], caption=caption)


def _count_text(counts: Any) -> str:
    """Counts by reason as a reader reads them ("needs_model 15"), never a Python dict."""
    if isinstance(counts, dict):
        return ", ".join(f"{k} {_count_text(v)}" for k, v in counts.items()) or "-"
    return "-" if counts in (None, "") else str(counts)


def _interleaved_blocks(res: dict[str, Any]) -> list[tuple[str, Any]]:
    """IVR-12 (rules mode) of references vs the agent, and the reference-construction funnel."""
    from kbvqa.report.summaries import ivr12_compare_table

    t = ivr12_compare_table(res["ivr12_compare"])
    funnel = res["reference_funnel"]
    return [
        ("h2", "Interleaved answers: IVR-12 and reference construction"),
        ("note", "IVR-12 in rules mode (no judge model is configured): only the tags gate and, as rule measures "
                 "marked (rule) — kbvqa's stand-ins, not the judged dimensions — non-redundancy, visual quality and "
                 "conciseness are measured; the other dimensions are n/a and need a judge model, so there is no "
                 f"group mean and no overall. Scorer: {res['ivr12_agent']['scorer']}."),
        ("table", Table([dict(zip(t.columns, row)) for row in t.rows], caption=t.caption)),
        *(("note", n) for n in t.notes),
        ("table", Table([{"stage": st.get("stage"), "items in": st.get("in"), "items ok": st.get("ok"),
                          "items stopped": _count_text(st.get("stopped") or st.get("stopped_by")),
                          "drops": _count_text(st.get("drops"))}
                         for st in funnel["stages"]], caption="reference construction over the local tools, offline "
                                                              "(it stops at the first stage that needs a VLM)")),
    ]


def _plot_blocks(out: Path, agent: dict[str, Any], interleaved: dict[str, Any], curation: Any) -> list[tuple[str, Any]]:
    """Seed 001 plotted (the charts `kbvqa report build` draws from the same files): tool calls per
    tool, IVR-12 per dimension for the references vs the agent, the curation funnel."""
    from kbvqa.report.results import agent_tools_plots, funnel_plot, ivr12_plot

    pdir = out / "plots"
    figs = [*agent_tools_plots(agent, pdir, "agent-tools"), ivr12_plot(interleaved["ivr12_compare"], pdir / "ivr12.png"),
            funnel_plot(curation.as_dict(), pdir / "curation-funnel.png")]
    return [("h2", "Seed 001 plotted: tool calls, IVR-12 per dimension, curation funnel"),
            ("note", "Offline there are no judge verdicts, so tool calls are over all episodes (with `kbvqa study "
                     "agent-tools --verdicts`, by judged outcome); IVR-12 is in rules mode (n/a: no score without a "
                     "judge model). `kbvqa report build -i FILE` draws the same charts from the study, IVR-12 and "
                     "funnel files."),
            ("figures", [Figure(str(p.relative_to(out)), cap, plot=True) for p, cap in figs])]


_VARIANT_DIRS = {"method1": "intra (same-kind distractor)", "method2": "inter (different-kind distractor)",
                 "blank": "blank panel", "double": "anchor twice"}


def _pct(x: float | None) -> float | str:
    """A percentage the scorers already give in percent, as a number the page shows with two decimals."""
    return "-" if x is None else float(x)


def _report(out: Path, bench: DemoBench, audit: dict[str, Any], audited: dict[str, dict], predictions: dict[str, dict],
            scores: dict[str, Any], found: int, n_fixed: int, producer: dict | None,
            aug_stats: dict[str, Any], agent_preds: list[dict[str, Any]], interleaved: dict[str, Any],
            analyses: dict[str, Any], curation: Any) -> Path:
    answerer = Provenance.model_validate(producer) if producer else None
    who = f"{answerer.backend}:{answerer.model}" if answerer else "none"
    blocks: list[tuple[str, Any]] = [
        ("p", f"{bench.n_samples} questions about {len(bench.kb_images)} entities, photographs from scikit-image, "
              f"scikit-learn and matplotlib; {len(bench.flaws)} questions carry a planted flaw."),
        ("note", f"Answerer: {who}. Image retrieval: {HistogramEncoder.name} (weight-free baseline). "
                 "Audit: kbvqa rules backend. Scores: InfoSeek strict (official per-item rules, missing = wrong) "
                 "and ARA reward rules."),
        ("h2", "Audit"),
        ("table", Table([{"label": k, "count": v} for k, v in (audit.get("answer_support") or {}).items()],
                        caption="answer_support")),
        ("table", Table([{"action": k, "count": v} for k, v in (audit.get("action") or {}).items()],
                        caption=f"action ({n_fixed} samples kept in the fixed split)")),
        ("p", f"Planted flaws flagged (dropped, repaired or tagged): {found} of {len(bench.flaws)}."),
        ("table", Table([{
            "id": sid, "planted flaw": flaw, "question": audited.get(sid, {}).get("audit", {}).get("question_before"),
            "answer before": audited.get(sid, {}).get("audit", {}).get("answers_before"),
            "support": audited.get(sid, {}).get("audit", {}).get("answer_support"),
            "action": audited.get(sid, {}).get("audit", {}).get("action"),
            "tags": audited.get(sid, {}).get("audit", {}).get("tags"),
            "question after": audited.get(sid, {}).get("question"),
            "answer after": audited.get(sid, {}).get("answers")} for sid, flaw in bench.flaws.items()],
            caption="planted flaws")),
        ("h2", "Accuracy: original vs audited (fixed) benchmark"),
        ("table", Table([{"split": split, "n (questions)": s["strict"].get("n"),
                          "strict accuracy (%)": _pct(s["strict"].get("accuracy")),
                          "strict final, harmonic mean of splits (%)": _pct(s["strict"].get("final_score")),
                          "reward accuracy (%)": _pct(s["reward"].get("accuracy")),
                          "scorers": "infoseek-strict, ara-reward"}
                         for split, s in (("original", scores["original"]), ("fixed", scores["fixed"]))])),
        ("h2", "Retrieval"),
        ("table", Table([{"stage": st, **{f"R{k} (%)": round(100 * v, 2) for k, v in m.get("recall", {}).items()},
                          "MRR": float(m.get("mrr", 0.0))}
                         for st, m in (scores["retrieval"].get("stages") or {}).items()])),
        ("h2", "Augmentation: retrieval on multi-entity composites"),
        ("p", f"{aug_stats.get('augmented_anchors', 0)} anchors of the repaired split augmented "
              f"(excluded: {counts_text(aug_stats.get('exclusions'))}); each variant's image is the query. The anchor "
              "is the original photograph; intra/inter put a same-kind / different-kind distractor beside it, "
              "blank an empty panel, double the anchor twice."),
        ("table", Table(_rows(recall_by_variant_table(scores.get("augmentation_recall", []))))),
        ("figures", [Figure(str(p.relative_to(out)), _VARIANT_DIRS.get(p.parent.name, p.parent.name)) for p in
                     (next(iter(sorted(d.glob("*.jpg"))), None)
                      for d in sorted((out / "augment" / "composites").iterdir())) if p is not None]),
        *_analysis_blocks(analyses),
        *_agent_blocks(out, scores["agent"], agent_preds),
        *_interleaved_blocks(interleaved),
        *_curation_blocks(curation),
        *_plot_blocks(out, scores["agent"], interleaved, curation),
        ("h2", "Items"),
        ("table", Table([{"image": f"bench/{(audited.get(sid) or {}).get('images', [''])[0]}", "id": sid,
                          "question": p.get("meta", {}).get("question"),
                          "gold": (audited.get(sid) or {}).get("audit", {}).get("answers_before"),
                          "prediction": p.get("answer"), "top-1 retrieved": (p.get("retrieved") or ["-"])[0],
                          "correct": scores["original"]["items"].get(sid), "status": p.get("status")}
                         for sid, p in sorted(predictions.items())], images={"image": "img"})),
        ("figures", [Figure(f"bench/images/kb_{p.stem[3:]}.jpg", p.stem[3:]) for p in
                     sorted((bench.root / "images").glob("kb_*.jpg"))]),
    ]
    return write_page(out / "report.html", "kbvqa demo", blocks)
