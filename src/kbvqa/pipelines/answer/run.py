"""One answer run from its options: what `kbvqa answer` and `kbvqa eval` both run.

`prepare_answer` builds the Job from the run's AnswerOptions the way every answer command must —
roles from --llm/--model/--config, the image index and its encoder, the KB — and `run_answer` runs it
and writes the Recall@K records beside the predictions. One place, so the two commands cannot drift
apart; the options object is handed down as it is and recorded in the manifest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kbvqa.pipelines.answer.options import AnswerOptions

__all__ = ["AnswerOptions", "PreparedAnswer", "prepare_answer", "run_answer"]


@dataclass
class PreparedAnswer:
    """An answer Job built and ready to run, the roles it uses and the notes for stderr."""

    job: Any
    roles: dict[str, Any]
    notes: list[str]


def prepare_answer(opts: AnswerOptions) -> PreparedAnswer:
    """Build the answer Job as `kbvqa answer` does: roles from --llm/--model/--config, the image index
    and its encoder, the KB (every preset but `direct` reads one)."""
    from kbvqa.kb.store import open_kb
    from kbvqa.kb.text_index import TextIndex
    from kbvqa.pipelines.answer import build_answer_job, pipeline_roles
    from kbvqa.pipelines.index import load_image_index

    if opts.samples is None:
        raise ValueError("an answer run needs its samples (--samples)")
    if opts.kb is None and opts.pipeline != "direct":
        raise ValueError(f"--pipeline {opts.pipeline} reads a KB: give --kb")
    roles = opts.models.roles(opts.config, fill=pipeline_roles(opts.pipeline, opts.reranker),
                              concurrency=opts.run.concurrency)
    idx, enc = load_image_index(opts.index, opts.model_dir) if opts.index is not None else (None, None)
    job = build_answer_job(kb=open_kb(opts.kb) if opts.kb is not None else None, roles=roles, index=idx, encoder=enc,
                           # absolute in the driver: a Ray worker never reads a path against its own folder
                           image_root=Path(opts.images or opts.samples.parent).resolve(),
                           text_index=TextIndex.load(opts.text_index) if opts.text_index is not None else None,
                           options=opts)
    notes = []
    if opts.pipeline != "extractive" and job.stage_names[-1] == "answer-extractive":
        notes.append("note: no `answerer` role configured (--llm/--model or --config), so the embedded "
                     "extractive answerer answers; predictions name it as their producer")
    return PreparedAnswer(job, dict(roles), notes)


def run_answer(prepared: PreparedAnswer, opts: AnswerOptions, out: Path, *,
               progress: bool = False) -> tuple[Any, Path]:
    """Run the answer Job over the samples into `out` (resume, manifest) and write its Recall@K
    records to `<out>.retrieval.jsonl` (runner.lock.side_path), as `kbvqa answer` does. Returns
    (RunSummary, records)."""
    from kbvqa.data.formats import SampleRecords
    from kbvqa.pipelines.answer import write_retrieval_records

    from kbvqa.runner.lock import OutputLock, side_path

    assert opts.samples is not None  # prepare_answer refused a run without samples
    run = opts.run
    with OutputLock(out, lend=True):  # the retrieval records are a side file: written under the same lock
        summary = prepared.job.run(SampleRecords(opts.samples, opts.fmt, allow_empty=run.allow_empty), out=out,
                                   concurrency=run.concurrency, limit=run.limit, progress=progress,
                                   resume=run.resume,
                                   # absolute: the viewer finds the references beside an episode from anywhere
                                   run_config={"index": str(opts.index) if opts.index else None,
                                               "samples": str(Path(opts.samples).resolve())})
        return summary, write_retrieval_records(out, side_path(out, ".retrieval.jsonl"))
