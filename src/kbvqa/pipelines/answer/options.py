"""`AnswerOptions`: every setting of one answer run (`kbvqa answer`, and `kbvqa eval`'s answer half).

One object, built once by `AnswerOptions.build` — the class defaults, under `[answer]` of `--config`
(and `[tools.web]` for the web backend), under the flags given — and handed down unchanged: the RAG
presets give each stage its own config from it (`opts.retrieve`, `opts.rerank`, ...), the agent gets
`opts.agent.episode`, the direct pipeline `opts.direct`; the manifest records `used()`.

Two defaults are derived, each from one written value: a preset's own default (IBA fuses with alpha
0.3, written in its PIPELINES entry) replaces a stage default the user did not set, and the LLM
answerer reads as many sections as the reranker keeps unless `generate.sections` is set.

    [answer]
    concurrency = 8          # [answer.run] also works; flags win over the file
    [answer.rerank]
    sections = 3
    [answer.agent.episode]
    max_turns = 8
    max_reply_tokens = 1024
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kbvqa.runner.options import JobOptions, ModelFlags, OptionsError, RunOptions, read_table
from kbvqa.stages.agent.react import AgentConfig
from kbvqa.stages.answer.direct import DirectConfig
from kbvqa.stages.answer.extractive import ExtractiveConfig
from kbvqa.stages.answer.generate import GenerateConfig
from kbvqa.stages.answer.identify import IdentifyConfig
from kbvqa.stages.answer.rerank import RerankConfig
from kbvqa.stages.answer.retrieve import RetrieveConfig
from kbvqa.tools.config import WebToolsConfig

__all__ = ["AgentOptions", "AnswerOptions", "AnswerRun", "answer_options"]

#: the option groups an answer preset may take (its PIPELINES entry's `options`); a flag under a group the
#: chosen preset does not take is refused, never ignored
GROUPS = ("retrieve", "identify", "rerank", "generate", "extractive", "answerer", "agent", "direct")


class AgentOptions(BaseModel):
    """The search agent's settings: its tool backend and the episode config its stage runs with."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tools: str = "local"  # a TOOL_BACKENDS name (local: the KB, offline; web: a search API) or replay
    cassette: Path | None = None  # replay: the cassette folder to read
    kb_images: Path | None = None  # the folder holding the KB's images (image results need files)
    kb_image_rule: str = "auto"  # how a KB image URL maps to a file under kb_images (pipelines.index)
    blocked_domains: tuple[str, ...] = ()  # leakage guard: results on these domains are dropped
    web: WebToolsConfig = Field(default_factory=WebToolsConfig)  # --tools web (unset fields: WebTools' own)
    episode: AgentConfig = Field(default_factory=AgentConfig)

    def web_settings(self) -> dict[str, Any]:
        """The WebTools keywords this run sets (unset fields keep WebTools' own defaults)."""
        return self.web.model_dump(exclude_none=True)

    @field_validator("kb_images")
    @classmethod
    def _existing_folder(cls, v: Path | None) -> Path | None:
        """A misspelt folder would make every image result `empty`, a run that looks fine: refused."""
        if v is not None and not Path(v).is_dir():
            raise ValueError(f"{v}: no such folder (the folder the KB's image paths start from)")
        return v

    @field_validator("tools")
    @classmethod
    def _known_backend(cls, v: str) -> str:
        from kbvqa.tools import TOOL_BACKENDS

        names = [*TOOL_BACKENDS.names(), "replay"]
        if v not in names:
            raise ValueError(f"unknown tool backend {v!r} (choose from {', '.join(names)})")
        return v


class AnswerRun(RunOptions):
    concurrency: int = Field(4, ge=1)


class AnswerOptions(JobOptions):
    """One answer run's settings. Paths are the inputs as given (None for a library caller that hands
    the objects to `build_answer_job` itself)."""

    pipeline: str = "extractive"
    samples: Path | None = None
    fmt: str | None = None  # the samples' format (default: detected)
    images: Path | None = None  # folder the samples' images are relative to (default: the samples' folder)
    kb: Path | None = None
    index: Path | None = None  # image index (`kbvqa index images`)
    model_dir: Path | None = None  # the image encoder's local model folder
    reranker: str = "bm25"  # a RERANKERS name
    rerank_model_dir: Path | None = None
    text_index: Path | None = None
    config: Path | None = None  # kbvqa.toml: [models.*] roles, [answer], [tools.web]
    answerer: Literal["auto", "llm", "extractive"] = "auto"
    retrieve: RetrieveConfig = Field(default_factory=RetrieveConfig)
    identify: IdentifyConfig = Field(default_factory=IdentifyConfig)
    rerank: RerankConfig = Field(default_factory=RerankConfig)
    generate: GenerateConfig = Field(default_factory=GenerateConfig)
    extractive: ExtractiveConfig = Field(default_factory=lambda: ExtractiveConfig(top_articles=2))
    agent: AgentOptions = Field(default_factory=AgentOptions)
    direct: DirectConfig = Field(default_factory=DirectConfig)
    models: ModelFlags = Field(default_factory=ModelFlags)
    run: AnswerRun = Field(default_factory=AnswerRun)

    ALIASES: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "sections": ("rerank.sections",), "concurrency": ("run.concurrency",), "timeout": ("models.timeout",),
        "api_key_env": ("models.api_key_env",), "blocked_domain": ("agent.blocked_domains",),
        "web_provider": ("agent.web.provider",), "web_base_url": ("agent.web.base_url",),
        "web_api_key_env": ("agent.web.api_key_env",)}
    FLAGS: ClassVar[Mapping[str, str]] = {"fmt": "--format"}

    @model_validator(mode="before")
    @classmethod
    def _derived_defaults(cls, data: Any) -> Any:
        """A preset's own stage defaults where the user set none; the answerer's sections from the reranker's."""
        if not isinstance(data, dict):
            return data
        from kbvqa.pipelines import PIPELINES

        data = dict(data)
        pipeline = data.get("pipeline", "extractive")
        if pipeline in PIPELINES.names():
            for path, value in PIPELINES.entry(pipeline).info.get("defaults", {}).items():
                group, key = path.split(".")
                table = dict(data.get(group) or {})
                table.setdefault(key, value)
                data[group] = table
        rerank = data.get("rerank") or {}
        generate = dict(data.get("generate") or {})
        if isinstance(rerank, dict) and isinstance(generate, dict) and "sections" not in generate:
            generate["sections"] = rerank.get("sections", RerankConfig.model_fields["sections"].default)
            data["generate"] = generate
        return data

    @field_validator("index")
    @classmethod
    def _index_stem(cls, v: Path | None) -> Path | None:
        """`kbvqa index images --out idx/images` writes `idx/images.json` and `.npy`; `--index` takes
        that stem, or the folder holding exactly one such index (`idx/`)."""
        if v is None or not Path(v).is_dir() or Path(v).with_suffix(".json").is_file():
            return v  # a stem (also when a folder of the same name stands beside its files)
        stems = sorted(j.with_suffix("") for j in Path(v).glob("*.json") if j.with_suffix(".npy").is_file())
        if len(stems) != 1:
            found = ", ".join(str(s) for s in stems) or "none"
            raise ValueError(f"{v} is a folder: name the index by its stem (the path `kbvqa index images "
                             f"--out` was given; image indexes in this folder: {found})")
        return stems[0]

    @field_validator("pipeline")
    @classmethod
    def _known_pipeline(cls, v: str) -> str:
        from kbvqa.pipelines import PIPELINES

        names = PIPELINES.names(kind="answer")
        if v not in names:
            raise ValueError(f"unknown answer pipeline {v!r} (choose from {', '.join(names)})")
        return v

    def check_applies(self) -> None:
        """Refuse a flag the chosen preset does not take (it would be ignored), and --web-* flags without
        --tools web. Flags only: a config file may hold settings for every preset."""
        from kbvqa.pipelines import PIPELINES

        takes = set(PIPELINES.entry(self.pipeline).info.get("options", ()))
        stray = [f for g in GROUPS if g not in takes for f in self.flags_under(g)]
        if stray:
            raise OptionsError(f"--pipeline {self.pipeline} does not take {', '.join(stray)}")
        if self.pipeline == "direct" and self.flags_under("kb"):
            raise OptionsError("--pipeline direct answers without retrieval and never reads a KB: drop --kb")
        web = self.flags_under("agent.web")
        if web and self.agent.tools != "web":
            raise OptionsError(f"{', '.join(web)} configure the agent's web backend: add --pipeline agent "
                               f"--tools web (--tools is {self.agent.tools if self.given('agent.tools') else 'not set'})")


def answer_options(config: Path | str | None = None, **flags: Any) -> AnswerOptions:
    """The answer run's options from `--config` (its `[answer]` table; `[tools.web]` for the agent's web
    backend) and the flags, validated once; a flag the preset does not take is an OptionsError."""
    table = read_table(config, "answer")
    web = read_table(config, "tools.web")
    if web:
        agent = table.setdefault("agent", {})
        if isinstance(agent, dict):
            agent["web"] = {**web, **(agent.get("web") or {})}
    opts = AnswerOptions.build(table, source=f"{config} [answer]" if config else None,
                               config=Path(config) if config is not None else None, **flags)
    opts.check_applies()
    return opts
