"""The command line imports only the command being run: `kbvqa score infoseek` on a 300k-item file
took 1.2 s of start-up when every command's module (and with them httpx, Pillow and numpy) was
imported first. Checked by what a fresh interpreter has imported, not by time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kbvqa.cli.app import COMMANDS, _command_in, build_app

_HEAVY = ("httpx", "httpcore", "aiohttp", "PIL", "numpy", "faiss", "torch", "starlette")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, timeout=120)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("argv, command", [
    (["score", "infoseek", "-p", "x"], "score"),
    (["--executor", "local", "score", "infoseek"], "score"),
    (["--executor=local", "--fail-on-error", "audit", "run"], "audit"),
    (["--cache", "score", "kb"], "kb"),  # --cache takes a value: "score" is that value here
    (["--help"], None),
    ([], None),
    (["nonsense"], None),
    (["--", "score"], None),
])
def test_the_sub_command_is_found_past_root_options(argv, command):
    assert _command_in(argv) == command


def test_score_infoseek_does_not_import_the_http_stack_or_image_libraries():
    mods = _modules_after("from kbvqa.cli.app import build_app, _command_in\n"
                          "app = build_app(_command_in(['score', 'infoseek']))\n"
                          "import typer.main; typer.main.get_command(app)")
    assert "kbvqa.cli.score" in mods and "kbvqa.evaluate.infoseek" in mods
    assert not [m for m in _HEAVY if m in mods], sorted(m for m in _HEAVY if m in mods)
    assert "kbvqa.cli.audit" not in mods and "kbvqa.cli.view" not in mods


def test_full_app_has_every_command_and_a_single_command_app_only_that_one():
    import typer.main

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
