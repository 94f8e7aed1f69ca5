"""The `agent` answer pipeline: AgenticInterleave (seed 001 §3.3) on the runner.

`build_agent_job` gives a Job of one stage (`AgentEpisode`) and a context holding the Toolbox for the
chosen tool backend (`local` over the KB, `web`, or `replay` from a cassette), the KB image index
and encoder for reverse image search, the resolver from KB image URLs to files, and — once the
output path is known — an artifact folder for long observations and the run's cassette.

A run's cassette is `<out stem>.cassette/`: `tools.sqlite` (every tool result the backend gave,
errors included), `models.sqlite` (every call of the agent model, whatever its status, recorded
whether or not the global response cache answered it) and `cassette.json` (the backend and its
settings, the model and the prompt date). `--tools replay --cassette DIR` re-runs from it with no
network, no response cache and no API key (the backend is not even built: a stand-in carries its
recorded name and version), and any miss is an error record, never a live call.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from kbvqa.pipelines import PIPELINES
from kbvqa.pipelines.answer.options import AgentOptions, AnswerOptions
from kbvqa.runner.artifacts import ArtifactStore
from kbvqa.runner.job import Job
from kbvqa.runner.lock import side_path
from kbvqa.runner.stage import Context

CASSETTE_FILE = "cassette.json"


class AgentSetupError(ValueError):
    """The agent cannot run as configured (the message says what to change)."""


class RecordedBackend:
    """The tool backend of a replayed run, as its cassette describes it: it answers nothing itself
    (the Toolbox replays every result from the cassette), so it needs no key, network or KB files."""

    def __init__(self, described: dict[str, Any]):
        self.name, self.version = described["backend"], str(described.get("version"))
        self._described = dict(described)

    def describe(self) -> dict[str, Any]:
        return {**self._described, "recorded": True}


def _kb_image_file(root: Path | None, rule: str) -> Any:
    """The resolver from KB image URLs to files under `root` (absolute: see build_agent_job)."""
    if root is None:
        return None
    from kbvqa.pipelines.index import ImageResolver

    return ImageResolver(root, rule).resolve


def _read_cassette(folder: Path) -> dict[str, Any]:
    meta = folder / CASSETTE_FILE
    if not meta.is_file():
        raise AgentSetupError(f"{folder}: not a kbvqa cassette (no {CASSETTE_FILE}; cassettes are written beside "
                              "a run's output as <out stem>.cassette/)")
    try:
        return json.loads(meta.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise AgentSetupError(f"{meta}: unreadable ({exc})") from None


def _backend(opts: AgentOptions, recorded: dict[str, Any] | None) -> Any:
    from kbvqa.tools import TOOL_BACKENDS

    name = recorded["backend"]["backend"] if recorded else opts.tools
    if name not in TOOL_BACKENDS.names():
        raise AgentSetupError(f"unknown tool backend {name!r} (choose from {', '.join(TOOL_BACKENDS.names())}, "
                              "or replay)")
    cls = TOOL_BACKENDS.get(name)
    if recorded:
        if str(recorded["backend"].get("version")) != str(cls.version):
            raise AgentSetupError(f"the cassette was recorded with {name}@{recorded['backend'].get('version')}, "
                                  f"this kbvqa has {name}@{cls.version}: the results would not match")
        return RecordedBackend(recorded["backend"])
    return cls(**(opts.web_settings() if name == "web" else {}))


def _recordable(agent: Any) -> dict[str, Any] | None:
    """What a replay needs to rebuild the agent's request keys (never a key or a secret)."""
    if agent is None:
        return None
    if not hasattr(agent, "cassette"):
        raise AgentSetupError(f"the agent role ({type(agent).__name__}) cannot be recorded into a cassette; use an "
                              "OpenAI-compatible backend")
    return {"base_url": agent.base_url, "model": agent.model, "temperature": agent.temperature,
            "max_tokens": agent.max_tokens, "extra_params": agent.extra_params,
            "json_schema_strict": agent.json_schema_strict}


def _replay_client(recorded: dict[str, Any], cassette_path: Path) -> Any:
    """A client that rebuilds the recorded requests' keys and answers them from the cassette only."""
    from kbvqa.models.cache import ModelCassette
    from kbvqa.models.client import OpenAIChatClient

    client = OpenAIChatClient(recorded["base_url"], recorded["model"], temperature=recorded["temperature"],
                              max_tokens=recorded["max_tokens"], extra_params=recorded["extra_params"],
                              json_schema_strict=recorded["json_schema_strict"])
    client.cassette, client.cassette_replay = ModelCassette(cassette_path, read_only=True), True
    return client


def build_agent_job(options: AnswerOptions, *, kb: Any, roles: Mapping[str, Any] | None = None, index: Any = None,
                    encoder: Any = None, image_root: Path | None = None) -> Job:
    """The agent Job from the run's AnswerOptions: its stage runs with `options.agent.episode`, the one
    value filled here being the prompt date when none was set (the cassette's on a replay, else today's),
    so the options the manifest records are the ones the episodes ran with."""
    from kbvqa.models.cache import ModelCassette
    from kbvqa.stages.agent.react import AgentEpisode
    from kbvqa.tools.cache import ToolCache
    from kbvqa.tools.toolbox import Toolbox

    opts = options.agent
    roles = dict(roles or {})
    if kb is None:
        raise AgentSetupError("the agent needs a KB (--kb): the local tools read it, and predictions name KB urls")
    if index is not None and encoder is not None and index.encoder != encoder.name:
        raise AgentSetupError(f"the image index was built with {index.encoder!r} but the encoder is {encoder.name!r}")
    recorded = None
    if opts.tools == "replay":
        if opts.cassette is None:
            raise AgentSetupError("--tools replay needs --cassette DIR (a previous run's <out stem>.cassette/)")
        recorded = _read_cassette(Path(opts.cassette))
    backend = _backend(opts, recorded)
    if recorded is None and backend.name == "local" and opts.kb_images is None:
        # without it every text_to_image_search is empty and answers lose their pictures, silently
        raise AgentSetupError("--tools local needs --kb-images DIR: the folder holding the KB's image files "
                              "(text_to_image_search and image_search return those files)")
    today = (recorded or {}).get("today") or opts.episode.today or datetime.now(timezone.utc).date().isoformat()
    if today != opts.episode.today:
        options = options.model_copy(update={"agent": opts.model_copy(
            update={"episode": opts.episode.model_copy(update={"today": today})})})
        opts = options.agent
    stage = AgentEpisode(opts.episode)
    # absolute, resolved once: tool results (so the cassette and the trajectory) name files that a replay or
    # the viewer finds from any working directory; a Path resource is an input every Ray node must have
    kb_root = Path(opts.kb_images).resolve() if opts.kb_images is not None else None
    resources: dict[str, Any] = {"image_root": Path(image_root).resolve() if image_root is not None else None,
                                 "kb_image_file": _kb_image_file(kb_root, opts.kb_image_rule)}
    if kb_root is not None:
        resources["kb_images"] = kb_root
    if index is not None and encoder is not None:
        resources.update(image_index=index, image_encoder=encoder)
    agent = roles.get("agent")
    if recorded is not None:
        cassette = Path(opts.cassette).resolve()  # type: ignore[arg-type]  # read on every node: absolute
        resources["toolbox"] = Toolbox(backend, ToolCache(cassette / "tools.sqlite", read_only=True), replay=True,
                                       blocked_domains=opts.blocked_domains)
        if recorded.get("agent"):  # the recorded model answers, from its cache only
            roles["agent"] = agent = _replay_client(recorded["agent"], cassette / "models.sqlite")
        elif agent is not None:
            raise AgentSetupError("this cassette was recorded with the embedded baseline policy; replay it "
                                  "without --llm / an agent role")
    ctx = Context(kb=kb, roles=roles, resources=resources)

    def output_resources(out: Path) -> dict[str, Any]:
        res: dict[str, Any] = {"artifacts": ArtifactStore.beside(out)}
        if recorded is None:  # record this run's cassette beside its output
            folder = side_path(out, ".cassette")  # named as every side file (under the output's lock)
            folder.mkdir(parents=True, exist_ok=True)
            res["toolbox"] = Toolbox(backend, ToolCache(folder / "tools.sqlite"), blocked_domains=opts.blocked_domains)
            if agent is not None and hasattr(agent, "cassette"):  # every call, whatever the response cache does
                agent.cassette = ModelCassette(folder / "models.sqlite")
            meta = {"backend": backend.describe(),
                    "backend_options": opts.web_settings() if backend.name == "web" else None,
                    "today": today, "protocol": opts.episode.protocol, "agent": _recordable(agent)}
            (folder / CASSETTE_FILE).write_text(json.dumps(meta, indent=1, ensure_ascii=False), encoding="utf-8")
        return res

    return Job([stage], ctx, description="agent", output_resources=output_resources,
               run_config={"pipeline": "agent", "tools": opts.tools, "protocol": opts.episode.protocol,
                           "guided": opts.episode.guided, "max_turns": opts.episode.max_turns, "today": today,
                           "blocked_domains": list(opts.blocked_domains), "options": options.used(),
                           # the root of the absolute KB image paths trajectories name (viewer: an image root)
                           "kb_images": str(kb_root) if kb_root is not None else None,
                           "tool_backend": backend.describe()})  # provider, base URL, key variable: never a key


PIPELINES.add("agent", build_agent_job, kind="answer", job=True, roles=("agent", "extractor"), options=("agent",),
              help="ReAct search agent with search/visit/image tools; interleaved answers with image tags")
