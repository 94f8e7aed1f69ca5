"""Wording that several prompts share, written once and composed into each prompt that uses it.

Why: a rule restated in two prompts drifts (one copy is fixed, the other is not), and a reader cannot
tell the prompts meant the same thing. A fragment is plain text; a prompt module composes it into its
template when it registers the prompt, so the prompt's sha256 (over its composed text, as sent) moves
with the fragment: edit a fragment and every prompt that uses it fails its pin in tests/test_prompts.py
until its version is bumped, so the manifests stay honest. `Prompt.fragments` names the fragments a
prompt's own text contains; a user's `--prompt-file` replaces the composed text whole (then the prompt
claims none). A fragment only one family uses may stay in that family's file, registered here by name.

The helpers below write the one-line reply contract of the audit and agent checkers ("Return {...}")
one way: key order as given, choices as `"a" | "b"`, free text as `"<what to write>"`; braces come
out doubled, since a prompt's user text is a `str.format` template. (The curate and reference
prompts show their multi-line reply objects as written text after the strict-JSON rule.)
"""

from __future__ import annotations

#: Every named fragment: {name: text}. `fragment()` adds to it; `Prompt.fragments` reads it.
FRAGMENTS: dict[str, str] = {}


def fragment(name: str, text: str) -> str:
    """Register `text` as the shared fragment `name` and return it for composing."""
    if FRAGMENTS.get(name, text) != text:
        raise ValueError(f"prompt fragment {name!r} is defined twice with different text")
    FRAGMENTS[name] = text
    return text


#: The strict-JSON reply rule that every kbvqa judge and checker states (the answer family has its own form).
REPLY_JSON = fragment("reply.json", "Reply with one JSON object and nothing else")
JSON_ONLY = REPLY_JSON + "."

#: The answerers' shorter form, followed by an example object (those prompts are not templates: single braces).
_JSON_ONLY_EXAMPLE = fragment("reply.json_example", "Reply with JSON only: ")


def json_only(example: str) -> str:
    """The answerers' reply rule followed by its example object (`{"answer": "..."}`)."""
    return _JSON_ONLY_EXAMPLE + example


#: The three verdicts of the answer judges (judge.simpleqa, judge.paragraph), in the order they define them.
GRADE_LABELS = ("correct", "incorrect", "not_attempted")
#: A boolean value in a reply contract.
BOOL = "true | false"


def one_of(*choices: str) -> str:
    """A closed set of string values: `"a" | "b" | "c"`."""
    return " | ".join(f'"{c}"' for c in choices)


def free(what: str) -> str:
    """A free-text string value: `"<what>"`."""
    return f'"<{what}>"'


def shape(**keys: str) -> str:
    """A reply object's shape, braces doubled for `str.format`: `{{"k": v, ...}}` (values as written)."""
    return "{{" + ", ".join(f'"{k}": {v}' for k, v in keys.items()) + "}}"


def returns(**keys: str) -> str:
    """The reply contract line of a checker prompt: `Return {{...}}`."""
    return "Return " + shape(**keys)


_VERDICT = fragment("judge.verdict", one_of(*GRADE_LABELS))


def grading_tail(target: str, rationale: str) -> str:
    """The end of an answer-judge prompt: the three inputs, then the strict-JSON verdict. `target`
    names the gold text to the judge ("Gold answer", "Reference answer")."""
    return (f"Question: {{question_raw}}\n{target}: {{target_raw}}\nAnswer to grade: {{predicted_raw}}\n\n"
            f"{REPLY_JSON}:\n" + shape(label=_VERDICT, rationale=free(rationale)))
