"""Image tags in interleaved answers: validate each against the trajectory and resolve it.

The agent cites an image with `<image>{"query": "<exact text_to_image_search query>", "idx": N}</image>`
(seed 001 App. D). `validate_tags` is a pure function of the answer and the episode's forward image
searches: a tag is valid only when an earlier call used exactly that query and returned an N-th
image (the latest such call whose status is ok: a later `repeated` answer to the same call does not
shadow it). Each violation is typed — malformed_tag, no_prior_call, query_mismatch (a call exists whose
query differs only in case or spacing), idx_out_of_range, duplicate_image (an image already cited) —
and each valid tag resolves to the image (URL or path), its sha256 and its source page.

`strip_tags` gives the answer as a SimpleQA-style grader sees a response: the whole text, image tags
removed; that is what `kbvqa score judge` grades by default. `short_answer` (the first sentence, see
its docstring) is stored on every agent prediction for the exact-match scorers, which need a short
string, and for `--graded-text short`.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

_TAG = re.compile(r"<image>(.*?)</image>", re.S)
_OPEN = re.compile(r"<image>")
#: a candidate sentence end: CJK full stops (no space needed), or . ! ? (with closing quotes or
#: brackets) before whitespace, or a line break
_SENTENCE_END = re.compile(r"[。！？]+|[.!?]+[\"'”’)\]]*(?=\s)|\n")
#: words written with a full stop that rarely end a sentence (lower case, without the stop)
_ABBREVIATIONS = frozenset("""
    mr mrs ms mx dr prof sr jr st mt ft rev hon gen col lt capt cpt sgt cmdr gov sen pres
    messrs mme mlle ave blvd rd inc ltd corp co bros vs cf ca approx est dept univ
    jan feb mar apr jun jul aug sep sept oct nov dec
""".split())
#: abbreviations that do not end a sentence when a number follows ("No. 5", "vol. 2"), but may
#: otherwise ("The answer is no. It ...")
_BEFORE_NUMBER = frozenset("no nos vol vols p pp fig figs art ch sec op ed".split())
_DOTTED = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]?\.?")  # U.S., e.g., a.m., i.e. (letters and stops only)


def _norm(q: str) -> str:
    return " ".join(q.split()).casefold()


def strip_tags(text: str) -> str:
    """The answer text without image tags (and without an unclosed trailing `<image>`)."""
    out = _TAG.sub("", text or "")
    i = out.find("<image>")
    return (out[:i] if i >= 0 else out).strip()


def _ends_sentence(text: str, m: re.Match[str]) -> bool:
    """Whether the candidate end `m` really ends a sentence (see `short_answer`)."""
    mark = m.group(0)
    if mark == "\n" or mark[0] in "。！？":
        return True
    rest = text[m.end():].lstrip()
    if not rest:
        return True
    if rest[0].islower():  # a sentence does not start in lower case: "approx. ten", "etc. and"
        return False
    if mark[0] != ".":
        return True
    word = text[:m.start()].rsplit(None, 1)[-1] if text[:m.start()].strip() else ""
    word = word.lstrip("\"'“‘([")
    core = word.lower()
    if len(word) == 1 and word.isalpha():  # an initial: "J. R. R. Tolkien", "George W. Bush"
        return False
    if core in _ABBREVIATIONS or _DOTTED.fullmatch(word + "."):  # "St. Paul's", "U.S. Army", "e.g. The"
        return False
    if core in _BEFORE_NUMBER and rest[0].isdigit():  # "No. 5", "vol. 2"
        return False
    return True


def short_answer(text: str | None, max_chars: int = 300) -> str | None:
    """The answer's first sentence, image tags removed, at most `max_chars` characters; None when
    no text is left.

    A sentence ends at a line break, a CJK full stop, or `.`/`!`/`?` (with any closing quotes or
    brackets) before white space — but not before a lower-case word, not after an initial ("J. R. R.
    Tolkien"), a letters-and-stops abbreviation ("U.S.", "e.g.", "a.m."), a common abbreviation
    ("St.", "Mt.", "Dr.", "Mr.", "Inc.", "approx.", months), nor after "No."/"vol."/"p." when a number
    follows. Decimals ("3.5 m") never had a space after the stop. The rules err toward keeping two
    sentences together ("... in the U.S. It was ...") rather than cutting a claim in half.

    Openers and preambles ("I checked the knowledge base first.", "Sure!") are not skipped: telling
    a preamble from a short answer ("Yes.", "No.") takes a judgement this function should not make
    silently. That is why the judge grades the whole answer by default; grading this sentence is
    the explicit `--graded-text short`, for answers whose producer puts the claim first (kbvqa's agent
    prompt asks for that).
    """
    plain = strip_tags(text or "")
    if not plain:
        return None
    start = 0
    for m in _SENTENCE_END.finditer(plain):
        if _ends_sentence(plain, m):
            first = plain[start:m.end()].strip()
            if first:
                return first[:max_chars]
            start = m.end()  # an empty line or a stray mark: look further
    return plain[start:].strip()[:max_chars] or None


def validate_tags(answer: str | None, searches: Iterable[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(provenance, resolved). `searches` are the episode's text_to_image_search calls in order, each
    {"query": <the query as the model wrote it>, "status": ..., "items": [{"rank", "image", "sha256",
    "url"}, ...]}."""
    calls = [s for s in searches if isinstance(s, dict)]
    text = answer or ""
    violations: list[dict[str, Any]] = []
    resolved: list[dict[str, Any]] = []
    used: set[str] = set()
    n_tags = len(_OPEN.findall(text))
    closed = list(_TAG.finditer(text))
    for _ in range(n_tags - len(closed)):
        violations.append({"kind": "malformed_tag", "tag": "<image> without </image>"})
    for m in closed:
        raw = m.group(0)
        try:
            obj = json.loads(m.group(1))
        except ValueError:
            obj = None
        if (not isinstance(obj, dict) or not isinstance(obj.get("query"), str)
                or not isinstance(obj.get("idx"), int) or isinstance(obj.get("idx"), bool)):
            violations.append({"kind": "malformed_tag", "tag": raw})
            continue
        query, idx = obj["query"], obj["idx"]
        exact = [c for c in calls if c.get("query") == query]
        if not exact:
            near = any(_norm(str(c.get("query", ""))) == _norm(query) for c in calls)
            violations.append({"kind": "query_mismatch" if near else "no_prior_call", "tag": raw})
            continue
        # what the model saw: the latest call with this query that ran and returned results (a later
        # `repeated` notice for the same call, or a failed retry, does not hide the earlier results)
        seen = [c for c in exact if c.get("status", "ok") == "ok"]
        items = (seen[-1].get("items") or []) if seen else []
        item = next((it for it in items if it.get("rank") == idx), None)
        if item is None:
            violations.append({"kind": "idx_out_of_range", "tag": raw, "returned": len(items)})
            continue
        key = item.get("sha256") or item.get("image")
        if key in used:
            violations.append({"kind": "duplicate_image", "tag": raw})
            continue
        used.add(key)
        resolved.append({"query": query, "idx": idx, "image": item.get("image"), "sha256": item.get("sha256"),
                         "url": item.get("url"), "title": item.get("title", "")})
    provenance = {"tags": n_tags, "valid": len(resolved), "violations": violations}
    return provenance, resolved
