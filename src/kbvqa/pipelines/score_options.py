"""The options of the judge jobs: `kbvqa score judge` (`JudgeOptions`, also `kbvqa eval`'s judge half),
`kbvqa score evqa` (`EvqaOptions`: its LLM fallback is a judge job), `kbvqa score ivr12` (`IVR12Options`)
and `kbvqa study agent-failures` (`AgentFailureOptions`).

Each is one object (kbvqa.runner.options.JobOptions): the class defaults, under the command's table of
`--config`, under the flags given; the judge stage gets `opts.stage` as it is and the manifest records
`opts.used()`. The files a run reads and writes (predictions, references, journal) are the pipeline
function's arguments, not options, so `JudgeOptions` can sit inside `kbvqa eval`'s options unchanged.
This module is apart from kbvqa.pipelines.score so `kbvqa score infoseek` starts without the runner.

    [score.judge]              # [score.ivr12], [study.agent-failures] alike
    concurrency = 8
    graded_text = "short"
    [score.judge.models]       # which model judges, and its call limits
    role = "judge"
    timeout = 60
    [score.judge.stage]        # the judge stage's own config (kbvqa.evaluate.judge.JudgeConfig)
    temperature = 0.0
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal, Mapping, TypeVar

from pydantic import Field, model_validator

from kbvqa.evaluate.agent import FailureConfig
from kbvqa.evaluate.agent_evidence import EvidenceConfig
from kbvqa.evaluate.ivr12 import SOURCES, IVR12Config
from kbvqa.evaluate.judge import JUDGE_CONCURRENCY, JudgeConfig
from kbvqa.runner.options import CallLimits, JobOptions, read_table

__all__ = ["AgentFailureOptions", "AgentToolsOptions", "EvqaOptions", "GradedText", "IVR12Judges", "IVR12Options",
           "JudgeModel", "JudgeOptions", "from_config"]

O = TypeVar("O", bound=JobOptions)

GradedText = Literal["full", "short"]

#: --judge-* flag -> the field it sets under `models` (a judge's model flags are spelt apart from `--model`,
#: which is the answering model's in `kbvqa eval`)
_JUDGE_FLAGS = {"judge_role": "role", "judge_base_url": "base_url", "judge_model": "model", "judge_replay": "replay"}


class JudgeModel(CallLimits):
    """Which model judges: a role of --config (or of KBVQA_<ROLE>_* variables; role None is 'judge'),
    or the direct flags (base_url + model, or a replay cassette) — never both, so it is always clear
    which model judged (kbvqa.pipelines.score.judge_client). The call limits apply to it."""

    role: str | None = None
    base_url: str | None = None
    model: str | None = None
    replay: Path | None = None


class _JudgeJob(JobOptions):
    """What every judge job shares: the judge, how many calls at once, resume."""

    SECTION: ClassVar[str]
    config: Path | None = None  # kbvqa.toml: the judge's [models.<role>] and this job's table
    models: JudgeModel = Field(default_factory=JudgeModel)
    concurrency: int = Field(JUDGE_CONCURRENCY, ge=1)  # records and judge requests in flight
    resume: bool = True  # keep the journal's verdicts; re-send failed and unusable calls

    ALIASES: ClassVar[Mapping[str, tuple[str, ...]]] = {k: (f"models.{v}",) for k, v in _JUDGE_FLAGS.items()}


class JudgeOptions(_JudgeJob):
    """`kbvqa score judge`: SimpleQA-style grading of the whole answer (or its short answer)."""

    SECTION: ClassVar[str] = "score.judge"
    graded_text: GradedText = "full"  # full: the whole answer, image tags removed; short: its first sentence
    stage: JudgeConfig = Field(default_factory=JudgeConfig)


def _semantic_threshold() -> float:
    """The semantic backend's own default (kbvqa.evaluate.semantic.DEFAULT_THRESHOLD, where the choice
    is explained), read when an options object is built: that module loads numpy."""
    from kbvqa.evaluate.semantic import DEFAULT_THRESHOLD

    return DEFAULT_THRESHOLD


class EvqaOptions(_JudgeJob):
    """`kbvqa score evqa` (and `kbvqa eval`'s evqa / evqa-semantic metrics): exact match, then at most one
    equivalence backend on its failures — BEM (`bem_dir`), the LLM judge (`models`; a runner job with
    `stage` as its config) or the semantic stand-in (`semantic`, `semantic_threshold`)."""

    SECTION: ClassVar[str] = "score.evqa"
    bem_dir: Path | None = None  # a local BEM model folder (kbvqa.evaluate.evqa.load_bem)
    semantic: bool = False  # the semantic-approx fallback (MiniLM cosine, not BEM)
    semantic_threshold: float = Field(default_factory=_semantic_threshold, gt=0, le=1)
    semantic_model_dir: Path | None = None  # a local sentence-transformers model (default: MiniLM)
    stage: JudgeConfig = Field(default_factory=JudgeConfig)  # the LLM judge's stage config

    ALIASES: ClassVar[Mapping[str, tuple[str, ...]]] = {**_JudgeJob.ALIASES, "judge_concurrency": ("concurrency",)}
    FLAGS: ClassVar[Mapping[str, str]] = {"concurrency": "--judge-concurrency"}


class AgentFailureOptions(_JudgeJob):
    """`kbvqa study agent-failures`: the judge's failure category of every non-correct episode."""

    SECTION: ClassVar[str] = "study.agent-failures"
    stage: FailureConfig = Field(default_factory=FailureConfig)


class AgentToolsOptions(_JudgeJob):
    """`kbvqa study agent-tools`: the useful-evidence judge of every search / visit call that returned text
    (kbvqa.evaluate.agent_evidence); naming no judge is the offline rule measure."""

    SECTION: ClassVar[str] = "study.agent-tools"
    stage: EvidenceConfig = Field(default_factory=EvidenceConfig)


class IVR12Judges(CallLimits):
    """IVR-12's judges: roles of --config (each may list several models), or several models on one
    base_url, or a replay cassette; none at all is rules mode (kbvqa.pipelines.score.judge_clients)."""

    roles: tuple[str, ...] = ()
    base_url: str | None = None
    models: tuple[str, ...] = ()
    replay: Path | None = None


class IVR12Options(JobOptions):
    """`kbvqa score ivr12`: the rubric judge over interleaved answers. The stage's temperature defaults
    to REPEATS_TEMPERATURE when it is called several times per group (repeats at temperature 0 would
    only measure server nondeterminism) — kbvqa's choice; seed 001 gives none."""

    SECTION: ClassVar[str] = "score.ivr12"
    REPEATS_TEMPERATURE: ClassVar[float] = 0.7

    config: Path | None = None
    judges: IVR12Judges = Field(default_factory=IVR12Judges)
    # what --predictions holds (auto: NoteVQA lines with a `reference` are references); --source on the command line
    input_kind: Literal[SOURCES] = "auto"  # type: ignore[valid-type]
    image_root: Path | None = None  # the samples' image folder (None: the samples file's folder)
    concurrency: int = Field(JUDGE_CONCURRENCY, ge=1)
    resume: bool = True
    require_complete: bool = False  # exit 1 when an item ended invalid or error
    stage: IVR12Config = Field(default_factory=IVR12Config)

    ALIASES: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "judge_role": ("judges.roles",), "judge_base_url": ("judges.base_url",),
        "judge_model": ("judges.models",), "judge_replay": ("judges.replay",)}
    FLAGS: ClassVar[Mapping[str, str]] = {"input_kind": "--source"}

    @model_validator(mode="before")
    @classmethod
    def _repeats_temperature(cls, data: Any) -> Any:
        """Several repeats without a temperature set: REPEATS_TEMPERATURE (one value, written here)."""
        if not isinstance(data, dict) or not isinstance(data.get("stage"), dict):
            return data
        stage = data["stage"]
        repeats = stage.get("repeats")
        if "temperature" not in stage and isinstance(repeats, int) and repeats > 1:
            data = {**data, "stage": {**stage, "temperature": cls.REPEATS_TEMPERATURE}}
        return data


def from_config(cls: type[O], **flags: Any) -> O:
    """A judge job's options as its command builds them, once: the class defaults, under the job's table
    (`cls.SECTION`) of the `--config` file (the `config` flag), under the flags given."""
    config = flags.get("config")
    return cls.build(read_table(config, cls.SECTION), source=None if config is None else str(config), **flags)
