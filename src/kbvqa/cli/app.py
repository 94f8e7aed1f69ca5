"""`kbvqa` entry point: one sub-command per job."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from typer.core import TyperGroup

from kbvqa import __version__
from kbvqa.data.images import ALLOW_OUTSIDE_ROOT_ENV

# Every sub-command in the order a user meets them (data and KB, audit, augment, retrieve/answer,
# score, study, report): name -> (module under kbvqa.cli, its Typer app or command function, help).
# The help is the command's own (`kbvqa NAME --help` shows it) and its summary in `kbvqa --help`, which
# is built from this table alone: a command's module is imported only when that command is named, so
# neither `kbvqa score infoseek` nor `kbvqa --help` pays for the HTTP stack, Pillow, numpy or the
# pipelines that other commands need.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "data": ("data", "app", "Convert benchmark files between formats; dataset statistics."),
    "kb": ("kb", "app", "Import a wiki JSON into the SQLite/FTS5 KB store; search it."),
    "audit": ("audit", "app", "Audit and repair a benchmark against its KB (rules first, LLM roles when configured)."),
    "augment": ("augment", "augment", "Multi-entity composite images (intra/inter/blank/double) with rewritten "
                                      "questions."),
    "index": ("index", "app", "Build FAISS image indexes and dense section indexes over a KB."),
    "retrieve": ("retrieve", "retrieve", "Image-to-image KB retrieval: ranked, entity-deduplicated records for "
                                         "Recall@K."),
    "answer": ("answer", "answer", "Answer with a reference MM-RAG pipeline (a registered preset: --pipeline)."),
    "score": ("score", "app", "Score predictions: InfoSeek, E-VQA, short-answer judge, retrieval."),
    "eval": ("eval", "evaluate", "Answer + score in one run: predictions as `kbvqa answer` writes them, every "
                                 "--metric as `kbvqa score` scores it, one results.json."),
    "study": ("study", "app", "Studies: per-type bootstrap CIs, fixed-vs-unfixed comparisons and ranking "
                              "reversals, retrieval 2x2, augmentation recall."),
    "reference": ("reference", "app", "Interleaved reference construction from agent trajectories (seed 001) "
                                      "and its human audit."),
    "curate": ("curate", "app", "Curate a community-sourced visual QA benchmark from posts (seed 001 §3.1): the "
                                "four-step funnel and its proofreading."),
    "report": ("report", "app", "Tables (markdown/CSV/LaTeX), plots and an HTML page from study results."),
    "export": ("export", "app", "A benchmark as an inspect_ai, lmms-eval or VLMEvalKit task, scored by kbvqa."),
    "journal": ("journal", "app", "Inspect or repair a job's output journal (what --resume reads)."),
    "demo": ("demo", "demo", "End-to-end offline demo on real photographs shipped in PyPI packages."),
    "view": ("view", "view", "Browse runs in a local read-only web app (or --export a static site)."),
}
_ORDER = {name: i for i, name in enumerate(COMMANDS)}


class _RootGroup(TyperGroup):
    """Every command ends an executor failure (kbvqa.runner.executor.ExecutorError: Ray missing, an
    input a node lacks, workers lost) with one line and the failure's exit code, never a traceback;
    a write failure (a full disk, a read-only folder: kbvqa.runner.write_errors) with one line naming
    the path and exit 1; Ctrl-C or SIGTERM with the interrupted outputs and exit 130 or 143."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:
            _interrupted(exc)
        except Exception as exc:
            from kbvqa.cli.common import fail

            executor = sys.modules.get("kbvqa.runner.executor")  # not loaded: no executor ran
            if executor is not None and isinstance(exc, executor.ExecutorError):
                fail(exc, code=exc.exit_code)
            from kbvqa.runner.write_errors import EXIT_WRITE_FAILED, write_failure

            line = write_failure(exc)
            if line is not None:
                fail(line, code=EXIT_WRITE_FAILED)
            raise

    def list_commands(self, ctx: Any) -> list[str]:
        """The table's order (Typer's would put plain commands before groups)."""
        return sorted(self.commands, key=lambda name: _ORDER.get(name, len(_ORDER)))


class _LazyCommands(dict):  # type: ignore[type-arg]
    """The root's commands by name: every name in COMMANDS is a key, a command's click object is
    built (its module imported) the first time it is looked up, so the root can list the names and
    resolve one without importing the others."""

    def __missing__(self, name: str) -> Any:
        if name not in COMMANDS:
            raise KeyError(name)
        import typer.main

        self[name] = cmd = typer.main.get_command(build_app(name)).commands[name]  # type: ignore[attr-defined]
        return cmd

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS or dict.__contains__(self, name)

    def keys(self) -> Any:  # Typer's "did you mean" reads the keys
        return [*COMMANDS, *(name for name in dict.keys(self) if name not in COMMANDS)]

    def __iter__(self) -> Any:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def items(self) -> Any:  # whoever asks for every command gets every one, built
        return [(name, self[name]) for name in self]

    def values(self) -> Any:
        return [self[name] for name in self]

    def loaded(self) -> list[str]:
        """The names whose module has been imported."""
        return list(dict.keys(self))


class _LazyRoot(_RootGroup):
    """The root `main` runs: names and one-line summaries from COMMANDS, a command imported when it
    is resolved. `kbvqa --help`, `kbvqa` alone and completing a command name import no command."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _LazyCommands(self.commands)

    def _summary(self, name: str, limit: int) -> str:
        """What the listing shows for `name`: the loaded command's own short help, else the same
        shortening of its table help (click's, so the text is the one the full app prints)."""
        if name in self.commands.loaded():
            return self.commands[name].get_short_help_str(limit)
        return _click("utils").make_default_short_help(COMMANDS[name][2], limit)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        with formatter.section("Commands"):
            formatter.write_dl([(name, self._summary(name, limit)) for name in names])

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        """Command names with their summaries (45 columns, as click completes), then root options."""
        item = _click("shell_completion").CompletionItem
        return [*(item(name, help=self._summary(name, 45)) for name in self.list_commands(ctx)
                  if name.startswith(incomplete)), *_click("core").Command.shell_complete(self, ctx, incomplete)]


def _click(module: str) -> Any:
    """A click module: the copy recent Typer releases carry, else click itself (older Typer)."""
    try:
        return importlib.import_module(f"typer._click.{module}")
    except ImportError:
        return importlib.import_module(f"click.{module}")


def _interrupted(exc: KeyboardInterrupt) -> None:
    """One line per output the runner left `interrupted` (their manifests say so, with counts), then
    exit 143 for SIGTERM, 130 for Ctrl-C (kbvqa.runner.interrupt)."""
    from kbvqa.runner.interrupt import INTERRUPTED_HINT, exit_code

    run = sys.modules.get("kbvqa.runner.run")
    outputs = list(dict.fromkeys(run.INTERRUPTED)) if run is not None else []
    for out in outputs:
        typer.echo(f"{out}: {INTERRUPTED_HINT}", err=True)
    if not outputs:
        typer.echo("interrupted", err=True)
    raise typer.Exit(code=exit_code(exc))


def build_app(only: str | None = None, *, lazy: bool = False) -> typer.Typer:
    """The `kbvqa` Typer app with every sub-command, or with `only` that one; `lazy`: with none
    imported yet, each built when it is named (what `main` runs)."""
    root = typer.Typer(
        name="kbvqa",
        help="Audit, repair, augment and evaluate knowledge-seeking VQA benchmarks and the MM-RAG "
             "pipelines and search agents that answer them.",
        no_args_is_help=True,
        rich_markup_mode=None,  # help texts carry [brackets] (TOML tables, extras): never read them as markup
        pretty_exceptions_enable=False,
        add_completion=False,
        cls=_LazyRoot if lazy else _RootGroup,
    )
    root.callback()(_root)
    if lazy:
        return root
    for name, (module, attr, help_) in COMMANDS.items():
        if only is not None and name != only:
            continue
        obj = getattr(importlib.import_module(f"kbvqa.cli.{module}"), attr)
        if isinstance(obj, typer.Typer):
            root.add_typer(obj, name=name, help=help_)
        else:
            root.command(name, help=help_)(obj)
    return root


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kbvqa {__version__}")
        raise typer.Exit()


def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit."),
          executor: Optional[str] = typer.Option(
              None, "--executor", metavar="<local|ray|plugin>",
              help="Where every per-record job of the command runs: local (asyncio, this process; the "
                   "default), ray (actors; the kbvqa[ray] extra) or a registered plugin. Env: KBVQA_EXECUTOR."),
          ray_address: Optional[str] = typer.Option(None, "--ray-address",
                                                    help="A running Ray cluster (default: RAY_ADDRESS, else a "
                                                         "local cluster started for the run)."),
          ray_actors: Optional[int] = typer.Option(None, "--ray-actors", min=1,
                                                   help="Ray actors (default: one per cluster CPU)."),
          ray_init: Optional[str] = typer.Option(None, "--ray-init", metavar="JSON",
                                                 help="ray.init options as a JSON object, e.g. "
                                                      "'{\"runtime_env\": {\"pip\": [\"kbvqa\"]}}' (recorded in the "
                                                      "manifest without secrets)."),
          ray_config: Optional[Path] = typer.Option(None, "--ray-config", dir_okay=False,
                                                    help="A kbvqa.toml whose [executor.ray] table sets the Ray "
                                                         "executor (address, actors, calls_per_actor, batch_size, "
                                                         "num_cpus_per_actor, init); flags override it."),
          fail_on_error: bool = typer.Option(False, "--fail-on-error",
                                             help="Exit 4 when any record of a job ends error or invalid (a job "
                                                  "where none ended ok always exits 3)."),
          allow_outside_root: bool = typer.Option(False, "--allow-outside-root", envvar=ALLOW_OUTSIDE_ROOT_ENV,
                                                  help="Let image references in the data name files outside the "
                                                       "image root (--images); refused by default."),
          record_deadline: Optional[float] = typer.Option(
              None, "--record-deadline", min=0.1,
              help="Cap on one record's time through all the stages of a job, seconds: a record still running "
                   "then ends error (RecordDeadline). Env: KBVQA_RECORD_DEADLINE."),
          cache: Optional[Path] = typer.Option(None, "--cache", dir_okay=False,
                                               help="Response cache file for every model role (default: "
                                                    "~/.cache/kbvqa/responses.sqlite; env KBVQA_CACHE)."),
          no_cache: bool = typer.Option(False, "--no-cache", help="Send every model call, cache nothing "
                                                                   "(KBVQA_CACHE=off)."),
          prompt_file: Optional[list[str]] = typer.Option(
              None, "--prompt-file", metavar="NAME=PATH",
              help="Replace a prompt by your own template file (repeatable), e.g. agent.system=paper.txt: its "
                   "{placeholders} are checked, its hash names it in every manifest. Also [prompts] in "
                   "kbvqa.toml (this flag wins).")) -> None:
    """kbvqa command line. (--fail-on-error is read by each job from this command's parameters.)"""
    if allow_outside_root:  # an environment variable reaches worker processes (Ray actors, image pools)
        os.environ[ALLOW_OUTSIDE_ROOT_ENV] = "1"
    if cache is not None and no_cache:
        raise typer.BadParameter("choose --cache PATH or --no-cache", param_hint="--cache")
    if cache is not None or no_cache:  # like the two above: an environment variable reaches every worker
        from kbvqa.models.config import CACHE_ENV

        os.environ[CACHE_ENV] = "off" if no_cache else str(cache.expanduser().resolve())
    _use_prompt_files(prompt_file or [])
    chosen = executor or os.environ.get("KBVQA_EXECUTOR") or None
    options = _ray_options(ray_address, ray_actors, ray_init, ray_config)
    if (options or ray_init is not None or ray_config is not None) and chosen != "ray":
        raise typer.BadParameter("--ray-address/--ray-actors/--ray-init/--ray-config need --executor ray "
                                 "(or KBVQA_EXECUTOR=ray)", param_hint="--executor")
    if chosen == "ray" and not _ray_installed():  # one line and exit 2, whatever the command
        from kbvqa.cli.common import fail

        fail("the Ray executor needs Ray, which is not installed: pip install 'kbvqa[ray]' (or run without "
             "--executor ray / KBVQA_EXECUTOR)")
    # The runner holds these process-wide settings. It is imported only when an option sets one or
    # when it is already loaded (then a value from an earlier call in this process is reset):
    # `kbvqa score infoseek` never loads the runner, and its start-up is part of every score.
    if record_deadline is not None or "kbvqa.runner.stage" in sys.modules:
        from kbvqa.runner.stage import set_record_deadline

        set_record_deadline(record_deadline)
    if executor is not None or options or "kbvqa.runner.executor" in sys.modules:
        from kbvqa.registry import UnknownName
        from kbvqa.runner.executor import set_default_executor

        try:
            set_default_executor(chosen or "local", **options)
        except UnknownName as exc:
            raise typer.BadParameter(str(exc), param_hint="--executor") from None


def _use_prompt_files(specs: list[str]) -> None:
    """`--prompt-file NAME=PATH` for every command of this process (and its workers); without it,
    kbvqa's own prompts (an earlier invocation's files in this process are cleared). The prompt
    package is light (its prompt modules load only when a file is checked or a prompt is used)."""
    from kbvqa.models.prompts import PromptFileError, clear_prompt_files, use_prompt_files

    clear_prompt_files()
    if not specs:
        return
    files: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise typer.BadParameter(f"{spec!r}: give NAME=PATH (e.g. agent.system=prompts/agent.txt)",
                                     param_hint="--prompt-file")
        if name.strip() in files:
            raise typer.BadParameter(f"{name.strip()} is given twice", param_hint="--prompt-file")
        files[name.strip()] = path.strip()
    try:
        use_prompt_files(files)
    except PromptFileError as exc:
        raise typer.BadParameter(str(exc), param_hint="--prompt-file") from None


def _ray_installed() -> bool:
    """Whether `import ray` can work, without importing it (that costs a second of every start-up)."""
    import importlib.util

    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules["ray"] is None (Ray blocked)
        return False


def _ray_options(address: str | None, actors: int | None, init: str | None,
                 config: Path | None) -> dict[str, object]:
    """The Ray executor's options: [executor.ray] of --ray-config, then --ray-init, then the flags."""
    import json

    options: dict[str, object] = {}
    if config is not None:
        from kbvqa.runner.config import load_ray_settings

        try:
            options.update(load_ray_settings(config).executor_options())
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--ray-config") from None
    if init is not None:
        try:
            extra = json.loads(init)
        except ValueError as exc:
            raise typer.BadParameter(f"not JSON: {exc}", param_hint="--ray-init") from None
        if not isinstance(extra, dict):
            raise typer.BadParameter("must be a JSON object of ray.init options", param_hint="--ray-init")
        options["init_kwargs"] = {**dict(options.get("init_kwargs") or {}), **extra}  # type: ignore[call-overload]
    options.update({k: v for k, v in (("address", address), ("actors", actors)) if v is not None})
    return options


def main() -> None:
    """Click parses the root options and names the command; only that command's module is imported."""
    build_app(lazy=True)(prog_name="kbvqa")


def __getattr__(name: str) -> typer.Typer:
    """`kbvqa.cli.app.app`: the full app (every command), built on first use (tests, entry points)."""
    if name == "app":
        globals()["app"] = full = build_app()
        return full
    raise AttributeError(f"module 'kbvqa.cli.app' has no attribute {name!r}")


if __name__ == "__main__":
    main()
