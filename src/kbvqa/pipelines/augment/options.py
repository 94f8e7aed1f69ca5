"""`kbvqa augment`'s options: every setting of an augmentation run in one typed object.

Why one object: the seed of the released ARA files (3185), the panel height, the variants and the
rest were written in the typer flags, in a config dataclass and in the composite style, each with its
own copy of the default. `AugmentOptions` is now the only place they are written; the command builds
it once (class defaults < the `[augment]` table of `--config` < the flags, kbvqa.runner.options),
the type tagger receives `opts.tagging` and every composite worker `opts.composite` as they are, and
stats.json records `opts.used()`.

This module stays light (no Pillow, no numpy): the command line reads the defaults from it to write
its --help.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kbvqa.runner.options import JobOptions
from kbvqa.stages.augment.types import TagTypesConfig

__all__ = ["ALL_VARIANTS", "RESAMPLE", "AugmentOptions", "Style", "check_resample", "parse_colour"]

Variant = Literal["intra", "inter", "blank", "double"]
ALL_VARIANTS: tuple[str, ...] = get_args(Variant)
#: Panel resizers (kbvqa.pipelines.augment.composite.resize_panel): fast = OpenCV, lanczos = the authors' Pillow;
#: the first is the default.
RESAMPLE = ("fast", "lanczos")


def check_resample(mode: str) -> str:
    if mode not in RESAMPLE:
        raise ValueError(f"unknown resample {mode!r} (one of: {', '.join(RESAMPLE)})")
    return mode


def parse_colour(value: Any) -> tuple[int, int, int]:
    """An RGB colour from `RRGGBB` (`#` optional), `R,G,B`, or three integers 0-255."""
    if isinstance(value, str):
        t = value.strip().lstrip("#")
        if len(t) == 6 and all(c in "0123456789abcdefABCDEF" for c in t):
            return int(t[0:2], 16), int(t[2:4], 16), int(t[4:6], 16)
        parts = [p for p in value.replace(" ", "").split(",") if p]
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            value = [int(p) for p in parts]
    if (isinstance(value, (list, tuple)) and len(value) == 3
            and all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 256 for c in value)):
        return int(value[0]), int(value[1]), int(value[2])
    raise ValueError(f"colour {value!r}: use RRGGBB or R,G,B (0-255 each)")


class Style(BaseModel):
    """How a composite looks: panel height (aspect kept), gaps, colours, file format and resizer.
    Frozen, so one instance is shared by every task of a run (and pickled to the workers)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    height: int = Field(512, ge=8)
    gap: int = Field(0, ge=0)
    background: tuple[int, int, int] = (0, 0, 0)
    blank_colour: tuple[int, int, int] = (255, 255, 255)
    fmt: Literal["jpg", "png"] = "jpg"
    quality: int = Field(95, ge=1, le=100)  # JPEG quality
    #: fast: OpenCV (bicubic up; a Lanczos low-pass + bicubic down to 4x, within ~1/255 of Pillow's LANCZOS);
    #: lanczos: Pillow's LANCZOS both ways, exactly as the authors' script
    resample: str = RESAMPLE[0]

    @field_validator("background", "blank_colour", mode="before")
    @classmethod
    def _colour(cls, value: Any) -> tuple[int, int, int]:
        return parse_colour(value)

    @field_validator("resample")
    @classmethod
    def _resampler(cls, value: str) -> str:
        return check_resample(value)


class AugmentOptions(JobOptions):
    """Every setting of `kbvqa augment` (seed 000 §5) and its only default. Where the paper is silent
    (panel height, k, the layout, the resizer, the type vocabulary's use), the default is kbvqa's; the
    seed and the inter-query wording reproduce the authors' released files."""

    #: --image-format sets the composite's file format (`composite.fmt`)
    ALIASES = {"image_format": ("composite.fmt",)}
    FLAGS = {"input_format": "--from", "composite.fmt": "--image-format"}

    config: Path | None = None  # the config file whose [augment] table was read
    input_format: str | None = None  # the input's format (kbvqa.data.formats); None: detected from the file
    allow_empty: bool = False  # an input with no samples is an error otherwise
    variants: tuple[Variant, ...] = Field(ALL_VARIANTS, min_length=1)
    seed: int = 3185  # the seed of the released ARA files
    num_samples: int | None = Field(None, ge=1)  # anchors drawn, balanced across types; None: every eligible one
    min_entities: int = Field(4, ge=2)  # a type with fewer distinct entities gives no anchors or distractors
    k: int = Field(1, ge=1)  # distractors per composite
    layout: Literal["row", "grid"] = "row"
    #: the inter query with the spatial cue (the authors' release) instead of unchanged (the paper)
    with_position: bool = False
    #: the inter query as the anchor question made explicit (pronouns -> "this <type>") instead of unchanged
    inter_explicit: bool = False
    #: an anchor whose intra or inter variant fails loses the other too (the paper compares both splits on the
    #: same anchors, §5.2); off: each variant stands alone
    paired_exclusion: bool = True
    #: the hardest same-type distractor by image similarity (the histogram baseline encoder) instead of at random
    similar: bool = False
    families: dict[str, str] | None = None  # type -> family; inter distractors come from another family
    forced_pairs: dict[str, str] | None = None  # anchor url -> intra distractor url
    #: canonical url -> type, the KB-category fallback of the type tagger: a JSON file or the map itself
    url_types: Path | dict[str, str] | None = None
    workers: int | None = Field(None, ge=1)  # composite processes; None: the CPU count
    concurrency: int = Field(8, ge=1)  # samples in flight in the type tagger (its model requests)
    tagging: TagTypesConfig = Field(default_factory=TagTypesConfig)  # the augment-entity-type stage
    composite: Style = Field(default_factory=Style)  # every composite of the run

    def url_type_map(self) -> dict[str, str] | None:
        """`url_types` as a map (a file is read here; a bad file is a ValueError naming it)."""
        import json

        if self.url_types is None or isinstance(self.url_types, dict):
            return self.url_types
        try:
            got = json.loads(Path(self.url_types).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{self.flag_for('url_types')} {self.url_types}: {exc}") from None
        if not isinstance(got, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in got.items()):
            raise ValueError(f"{self.flag_for('url_types')} {self.url_types}: must be a JSON object {{url: type}}")
        return got
