"""The augmentation study end to end: retrieve with every variant's image, then Recall@K per variant.

`kbvqa study augmentation-recall` either tabulates retrieval records already made or, given the
augmented samples and an image index, retrieves them first through the retrieval job (runner:
per-sample status, manifest) and then tabulates (kbvqa.evaluate.augmentation).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Sequence

from kbvqa.evaluate.augmentation import DEFAULT_KS, augmentation_recall_study

__all__ = ["augmentation_recall"]


def augmentation_recall(*, records: Sequence[Path] = (), samples: Path | None = None, index: Path | None = None,
                        references: Path | None = None, model_dir: Path | None = None,
                        ks: Sequence[int] = DEFAULT_KS, stage: str = "initial",
                        records_out: Path | None = None) -> list[dict[str, Any]]:
    """Rows of the augmentation study. Either `records` (retrieval records already made) or
    `samples` + `index` (retrieve here, image paths relative to the samples file; the records are
    kept at `records_out` when given, a fresh run each time). Gold urls come from `references`,
    by default the samples. K = 1, 3, 5, 10, 20 by default; an expected item without a record is a miss."""
    if bool(records) == bool(samples and index):
        raise ValueError("give either --samples with --index (retrieve here) or --records (already retrieved)")
    ref_path = references or samples
    if ref_path is None:
        raise ValueError("--records needs --references (gold urls: kbvqa JSONL, or CSV with wikipedia_url)")
    if records:
        return augmentation_recall_study(records, ref_path, ks=ks, stage=stage)
    from kbvqa.pipelines.retrieve import retrieve_file

    with tempfile.TemporaryDirectory(prefix="kbvqa-aug-recall-") as tmp:
        out = records_out or Path(tmp) / "records.jsonl"
        run = retrieve_file(samples, index, out=out, model_dir=model_dir, k=max(ks), resume=False)  # type: ignore[arg-type]
        return augmentation_recall_study([run.out], ref_path, ks=ks, stage=stage)
