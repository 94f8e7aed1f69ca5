"""The command line imports only the command being run: `kbvqa score infoseek` on a 300k-item file
took 1.2 s of start-up when every command's module (and with them httpx, Pillow and numpy) was
imported first, and `kbvqa --help` took 0.8-1.0 s listing them. Checked by what a fresh interpreter
has imported, not by time (the times are benchmarks/cli_startup.py's)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import typer.main

from kbvqa.cli.app import COMMANDS, _click, build_app

_HEAVY = ("httpx", "httpcore", "aiohttp", "PIL", "numpy", "faiss", "torch", "starlette")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, timeout=120)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def _lazy_root():
    """The click group `main` runs, with no command imported yet."""
    return typer.main.get_command(build_app(lazy=True))


@pytest.mark.parametrize("argv, command, rest", [
    (["score", "infoseek", "-p", "x"], "score", ["infoseek", "-p", "x"]),
    (["--executor", "local", "score", "infoseek"], "score", ["infoseek"]),
    (["--executor=local", "--fail-on-error", "audit", "run"], "audit", ["run"]),
    (["--cache", "score", "kb"], "kb", []),  # --cache takes a value: "score" is that value here
    (["--prompt-file", "a=b", "--no-cache", "study", "x"], "study", ["x"]),
])
def test_the_root_resolves_the_command_past_root_options_and_builds_only_that_one(argv, command, rest):
    root = _lazy_root()
    ctx = root.make_context("kbvqa", list(argv))  # parses the root options; runs no callback
    name, cmd, args = root.resolve_command(ctx, [*ctx._protected_args, *ctx.args])
    assert (name, args) == (command, rest) and cmd is root.commands[command]
    assert root.commands.loaded() == [command]


def test_an_unknown_command_is_refused_with_a_suggestion_and_nothing_built():
    root = _lazy_root()
    ctx = root.make_context("kbvqa", ["scor"])
    with pytest.raises(_click("exceptions").UsageError, match=r"No such command 'scor'. Did you mean 'score'\?"):
        root.resolve_command(ctx, ["scor"])
    assert root.commands.loaded() == []


def test_completing_a_command_name_lists_the_table_and_builds_nothing():
    root = _lazy_root()
    ctx = root.make_context("kbvqa", [], resilient_parsing=True)
    items = root.shell_complete(ctx, "s")
    assert [i.value for i in items] == [n for n in COMMANDS if n.startswith("s")] == ["score", "study"]
    assert "--executor" in [i.value for i in root.shell_complete(ctx, "--ex")]
    assert root.commands.loaded() == []
    # the short help Typer gives a loaded command (its own completion reads it)
    assert [i.help for i in items] == [root.commands[i.value].get_short_help_str() for i in items]
    assert items[0].help == "Score predictions: InfoSeek, E-VQA,..."


_NO_COMMAND = ("kbvqa.cli.", "kbvqa.pipelines", "kbvqa.evaluate", "kbvqa.runner", "kbvqa.models", "kbvqa.stages",
               "kbvqa.kb", "kbvqa.report", "kbvqa.demo", "kbvqa.tools", "kbvqa.registry")


def test_top_level_help_imports_no_command_and_lists_every_one_with_its_summary():
    """`kbvqa --help` and `kbvqa` alone, as the console script runs them."""
    code = ("import json, sys\nfrom kbvqa.cli.app import main\nouts = []\n"
            "for argv in (['--help'], []):\n"
            "    sys.argv = ['kbvqa', *argv]\n"
            "    try:\n        main()\n    except SystemExit as exc:\n        outs.append(exc.code)\n"
            "print(json.dumps([outs, sorted(sys.modules)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    codes, mods = json.loads(out.stdout.strip().splitlines()[-1])
    assert codes == [0, 2]  # --help exits 0; no arguments prints the help and exits 2 (click's usage error)
    heavy = sorted(m for m in mods if m in _HEAVY or m.split(".")[0] in ("numpy", "PIL", "asyncio", "sqlite3")
                   or (m.startswith(_NO_COMMAND) and m != "kbvqa.cli.app"))
    assert not heavy, heavy
    for text in (out.stdout.rsplit("\n[[", 1)[0], out.stderr):  # --help on stdout; no arguments: stderr
        listing = text.split("Commands:\n", 1)[1].splitlines()
        rows = dict(line.split(None, 1) for line in listing if line.strip())
        assert list(rows) == list(COMMANDS)
        for name, (_, _, help_) in COMMANDS.items():
            assert help_.startswith(rows[name].removesuffix("...")) and len(rows[name]) > 20, (name, rows[name])


def test_score_infoseek_does_not_import_the_http_stack_or_image_libraries():
    mods = _modules_after("from kbvqa.cli.app import build_app\n"
                          "import typer.main; typer.main.get_command(build_app(lazy=True)).get_command(None, 'score')")
    assert "kbvqa.cli.score" in mods and "kbvqa.evaluate.infoseek" in mods
    assert not [m for m in _HEAVY if m in mods], sorted(m for m in _HEAVY if m in mods)
    assert "kbvqa.cli.audit" not in mods and "kbvqa.cli.view" not in mods


def test_full_app_has_every_command_and_a_single_command_app_only_that_one():
    full = typer.main.get_command(build_app())
    assert sorted(full.commands) == sorted(COMMANDS)  # type: ignore[attr-defined]
    one = typer.main.get_command(build_app("score"))
    assert sorted(one.commands) == ["score"]  # type: ignore[attr-defined]


def _infoseek_files(tmp_path):
    refs = tmp_path / "refs.jsonl"
    refs.write_text(json.dumps({"data_id": "a", "answer_eval": ["Paris"], "data_split": "val_unseen_entity",
                                "question_type": "String"}) + "\n", encoding="utf-8")
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"data_id": "a", "prediction": "paris."}) + "\n", encoding="utf-8")
    return preds, refs


def test_console_entry_point_runs_one_command(tmp_path):
    preds, refs = _infoseek_files(tmp_path)
    out = subprocess.run([sys.executable, "-c", "import sys; from kbvqa.cli.app import main; sys.argv[0] = 'kbvqa'; "
                          "main()", "score", "infoseek", "-p", str(preds), "-r", str(refs), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["unseen_entity_score"]["score"] == 100.0


def test_score_infoseek_runs_without_the_runner_the_model_stack_or_other_metrics(tmp_path):
    """The root options' settings live in the runner; a run that sets none must not import it."""
    preds, refs = _infoseek_files(tmp_path)
    code = ("import atexit, json, sys\n"
            "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
            "from kbvqa.cli.app import main\nsys.argv[0] = 'kbvqa'\nmain()")
    out = subprocess.run([sys.executable, "-c", code, "score", "infoseek", "-p", str(preds), "-r", str(refs), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["unseen_entity_score"]["score"] == 100.0
    mods = set(json.loads(out.stderr.strip().splitlines()[-1]))
    unwanted = {"kbvqa.runner", "kbvqa.models.config", "kbvqa.evaluate.judge", "kbvqa.evaluate.evqa",
                "kbvqa.evaluate.ivr12", "kbvqa.data.schema", "asyncio", *_HEAVY}
    assert not unwanted & mods, sorted(unwanted & mods)


def test_root_options_still_set_the_runner_and_an_unknown_executor_is_refused(tmp_path):
    from typer.testing import CliRunner

    from kbvqa.cli.app import app
    from kbvqa.runner import executor as ex
    from kbvqa.runner.stage import default_record_deadline

    preds, refs = _infoseek_files(tmp_path)
    score = ["score", "infoseek", "-p", str(preds), "-r", str(refs), "--json"]
    runner = CliRunner()
    bad = runner.invoke(app, ["--executor", "nonsense", *score])
    assert bad.exit_code == 2 and "--executor: unknown executor 'nonsense' (known: " in bad.output
    assert "local" in bad.output.split("known:")[1] and "ray" in bad.output.split("known:")[1]
    try:
        assert runner.invoke(app, ["--record-deadline", "5", *score]).exit_code == 0
        assert default_record_deadline() == 5
        assert runner.invoke(app, ["--executor", "ray", "--ray-actors", "3", *score]).exit_code == 0
        assert ex._DEFAULT == {"name": "ray", "options": {"actors": 3}}
        # the runner is loaded now: a later call without the options resets both
        assert runner.invoke(app, score).exit_code == 0
        assert default_record_deadline() is None and ex._DEFAULT == {"name": "local", "options": {}}
    finally:
        ex.set_default_executor("local")
