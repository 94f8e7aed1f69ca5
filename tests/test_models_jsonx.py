import json

import pytest
from hypothesis import given, settings, strategies as st

from kbvqa.models.jsonx import extract_json, strip_think


def test_strip_think_blocks():
    assert strip_think("<think>hmm {\"a\": 1}</think>\n{\"b\": 2}") == '{"b": 2}'
    assert strip_think("a<THINK>x</THINK>b<think>y</think>c") == "abc"
    # unterminated leading block: the reply was cut off while thinking
    assert strip_think("<think>still reasoning about {\"x\": 1}") == ""
    # answer then an unterminated block
    assert strip_think("yes <think>trailing") == "yes"
    # servers that drop the opening tag
    assert strip_think("reasoning...</think>\nParis") == "Paris"
    assert strip_think(None) == ""


@pytest.mark.parametrize("text,expected", [
    ('{"label": "yes"}', {"label": "yes"}),
    ('```json\n{"label": "no"}\n```', {"label": "no"}),
    ('Sure! Here it is:\n```\n[1, 2]\n```\nDone.', [1, 2]),
    ('The answer is {"a": "has } and { and \\" inside", "b": [1, {"c": null}]} ok',
     {"a": 'has } and { and " inside', "b": [1, {"c": None}]}),
    ('note [see ref] then {"k": 1}', {"k": 1}),  # unparseable bracket skipped
    ('<think>{"wrong": true}</think>{"right": true}', {"right": True}),
    ('"just a string"', "just a string"),
])
def test_extract_json(text, expected):
    assert extract_json(text) == expected


@pytest.mark.parametrize("text,why", [
    ("", "empty reply"),
    ("<think>only thoughts</think>", "empty reply"),
    ("I think the answer is yes.", "no JSON"),
    ('{"label": "yes"', "unbalanced"),
    ("{'label': 'yes'}", "offset"),  # python-dict quoting is not JSON: reported, not guessed
])
def test_extract_json_failures_have_reasons(text, why):
    with pytest.raises(ValueError, match=why):
        extract_json(text)


# strings without '<' so no generated value contains a think tag (tested separately above)
txt = st.text(alphabet=st.characters(blacklist_characters="<", blacklist_categories=("Cs",)), max_size=20)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | txt,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(txt, c, max_size=4), max_leaves=12)


@settings(max_examples=150, deadline=None)
@given(value=st.dictionaries(txt, json_values, min_size=1, max_size=4),
       prefix=st.sampled_from(["", "Answer: ", "Here you go.\n", "<think>{x</think>"]),
       suffix=st.sampled_from(["", " Hope this helps.", "\n"]),
       fenced=st.booleans())
def test_extract_json_roundtrip(value, prefix, suffix, fenced):
    body = json.dumps(value, ensure_ascii=False)
    if fenced:
        body = f"```json\n{body}\n```"
    assert extract_json(prefix + body + suffix) == value


def test_think_tag_inside_json_string_survives():
    assert extract_json('{"note": "<think> is a tag"}') == {"note": "<think> is a tag"}


# ------------------------------------------------------------------------------------------ strict mode


@pytest.mark.parametrize("text,expected", [
    ('{"label": "yes"}', {"label": "yes"}),
    ('  {"label": "yes"}\n', {"label": "yes"}),
    ('```json\n{"label": "no"}\n```', {"label": "no"}),
    ('```\n[1, 2]\n```', [1, 2]),
    ('{"a": "```"}', {"a": "```"}),
])
def test_extract_json_strict_accepts_exactly_one_value(text, expected):
    assert extract_json(text, strict=True) == expected


@pytest.mark.parametrize("text,why", [
    ("", "empty reply"),
    ("   ", "empty reply"),
    ('Sure! {"label": "yes"}', "not exactly one JSON value"),  # prose before: the tolerant mode would accept it
    ('{"label": "yes"} Hope this helps.', "not exactly one JSON value"),
    ('<think>hmm</think>{"label": "yes"}', "not exactly one JSON value"),  # no think-stripping either
    ('```json\n{"a": 1}\n```\n```json\n{"b": 2}\n```', "not exactly one JSON value"),  # two fences
    ('```python\n{"a": 1}\n```', "not exactly one JSON value"),  # only a json (or bare) fence
    ("CORRECT", "reply starts 'CORRECT'"),
])
def test_extract_json_strict_refuses_what_tolerant_mode_finds(text, why):
    with pytest.raises(ValueError, match=why):
        extract_json(text, strict=True)


@settings(max_examples=100, deadline=None)
@given(value=st.dictionaries(txt, json_values, min_size=1, max_size=4), fenced=st.booleans())
def test_extract_json_strict_roundtrip(value, fenced):
    body = json.dumps(value, ensure_ascii=False)
    assert extract_json(f"```json\n{body}\n```" if fenced else body, strict=True) == value
