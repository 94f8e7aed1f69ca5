"""Every command's --help renders, and help texts keep their brackets (TOML tables, extras, flags):
rich markup once swallowed them ("Model roles come from  in --config")."""

from __future__ import annotations

import typer
import typer.testing
from typer.main import get_command as _to_click
from typer.testing import CliRunner

from kbvqa.cli.app import COMMANDS, app, build_app


def _paths(cmd, prefix=()):
    yield prefix
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _paths(sub, (*prefix, name))


def test_every_command_has_working_help_and_the_lazy_root_prints_the_same(monkeypatch):
    """`main` runs the lazy root (it builds only the command named): every help text, the listing of
    `kbvqa --help` and of `kbvqa` alone included, is the full app's, character for character."""
    # each app is turned into its click group once, not on every invoke (that cost 44 ms a call)
    monkeypatch.setattr(typer.testing, "_get_command", lambda a: _to_click(a) if isinstance(a, typer.Typer) else a)
    full, lazy = _to_click(app), _to_click(build_app(lazy=True))
    paths = list(_paths(full))
    assert len(paths) > 40  # every job, group and subcommand
    runner = CliRunner()
    for path in paths:
        res = runner.invoke(full, [*path, "--help"])
        assert res.exit_code == 0, (path, res.output)
        assert "Usage:" in res.output, path
        assert runner.invoke(lazy, [*path, "--help"]).output == res.output, path
    assert lazy.commands.loaded() == [p[0] for p in paths if len(p) == 1]  # each built once, when named
    alone, lazy_alone = runner.invoke(full, []), runner.invoke(_to_click(build_app(lazy=True)), [])
    assert alone.exit_code == 2 and "Commands:" in alone.output  # click's: the help, as a usage error
    assert (lazy_alone.exit_code, lazy_alone.output) == (alone.exit_code, alone.output)


def test_each_summary_in_the_listing_is_that_commands_own_help():
    """The listing comes from COMMANDS without importing a command; each command, once built, carries
    that same text as its help, so the two cannot drift apart."""
    root = _to_click(app)
    full = root.commands  # type: ignore[attr-defined]
    assert root.list_commands(None) == list(COMMANDS)  # type: ignore[attr-defined]  # the table's order
    runner = CliRunner()
    wide = runner.invoke(app, ["--help"], terminal_width=300).output
    assert runner.invoke(build_app(lazy=True), ["--help"], terminal_width=300).output == wide
    wide = wide.split("Commands:\n", 1)[1]
    for name, (_, _, help_) in COMMANDS.items():
        assert full[name].help == help_, name
        assert f"  {name} " in wide and full[name].get_short_help_str(300) in wide, name


def test_brackets_in_help_survive():
    runner = CliRunner()
    out = runner.invoke(app, ["audit", "run", "--help"], terminal_width=200).output
    assert "[models.verifier|repairer|checker] in --config" in out
    assert "kbvqa[ray]" in runner.invoke(app, ["--help"], terminal_width=200).output
    assert "[models.<role>]" in runner.invoke(app, ["score", "judge", "--help"], terminal_width=200).output
