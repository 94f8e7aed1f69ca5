"""kbvqa.cli.flag_groups: a group's flags stand where the command names it, reach the command as one
object, and a group cannot silently shadow a command's own flag."""

from __future__ import annotations

from typing import Optional

import pytest
import typer
from typer.testing import CliRunner

from kbvqa.cli.flag_groups import GROUP, command, flag_group, make_flag_group, ungrouped, with_groups


@flag_group
class _Pair:
    first: int = typer.Option(1, "--first", help="First.")
    second: Optional[str] = typer.Option(None, "--second", help="Second.")


_Made = make_flag_group("Made", [("label", str, typer.Option("x", "--label", help="A composed help."))])


def _app() -> tuple[typer.Typer, list]:
    app = typer.Typer(rich_markup_mode=None)
    seen: list = []

    @command(app, "go")
    def go(name: str = typer.Option(..., "--name"), pair: _Pair = GROUP, made: _Made = GROUP,  # type: ignore[valid-type]
           last: bool = typer.Option(False, "--last")) -> None:
        seen.append((name, pair, made, last, ungrouped(locals())))

    @app.command("other")
    def other() -> None:  # a second command keeps `go` a sub-command
        pass

    return app, seen


def test_flags_stand_in_place_and_arrive_as_one_object():
    app, seen = _app()
    runner = CliRunner()
    help_text = runner.invoke(app, ["go", "--help"], terminal_width=100).output
    order = [help_text.index(f) for f in ("--name", "--first", "--second", "--label", "--last")]
    assert order == sorted(order)
    res = runner.invoke(app, ["go", "--name", "n", "--second", "s", "--label", "y"])
    assert res.exit_code == 0, res.output
    name, pair, made, last, flat = seen[0]
    assert (name, pair.first, pair.second, made.label, last) == ("n", 1, "s", "y", False)
    assert {k: flat[k] for k in ("first", "second", "label")} == {"first": 1, "second": "s", "label": "y"}
    assert "pair" not in flat and "made" not in flat
    bad = runner.invoke(app, ["go", "--name", "n", "--first", "not-a-number"])
    assert bad.exit_code == 2  # the group's flag keeps its type


def test_a_group_flag_named_like_a_command_flag_is_refused():
    def clash(first: int = typer.Option(0, "--first"), pair: _Pair = GROUP) -> None:
        pass

    with pytest.raises(TypeError, match="declared twice"):
        with_groups(clash)


def test_group_default_needs_a_flag_group():
    def wrong(pair: int = GROUP) -> None:
        pass

    with pytest.raises(TypeError, match="no flag group"):
        with_groups(wrong)
