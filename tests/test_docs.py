"""The README and docs/ describe the command line as it is (issue 29): every `kbvqa <command>
[<subcommand>]` they write exists, with the options written after it; every relative link resolves to a
file and, with a #fragment, to one of its headings; every docs page opens with what it is for; and the
README stays a ten-minute read. Commands are checked against the click tree of the typer app (one walk,
no `--help` per command), so the whole module runs in a couple of seconds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from kbvqa.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
MAX_README_LINES = 320

_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
_SPAN = re.compile(r"`([^`]+)`")
_INVOCATION = re.compile(r"(?<![\w.\-])kbvqa[ \t\n]+([^\n]*)")
_NAME = re.compile(r"[a-z][a-z0-9-]*")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _code(text: str) -> list[str]:
    """Every piece of code a page shows: fenced blocks as logical lines (`\\` continuations joined,
    `# comments` cut), then inline code spans (which may wrap a line)."""
    pieces: list[str] = []
    for block in _FENCE.findall(text):
        for line in re.sub(r"\\\n", " ", block).splitlines():
            pieces.append(re.split(r"\s#\s", line, maxsplit=1)[0])
    prose = _FENCE.sub("", text)
    pieces.extend(span.replace("\n", " ") for span in _SPAN.findall(prose))
    return pieces


def _params(command) -> tuple[set[str], set[str]]:
    """A click command's option spellings, and those of them that take a value."""
    names: set[str] = set()
    valued: set[str] = set()
    for param in command.params:
        spellings = [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]
        if not any(s.startswith("-") for s in spellings):
            continue  # an argument
        names.update(spellings)
        if not getattr(param, "is_flag", False) and not getattr(param, "count", False):
            valued.update(getattr(param, "opts", []))
    return names, valued


def _tokens(rest: str) -> list[str]:
    """Shell-ish words of what follows `kbvqa`, with optional-part brackets removed."""
    return [t.strip("[]") for t in rest.split() if t.strip("[]")]


def _check(invocation: str, root) -> list[str]:
    """Problems with one `kbvqa ...` invocation: an unknown global option, command, sub-command, or
    an option the command does not take. Placeholders (`<command>`, `X`, `…`) are not checked."""
    tokens = _tokens(invocation)
    root_names, root_valued = _params(root)
    root_names.add("--help")
    i = 0
    while i < len(tokens) and tokens[i].startswith("-"):
        flag = tokens[i].split("=", 1)[0]
        if flag not in root_names:
            return [f"unknown global option {flag!r} in `kbvqa {invocation}`"]
        i += 2 if flag in root_valued and "=" not in tokens[i] else 1
    if i == len(tokens) or not _NAME.fullmatch(tokens[i]):
        return []  # `kbvqa --help`, `kbvqa <command>`, `kbvqa X`
    name = tokens[i]
    command = root.commands.get(name)
    if command is None:
        return [f"no command `kbvqa {name}` (in `kbvqa {invocation}`)"]
    i += 1
    path = f"kbvqa {name}"
    if hasattr(command, "commands"):  # a group: the next word, and `/ other` alternatives, are sub-commands
        if i == len(tokens) or not _NAME.fullmatch(tokens[i]):
            return []
        subs = [tokens[i]]
        i += 1
        while i + 1 < len(tokens) and tokens[i] == "/" and _NAME.fullmatch(tokens[i + 1]):
            subs.append(tokens[i + 1])
            i += 2
        missing = [s for s in subs if s not in command.commands]
        if missing:
            return [f"no sub-command `{path} {s}` (in `kbvqa {invocation}`)" for s in missing]
        if len(subs) > 1:
            return []  # a list of sub-commands: no options to check
        path, command = f"{path} {subs[0]}", command.commands[subs[0]]
    names, _ = _params(command)
    names.add("--help")
    problems = []
    for token in tokens[i:]:
        if not re.match(r"--?[a-zA-Z]", token):
            continue
        for flag in token.split("=", 1)[0].split("/"):
            if flag and flag not in names:
                problems.append(f"`{path}` has no option {flag} (in `kbvqa {invocation}`)")
    return problems


def _invocations() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for piece in _code(page.read_text(encoding="utf-8")):
            found.extend((page.name, m.group(1)) for m in _INVOCATION.finditer(piece))
    return found


def test_every_kbvqa_command_written_in_the_readme_and_docs_exists():
    root = typer.main.get_command(app)
    invocations = _invocations()
    assert len(invocations) > 100  # the parser found the pages' commands
    problems = [f"{page}: {p}" for page, inv in invocations for p in _check(inv, root)]
    assert not problems, "\n".join(problems)


def test_the_checker_catches_unknown_commands_sub_commands_and_options():
    root = typer.main.get_command(app)
    assert _check("score infoseek -p P -r R --mode official --json", root) == []
    assert _check("--executor ray --ray-address auto score judge -p P", root) == []
    assert _check("study by-type / compare / retrieval-2x2", root) == []
    assert _check("<command>", root) == []
    assert _check("frobnicate", root)
    assert _check("score infoseeks -p P", root)
    assert _check("study by-type / nonsense", root)
    assert _check("score infoseek --no-such-flag", root)
    assert _check("--no-such-global score infoseek", root)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+)$", text, re.MULTILINE)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves_to_a_file_and_heading(page):
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.is_file():
            broken.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in _anchors(dest):
            broken.append(f"{target}: no heading #{fragment} in {dest.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_the_readme_links_every_docs_page():
    text = README.read_text(encoding="utf-8")
    linked = {Path(t.partition("#")[0]).name for t in _LINK.findall(text) if t.startswith("docs/")}
    assert len(linked) >= 9
    assert {p.name for p in DOCS} <= linked


def test_the_readme_is_a_ten_minute_read():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"
    assert "make test" in README.read_text(encoding="utf-8") and "apt-get" in README.read_text(encoding="utf-8")


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_every_docs_page_opens_with_what_it_is_for(page):
    blocks = [b.strip() for b in page.read_text(encoding="utf-8").split("\n\n") if b.strip()]
    assert blocks[0].startswith("# "), f"{page.name} has no title"
    first = blocks[1]
    assert not first.startswith(("#", "|", "```", "- ", "1.")), f"{page.name} opens with {first[:40]!r}"
    assert len(first.split()) >= 15
