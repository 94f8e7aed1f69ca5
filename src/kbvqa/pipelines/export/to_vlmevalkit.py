"""`kbvqa export vlmevalkit`: the benchmark as the TSV VLMEvalKit wraps as a custom VQA dataset.

VLMEvalKit (open-compass/VLMEvalKit @e8e78f0) builds an unknown `--data NAME` from `$LMUData/NAME.tsv`
(`vlmeval/dataset/__init__.py`, `build_dataset`): a `question` column and no `A`/`B` columns make it a
`CustomVQADataset` (`vlmeval/dataset/image_vqa.py`), whose rows need `index`, `image` (base64; a list
for several images: `image_base.py` reads it with `toliststr`), `question` and `answer`. It has no
scorer for such a set (`evaluate` raises NotImplementedError): run `--mode infer`, then bring its
`{model}_{NAME}.xlsx` back with `kbvqa score convert-predictions --method vlmevalkit -r samples.jsonl`.

`index` is the kbvqa id when every id is a plain name (VLMEvalKit saves images as `{index}.png`) that
an int() would not change, else the 0-based row number in samples.jsonl; `kbvqa_id` always carries the id, `answers` every accepted
answer (JSON), `answer` the first one.
"""

from __future__ import annotations

import base64
import csv
import json
import re
from pathlib import Path

from kbvqa.evaluate.io import kbvqa_alternatives
from kbvqa.pipelines.export.common import Exported, write_settings

__all__ = ["write_vlmevalkit", "COLUMNS", "tsv_name"]

COLUMNS = ("index", "image", "question", "answer", "kbvqa_id", "answers", "split", "question_type")
_PLAIN_ID = re.compile(r"[A-Za-z0-9._-]+")


def tsv_name(name: str) -> str:
    """A dataset name VLMEvalKit takes as custom (no 'video'/'image' word, which would set a modality)."""
    out = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_") or "benchmark"
    return "KBVQA_" + re.sub(r"(?i)video|image", "x", out)


def write_vlmevalkit(exp: Exported, name: str) -> list[Path]:
    """Write DIR/<NAME>.tsv (images inlined as base64) and DIR/kbvqa_export.json."""
    data = tsv_name(name)
    # VLMEvalKit turns an all-digit index column into ints: "007" would come back as 7
    plain = all(_PLAIN_ID.fullmatch(s.id) and (not s.id.isdigit() or str(int(s.id)) == s.id) for s in exp.samples)
    path = exp.out / f"{data}.tsv"
    csv.field_size_limit(1 << 30)
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, delimiter="\t", lineterminator="\n")
        w.writerow(COLUMNS)
        for row, s in enumerate(exp.samples):
            b64 = [base64.b64encode(f.read_bytes()).decode("ascii") for f in exp.image_files(s.id)]
            image = b64[0] if len(b64) == 1 else (json.dumps(b64) if b64 else "")
            answers = kbvqa_alternatives([a.model_dump(exclude_none=True) for a in s.answers], path, row + 1)
            w.writerow([s.id if plain else row, image, s.question, answers[0] if answers else "", s.id,
                        json.dumps(answers, ensure_ascii=False), s.split or "", s.question_type or s.answer_type or ""])
    settings = write_settings(exp, "vlmevalkit", name=name, data=data, tsv=path.name,
                              index="kbvqa id" if plain else "row number in samples.jsonl (0-based)",
                              run=f"LMUData={exp.out} python run.py --data {data} --model <model> --mode infer")
    return [path, settings]
