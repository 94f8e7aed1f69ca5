"""Every command's --help renders, and help texts keep their brackets (TOML tables, extras, flags):
rich markup once swallowed them ("Model roles come from  in --config")."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from kbvqa.cli.app import app


def _paths(cmd, prefix=()):
    yield prefix
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _paths(sub, (*prefix, name))


def test_every_command_has_working_help():
    root = typer.main.get_command(app)
    paths = list(_paths(root))
    assert len(paths) > 40  # every job, group and subcommand
    runner = CliRunner()
    for path in paths:
        res = runner.invoke(app, [*path, "--help"])
        assert res.exit_code == 0, (path, res.output)
        assert "Usage:" in res.output, path


def test_brackets_in_help_survive():
    runner = CliRunner()
    out = runner.invoke(app, ["audit", "run", "--help"], terminal_width=200).output
    assert "[models.verifier|repairer|checker] in --config" in out
    assert "kbvqa[ray]" in runner.invoke(app, ["--help"], terminal_width=200).output
    assert "[models.<role>]" in runner.invoke(app, ["score", "judge", "--help"], terminal_width=200).output
