"""Image-to-image KB retrieval as a stage: writes the ranked, entity-deduplicated article urls.

The record gains `retrieved` (ranked canonical urls) and `retrieval` (scores, encoder name), which is
the retrieval-record shape the Recall@K scorer reads ({id, retrieved, stage}).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kbvqa.kb.image_index import ImageIndex
from kbvqa.models.image_encoders import ImageEncoder
from kbvqa.stages.base import Context, Stage, StageConfig


class RetrieveConfig(StageConfig):
    k: int = 20


class ImageRetrieve(Stage):
    name = "retrieve-image"
    version = "1"
    config_model = RetrieveConfig

    def __init__(self, index: ImageIndex, encoder: ImageEncoder, image_root: Path | None = None,
                 config: RetrieveConfig | None = None):
        super().__init__(config)
        if index.encoder != encoder.name:
            raise ValueError(f"index was built with {index.encoder!r} but the encoder is {encoder.name!r}")
        self.index, self.encoder, self.image_root = index, encoder, image_root

    def _path(self, image: str) -> Path:
        p = Path(image)
        return p if p.is_absolute() or self.image_root is None else self.image_root / p

    async def run(self, record: dict[str, Any], ctx: Context) -> dict[str, Any]:
        images = record.get("images") or []
        if not images:
            raise ValueError(f"sample {record.get('id')!r} has no image to retrieve with")
        path = self._path(images[0])
        if not path.exists():
            raise FileNotFoundError(f"image not found: {path}")
        vec = await asyncio.to_thread(self.encoder.encode, [path])
        ranked = self.index.search(vec, k=self.config.k)[0]
        return {**record, "retrieved": [u for u, _ in ranked],
                "retrieval": {"stage": "initial", "encoder": self.encoder.name,
                              "scores": [round(s, 6) for _, s in ranked]}}
