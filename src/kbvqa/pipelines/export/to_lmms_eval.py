"""`kbvqa export lmms-eval`: the benchmark as an lmms-eval task folder, loadable with
`lmms-eval --include_path DIR --tasks <task>`.

lmms-eval is not installed here (it pulls a CUDA torch), so the folder is built from its own source's
field names (EvolvingLMMs-Lab/lmms-eval @75571cf): the YAML keys of `lmms_eval/tasks/browsecomp/
_default_template_yaml` and `tasks/simplevqa/_default_template_simplevqa_yaml` (`dataset_path` +
`dataset_kwargs.data_files` for local files, `test_split`, `output_type: generate_until`,
`doc_to_visual`/`doc_to_text`/`doc_to_target`/`process_results` as `!function utils.<name>`,
`metric_list[].aggregation`, `lmms_eval_specific_kwargs.default.pre_prompt/post_prompt`), and the
signatures of `tasks/simplevqa/utils.py` (`doc_to_visual(doc) -> [PIL.Image]`,
`doc_to_text(doc, lmms_eval_specific_kwargs=None)`, `process_results(doc, results) -> {metric: value}`).

The documents are a flat JSONL (docs.jsonl: id, question, images, answers, split, question_type; one
type per column, so the `json` builder of `datasets` reads it); the scorer reads samples.jsonl with
kbvqa's own reference loader. `data_files` is an absolute path (the `datasets` library resolves a
relative one against the working directory, not the YAML): re-export after moving the folder.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from kbvqa.evaluate.io import kbvqa_alternatives
from kbvqa.pipelines.export.common import Exported, copy_harness_file, write_settings

__all__ = ["write_lmms_eval", "DOCS_FILE"]

DOCS_FILE = "docs.jsonl"


def task_name(name: str) -> str:
    """An lmms-eval task name: lower case, [a-z0-9_]."""
    return "kbvqa_" + (re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_") or "benchmark")


def _yaml(task: str, exp: Exported) -> str:
    metrics = [("kbvqa_accuracy", "kbvqa_aggregate_accuracy", True), ("kbvqa_unscored", "kbvqa_aggregate_count", False)]
    if exp.scorer == "judge":  # graded after the run by kbvqa (the module docstring of utils.py)
        metrics = [("kbvqa_answered", "kbvqa_aggregate_answered", True)]
    if exp.scorer == "infoseek":
        metrics.append(("kbvqa_infoseek_final", "kbvqa_aggregate_infoseek_final", True))
    lines = [
        f"# kbvqa export of {exp.source.name} ({len(exp.samples)} samples; scorer: {exp.scorer}).",
        "# Keys as in lmms-eval's lmms_eval/tasks/browsecomp/_default_template_yaml (@75571cf).",
        f"task: {task}",
        "dataset_path: json",
        "dataset_kwargs:",
        "  data_files:",
        f"    test: {json.dumps(str(exp.out / DOCS_FILE))}",
        "test_split: test",
        "output_type: generate_until",
        "doc_to_visual: !function utils.kbvqa_doc_to_visual",
        "doc_to_text: !function utils.kbvqa_doc_to_text",
        "doc_to_target: !function utils.kbvqa_doc_to_target",
        "process_results: !function utils.kbvqa_process_results",
        "generation_kwargs:",
        "  max_new_tokens: 256",
        "  temperature: 0",
        "  do_sample: false",
        "metric_list:",
    ]
    for metric, agg, higher in metrics:
        lines += [f"  - metric: {metric}", f"    aggregation: !function utils.{agg}",
                  f"    higher_is_better: {'true' if higher else 'false'}"]
    lines += ["lmms_eval_specific_kwargs:", "  default:", '    pre_prompt: ""', '    post_prompt: ""',
              "metadata:", "  version: 0.0", f"  kbvqa_scorer: {exp.scorer}"]
    return "\n".join(lines) + "\n"


def write_lmms_eval(exp: Exported, name: str) -> list[Path]:
    """Write DIR/<task>.yaml, DIR/utils.py, DIR/docs.jsonl and DIR/kbvqa_export.json."""
    task = task_name(name)
    docs = exp.out / DOCS_FILE
    with docs.open("w", encoding="utf-8") as fh:
        for s in exp.samples:
            fh.write(json.dumps({
                "id": s.id, "question": s.question, "images": exp.images.get(s.id, []),
                "answers": kbvqa_alternatives([a.model_dump(exclude_none=True) for a in s.answers], docs, 0),
                "split": s.split or "", "question_type": s.question_type or s.answer_type or ""},
                ensure_ascii=False) + "\n")
    yaml = exp.out / f"{task}.yaml"
    yaml.write_text(_yaml(task, exp), encoding="utf-8")
    settings = write_settings(exp, "lmms-eval", name=name, task=task, docs=DOCS_FILE,
                              run=f"lmms-eval --include_path {exp.out} --tasks {task} --model <model> "
                                  "--log_samples --output_path <logs>")
    return [yaml, copy_harness_file("_lmms_utils.py", exp.out / "utils.py"), docs, settings]
