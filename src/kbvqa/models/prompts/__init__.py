"""Every prompt kbvqa sends: one versioned registry, the only place their wording lives.

Why a registry: a verdict is only reproducible if we know exactly which instructions produced it.
Every prompt has a name, a version and a sha256 over its text; stages put `name@version` and the
hash in each verdict's provenance and in the run manifest (`Stage.prompt_versions`). Changing the
wording of a prompt means bumping its version (a test pins every hash), so old and new verdicts are
never confused. The prompts themselves live in this package, one file per family (`audit`,
`answer`, `augment`, `judge`); importing the package registers all of them. Wording that several
prompts share (the strict-JSON reply rule, the judges' verdict line, a family's input block) is a
named fragment (`fragments`) composed into each of them, so it is said once and hashed in each.

Prompts are `str.format` templates. Values are inserted as JSON strings where they come from the
data (question, answers, evidence), so quotes or braces in a question cannot break the layout; a
field whose name ends in `_raw` is inserted as written (for text the model should read verbatim).

**A user's own prompt text.** Any prompt can be replaced by a template file (`kbvqa --prompt-file
NAME=PATH`, or `[prompts]` in kbvqa.toml: `"agent.system" = "prompts/agent.txt"`), so a user who has
a paper's exact wording can run with it; kbvqa ships only its own. The file is read once, checked
(`read_prompt_file`: every placeholder the replaced part needs, none it does not know) and kept in an
override table that `Prompt` consults whenever it renders: every stage, whichever way it holds the
prompt, sends the user's text. An overridden prompt's id becomes `name@file-<sha256[:12]>` (the hash
of the templates it now sends, as `Prompt.sha256`), so verdict provenance, cache keys and the run manifest's prompt hashes
(`Stage.prompt_versions`) name it; `overrides()` lists the files. The table travels to worker
processes (Ray actors) in an environment variable, like the other process-wide settings.

File syntax: the prompt's placeholders are written `{name}` (a wrong or missing one is an error that
lists the right names); every other brace is literal text, so JSON examples need no escaping
(nested ones included); `{{name}}` writes a literal `{name}`. Values are filled in as kbvqa fills its own prompts (JSON
strings, `_raw` fields as written). A file replaces the system text of a prompt
that has one and the user text otherwise; a file with the marker lines `### kbvqa:system` and
`### kbvqa:user` replaces each part it gives.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from kbvqa.models.prompts.fragments import FRAGMENTS, JSON_ONLY  # noqa: F401 - JSON_ONLY re-exported for the families
from kbvqa.registry import Registry


@dataclass(frozen=True)
class Prompt:
    name: str
    version: str
    system: str
    user: str
    fields: tuple[str, ...] = field(default=())
    system_fields: tuple[str, ...] = field(default=())  # filled into the system text (a template then)

    @property
    def override(self) -> PromptOverride | None:
        """The user's file that replaces this prompt in this process, if any."""
        return overrides().get(self.name)

    def texts(self) -> tuple[str, str]:
        """(system, user) as sent: the user's file where one replaces this prompt, else kbvqa's."""
        o = self.override
        return (o.system, o.user) if o is not None else (self.system, self.user)

    @property
    def id(self) -> str:
        o = self.override
        return f"{self.name}@{self.version}" if o is None else f"{self.name}@file-{o.sha256[:12]}"

    @property
    def sha256(self) -> str:
        return text_sha256(*self.texts())

    def _fill(self, template: str, names: tuple[str, ...], values: dict[str, Any]) -> str:
        filled = {k: (values[k] if isinstance(values[k], str) and k.endswith("_raw")
                      else json.dumps(values[k], ensure_ascii=False)) for k in names}
        return template.format(**filled)

    def _check(self, values: dict[str, Any]) -> None:
        declared = (*self.fields, *self.system_fields)
        missing = [f for f in declared if f not in values]
        extra = [k for k in values if k not in declared]
        if missing or extra:
            raise KeyError(f"prompt {self.id}: missing fields {missing}, unexpected {extra}")

    def render(self, **values: Any) -> str:
        """The user text with `values` filled in; every declared field must be given (no silent blanks)."""
        self._check(values)
        return self._fill(self.texts()[1], self.fields, values)

    def render_system(self, **values: Any) -> str:
        """The system text, with `system_fields` filled in when it is a template."""
        self._check(values)
        system = self.texts()[0]
        return self._fill(system, self.system_fields, values) if self.system_fields else system

    def messages(self, images: Iterable[str | Path] = (), **values: Any) -> list[dict[str, Any]]:
        """Chat messages: the system text (when there is one), then the user text with any images."""
        from kbvqa.models.images import user_message

        system = [{"role": "system", "content": self.render_system(**values)}] if self.texts()[0] else []
        return [*system, user_message(self.render(**values), images)]

    @property
    def fragments(self) -> tuple[str, ...]:
        """The shared fragments (`fragments.FRAGMENTS`) that kbvqa's text of this prompt contains: a change
        to one of them changes this prompt's hash. None while a user's file replaces the text whole."""
        if self.override is not None:
            return ()
        return tuple(n for n, t in FRAGMENTS.items() if t in self.system or t in self.user)

    def describe(self) -> dict[str, str]:
        o = self.override
        return {"name": self.name, "version": self.version, "sha256": self.sha256,
                **({"fragments": ",".join(self.fragments)} if self.fragments else {}),
                **({"file": o.path, "file_sha256": o.file_sha256, "replaces": ",".join(o.parts)} if o else {})}


def text_sha256(system: str, user: str) -> str:
    return hashlib.sha256(f"{system}\n\x00\n{user}".encode("utf-8")).hexdigest()


PROMPTS: Registry[Prompt] = Registry("prompt", modules=("kbvqa.models.prompts.audit", "kbvqa.models.prompts.answer",
                                                        "kbvqa.models.prompts.augment", "kbvqa.models.prompts.agent",
                                                        "kbvqa.models.prompts.judge", "kbvqa.models.prompts.ivr12",
                                                        "kbvqa.models.prompts.reference",
                                                        "kbvqa.models.prompts.ablation",
                                                        "kbvqa.models.prompts.curate",
                                                        "kbvqa.models.prompts.direct"))


def register(p: Prompt) -> Prompt:
    PROMPTS.add(p.name, p)
    return p


def placeholders(template: str) -> tuple[str, ...]:
    """The fields a `str.format` template fills, in the order they first appear (`{{` is literal)."""
    return tuple(dict.fromkeys(f for _, f, _, _ in string.Formatter().parse(template) if f))


def define(name: str, version: str, user: str, system: str = "") -> Prompt:
    """Register a prompt whose fields are its user text's placeholders (declared once, by the text) and
    whose system text, if any, is sent as written (not a template)."""
    return register(Prompt(name=name, version=version, system=system, user=user, fields=placeholders(user)))


def get(name: str) -> Prompt:
    """A prompt by name (`audit.verify_section`) or id (`audit.verify_section@1`, or the id of the
    user's file that replaces it, `audit.verify_section@file-<hash>`). A built-in id still names the
    prompt while a file replaces it: what is sent is then the file's text, and `.id` says so."""
    base, _, version = name.partition("@")
    p = PROMPTS.get(base)
    if version and version not in (p.version, p.id.partition("@")[2]):
        raise KeyError(f"prompt {base!r} is at version {p.version}, not {version}")
    return p


def all_prompts() -> dict[str, Prompt]:
    return {e.name: e.obj for e in PROMPTS}


# ---------------------------------------------------------------------------- the user's own prompts

#: How the override table reaches worker processes (set by `use_prompt_files`; not a user setting).
OVERRIDES_ENV = "KBVQA_PROMPT_OVERRIDES"
_SYSTEM_MARK, _USER_MARK = "### kbvqa:system", "### kbvqa:user"
_TOKEN = re.compile(r"\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|[{}]")


class PromptFileError(ValueError):
    """A prompt file that cannot replace the prompt it names (the message says why and where)."""


@dataclass(frozen=True)
class PromptOverride:
    """A user's file in place of one prompt: the texts as kbvqa will format them, and where they came from."""

    name: str
    path: str
    file_sha256: str
    system: str
    user: str
    parts: tuple[str, ...]  # which parts the file replaces: ("system",), ("user",) or both

    @property
    def sha256(self) -> str:
        return text_sha256(self.system, self.user)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "file_sha256": self.file_sha256, "system": self.system,
                "user": self.user, "parts": list(self.parts)}


def _template(text: str, fields: tuple[str, ...], where: str, *, formatted: bool) -> str:
    """The file's text as a `str.format` template over `fields` (or as literal text when the part is
    not formatted): `{field}` a placeholder, `{{word}}` the literal text `{word}`, every other brace
    literal (nested JSON such as `{"a": {"b": 1}}` included)."""
    out: list[str] = []
    used: set[str] = set()
    pos = 0
    for m in _TOKEN.finditer(text):
        out.append(text[pos:m.start()])
        pos = m.end()
        escaped, name, tok = m.group(1), m.group(2), m.group(0)
        if escaped is not None or name is None:  # literal text
            literal = "{" + escaped + "}" if escaped is not None else tok
            out.append(literal.replace("{", "{{").replace("}", "}}") if formatted else literal)
            continue
        if name in fields:
            used.add(name)
            out.append("{" + name + "}")
            continue
        else:
            known = ", ".join("{" + f + "}" for f in fields) or "none"
            raise PromptFileError(f"{where}: unknown placeholder {tok} (this part's placeholders: {known}; write "
                                  f"{{{{{name}}}}} for the literal text {tok})")
    out.append(text[pos:])
    missing = [f for f in fields if f not in used]
    if missing:
        raise PromptFileError(f"{where}: the placeholder(s) {', '.join('{' + f + '}' for f in missing)} are missing "
                              "(kbvqa fills them with the item's data; a prompt without them never shows it)")
    return "".join(out)


def read_prompt_file(name: str, path: str | Path) -> PromptOverride:
    """Check and read a user's template file for the prompt `name`; PromptFileError says what is wrong."""
    try:
        p = get(name.partition("@")[0])
    except KeyError:
        known = sorted(all_prompts())
        raise PromptFileError(f"--prompt-file {name}: no prompt of that name (prompts: {', '.join(known)})") from None
    path = Path(path).expanduser().resolve()
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except OSError as exc:
        raise PromptFileError(f"{path}: cannot read the prompt file for {name} ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise PromptFileError(f"{path}: the prompt file for {name} is not UTF-8 text") from None
    lines = text.splitlines(keepends=True)
    marks = [(i, ln.strip()) for i, ln in enumerate(lines) if ln.strip() in (_SYSTEM_MARK, _USER_MARK)]
    if marks:
        if text[:sum(len(x) for x in lines[:marks[0][0]])].strip():
            raise PromptFileError(f"{path}: text before the first {_SYSTEM_MARK} / {_USER_MARK} line")
        found: dict[str, str] = {}
        for k, (i, mark) in enumerate(marks):
            part = "system" if mark == _SYSTEM_MARK else "user"
            if part in found:
                raise PromptFileError(f"{path}: the {part} part is given twice")
            end = marks[k + 1][0] if k + 1 < len(marks) else len(lines)
            found[part] = "".join(lines[i + 1:end]).strip("\n")
    else:
        found = {"system" if p.system else "user": text.strip("\n")}
    for part, body in found.items():
        if not body.strip():
            raise PromptFileError(f"{path}: the {part} text is empty")
    system, user = p.system, p.user
    if "system" in found:
        system = _template(found["system"], p.system_fields, f"{path} (system part of {p.name})",
                           formatted=bool(p.system_fields))
    if "user" in found:
        user = _template(found["user"], p.fields, f"{path} (user part of {p.name})", formatted=True)
    if "system" not in found and p.system_fields and not system:
        raise PromptFileError(f"{path}: {p.name} needs a system part")
    return PromptOverride(p.name, str(path), hashlib.sha256(raw).hexdigest(), system, user, tuple(sorted(found)))


_LAYERS: dict[str, dict[str, PromptOverride]] = {}
_ACTIVE: dict[str, PromptOverride] | None = None  # None: not read from the environment yet


def overrides() -> dict[str, PromptOverride]:
    """The prompts replaced in this process: {name: override}. A worker process reads the table its
    driver set (OVERRIDES_ENV) on first use."""
    global _ACTIVE
    if _ACTIVE is None:
        raw = os.environ.get(OVERRIDES_ENV, "").strip()
        table = {}
        if raw:
            for d in json.loads(raw):
                o = PromptOverride(d["name"], d["path"], d["file_sha256"], d["system"], d["user"], tuple(d["parts"]))
                table[o.name] = o
        _ACTIVE = table
    return _ACTIVE


def use_prompt_files(files: dict[str, str | Path] | None, *, layer: str = "flags") -> dict[str, PromptOverride]:
    """Replace prompts by the user's files for this process and its workers. Two layers: `flags`
    (`kbvqa --prompt-file`) over `config` (`[prompts]` of a kbvqa.toml); giving a layer replaces it
    (None or {} clears it). Every file is checked before any is used. Returns the table in force."""
    global _ACTIVE
    checked = {o.name: o for o in (read_prompt_file(n, f) for n, f in (files or {}).items())}
    _LAYERS[layer] = checked
    table = {**_LAYERS.get("config", {}), **_LAYERS.get("flags", {})}
    _ACTIVE = table
    if table:
        os.environ[OVERRIDES_ENV] = json.dumps([o.as_dict() for o in table.values()], ensure_ascii=False)
    else:
        os.environ.pop(OVERRIDES_ENV, None)
    return table


def clear_prompt_files() -> None:
    """Back to kbvqa's own prompts (both layers)."""
    global _ACTIVE
    _LAYERS.clear()
    _ACTIVE = {}
    os.environ.pop(OVERRIDES_ENV, None)


def describe_overrides() -> list[dict[str, str]]:
    """The user's prompt files in force, for a manifest or a report: name, file, hashes, parts."""
    return [{"prompt": o.name, "id": f"{o.name}@file-{o.sha256[:12]}", "file": o.path, "file_sha256": o.file_sha256,
             "sha256": o.sha256, "replaces": ",".join(o.parts)} for o in overrides().values()]
