"""Retrieval metrics: Recall@K and MRR over KB-url rankings, per stage, plus answer-in-text recall.

A retrieval record is one JSONL line ``{"id", "retrieved": [ranked urls], "stage": "initial"|"post"}``
(``data_id``/``sample_id`` are accepted for ``id``; ``stage`` defaults to ``initial``). Rankings are
canonicalised and de-duplicated with `kbvqa.data.urls.dedupe_urls` before cutting at K, so
``http://…/X`` and ``https://…/X/`` count once (as EchoSight's URL-deduplicated recall does).

Denominator: every reference id. A reference with no record for a stage is a miss at every K and is
counted under ``n_missing``. Records for ids not in the reference are counted and ignored.

Gold urls: kbvqa JSONL ``entity.url`` (plus ``related_entities[].url`` for ``2_hop`` items), or CSV
``wikipedia_url`` (``|``-separated; E-VQA 2_hop rows list two urls). With several gold urls the
``two_hop`` policy decides: ``any`` (default; hit when any gold url is in the top K, rank = first gold
url) or ``all`` (hit when every gold url is in the top K, rank = the last of them).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, get_args

from kbvqa.data.jsonl import gc_paused
from kbvqa.data.urls import canonical_url, dedupe_urls
from kbvqa.evaluate import METRICS
from kbvqa.evaluate.io import DroppedRows, ScoreInputError, add_reference, kbvqa_alternatives, read_csv, read_jsonl
from kbvqa.evaluate.normalize import contains_word_bounded, evqa_normalize

__all__ = [
    "DEFAULT_KS", "RetrievalRef", "load_retrieval_records", "load_retrieval_references", "gold_rank",
    "retrieval_metrics", "answer_in_text_recall", "load_answer_texts", "parse_ks", "TWO_HOP_POLICIES",
]

DEFAULT_KS = (1, 3, 5, 10, 20)
TwoHop = Literal["any", "all"]
TWO_HOP_POLICIES: tuple[str, ...] = get_args(TwoHop)


@dataclass(slots=True)
class RetrievalRef:
    data_id: str
    gold: list[str]  # canonical urls
    answers: list[str]  # accepted answers (for answer-in-text recall); may be empty
    qtype: str | None
    line: int


@gc_paused()
def load_retrieval_references(path: str | Path, *, include_dropped: bool | None = None) -> dict[str, RetrievalRef]:
    """Gold urls (and answers) per id from kbvqa JSONL or an ARA / E-VQA CSV with `wikipedia_url`. An
    audited file with `drop` rows is refused unless `include_dropped` (kbvqa.evaluate.io.DroppedRows)."""
    refs: dict[str, RetrievalRef] = {}
    if str(path).lower().endswith(".csv"):
        for ln, row in read_csv(path):
            did = row.get("data_id") or row.get("id")
            if not did:
                raise ScoreInputError(path, ln, "data_id", "missing (needed to join retrieval records)")
            raw = row.get("wikipedia_url") or row.get("url")
            if not raw:
                raise ScoreInputError(path, ln, "wikipedia_url", f"missing or empty for {did!r}")
            gold = dedupe_urls(u for u in raw.split("|") if u.strip())
            answers = [a for a in (row.get("answer") or "").split("|") if a.strip()]
            add_reference(refs, RetrievalRef(did, gold, answers, row.get("question_type") or None, ln), path)
    else:
        dropped = DroppedRows(path)
        for ln, obj in read_jsonl(path):
            did = obj.get("id", obj.get("data_id"))
            if not isinstance(did, str) or not did:
                raise ScoreInputError(path, ln, "id", f"must be a non-empty string, got {did!r}")
            dropped.see(obj, ln)
            ent = obj.get("entity") or {}
            url = ent.get("url") if isinstance(ent, dict) else None
            if not url:
                raise ScoreInputError(path, ln, "entity.url", f"missing for {did!r}")
            urls = [url]
            if obj.get("question_type") == "2_hop":
                urls += [e.get("url") for e in obj.get("related_entities") or [] if isinstance(e, dict) and e.get("url")]
            answers = kbvqa_alternatives(obj.get("answers") or [], path, ln)
            add_reference(refs, RetrievalRef(did, dedupe_urls(urls), answers, obj.get("question_type"), ln), path)
        dropped.check(include_dropped)
    return refs


@gc_paused()
def load_retrieval_records(path: str | Path) -> tuple[dict[str, dict[str, list[str]]], int]:
    """stage -> id -> de-duplicated canonical ranking. Returns (records, n_duplicate_lines);
    a repeated (id, stage) keeps the last line and is counted."""
    out: dict[str, dict[str, list[str]]] = {}
    dup = 0
    for ln, obj in read_jsonl(path):
        did = obj.get("id", obj.get("data_id", obj.get("sample_id")))
        if not isinstance(did, str) or not did:
            raise ScoreInputError(path, ln, "id", f"must be a non-empty string, got {did!r}")
        stage = obj.get("stage", "initial")
        if not isinstance(stage, str) or not stage:
            raise ScoreInputError(path, ln, "stage", f"must be a non-empty string, got {stage!r}")
        urls = obj.get("retrieved")
        if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
            raise ScoreInputError(path, ln, "retrieved", "must be a list of url strings")
        bucket = out.setdefault(stage, {})
        dup += did in bucket
        bucket[did] = dedupe_urls(urls)
    return out, dup


def parse_ks(text: str) -> list[int]:
    """K values from "1,3,5" (the --k flag); anything but positive integers is a ValueError."""
    try:
        ks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--k must be comma-separated integers, got {text!r}") from None
    if not ks or min(ks) < 1:
        raise ValueError(f"--k values must be positive, got {text!r}")
    return ks


def gold_rank(ranking: list[str], gold: list[str], policy: TwoHop = "any") -> int | None:
    """1-based rank in a de-duplicated canonical ranking: first gold url ("any") or the position by
    which every gold url has appeared ("all"); None if not found."""
    pos = {u: i for i, u in enumerate(ranking, 1)}
    ranks = [pos.get(g) for g in gold]
    if policy == "any":
        found = [r for r in ranks if r is not None]
        return min(found) if found else None
    if policy == "all":
        return None if not ranks or any(r is None for r in ranks) else max(ranks)  # type: ignore[type-var]
    raise ValueError(f"two_hop policy must be 'any' or 'all', not {policy!r}")


@METRICS.register("retrieval", family="retrieval",
                  help="Recall@K and MRR per retrieval stage over canonical KB urls (missing records = misses)")
def retrieval_metrics(records: dict[str, dict[str, list[str]]], refs: dict[str, RetrievalRef], *,
                      ks: Iterable[int] = DEFAULT_KS, two_hop: TwoHop = "any") -> dict[str, Any]:
    """Per stage: recall@K (fraction of all references), MRR, n, n_with_record, n_missing, unknown ids."""
    ks = sorted(set(int(k) for k in ks))
    if not ks or ks[0] < 1:
        raise ValueError(f"K values must be positive integers, got {ks}")
    n = len(refs)
    stages: dict[str, Any] = {}
    for stage, recs in sorted(records.items()):
        hits = dict.fromkeys(ks, 0)
        rr = 0.0
        present = 0
        for did, ref in refs.items():
            ranking = recs.get(did)
            if ranking is None:
                continue
            present += 1
            r = gold_rank(ranking, ref.gold, two_hop)
            if r is None:
                continue
            rr += 1.0 / r
            for k in ks:
                if r <= k:
                    hits[k] += 1
        stages[stage] = {
            "recall": {f"@{k}": (hits[k] / n if n else 0.0) for k in ks},
            "mrr": rr / n if n else 0.0,
            "n": n, "n_with_record": present, "n_missing": n - present,
            "n_unknown_ids": sum(1 for d in recs if d not in refs),
        }
    return {"two_hop": two_hop, "ks": ks, "stages": stages, "n_references": n,
            "dedup": "kbvqa.data.urls.dedupe_urls (canonical, first occurrence kept)"}


def _answer_found(text_norm: str, answer: str) -> bool:
    parts = [evqa_normalize(p) for p in answer.split("&&")]
    parts = [p for p in parts if p]
    return bool(parts) and all(contains_word_bounded(text_norm, p) for p in parts)


def answer_in_text_recall(records: dict[str, list[str]], refs: dict[str, RetrievalRef],
                          text_of: Callable[[str], str | None], *, ks: Iterable[int] = DEFAULT_KS) -> dict[str, Any]:
    """Fraction of references for which some accepted answer (all its `&&` parts) appears, normalised
    and word-bounded, in the text of one of the top-K retrieved articles of one stage.

    `text_of(url)` returns the article text (or None when the KB lacks it: counted in
    ``n_urls_without_text``). Normalised texts are cached per url.
    """
    ks = sorted(set(int(k) for k in ks))
    cache: dict[str, str | None] = {}
    missing_text: set[str] = set()
    hits = dict.fromkeys(ks, 0)
    no_answers = 0
    for did, ref in refs.items():
        if not ref.answers:
            no_answers += 1
            continue
        ranking = records.get(did) or []
        first: int | None = None
        for i, url in enumerate(ranking[: ks[-1]], 1):
            c = canonical_url(url)
            if c not in cache:
                t = text_of(c)
                if t is None:
                    missing_text.add(c)
                cache[c] = evqa_normalize(t) if t else None
            tn = cache[c]
            if tn and any(_answer_found(tn, a) for a in ref.answers):
                first = i
                break
        if first is not None:
            for k in ks:
                if first <= k:
                    hits[k] += 1
    n = len(refs)
    return {"recall": {f"@{k}": (hits[k] / n if n else 0.0) for k in ks}, "n": n,
            "n_without_answers": no_answers, "n_urls_without_text": len(missing_text)}


@gc_paused()
def load_answer_texts(path: str | Path) -> dict[str, str]:
    """Article texts for answer-in-text recall: JSONL {url, text} -> {canonical url: text}."""
    table: dict[str, str] = {}
    for ln, obj in read_jsonl(path):
        if not isinstance(obj.get("url"), str) or not isinstance(obj.get("text"), str):
            raise ScoreInputError(path, ln, "url/text", "each line needs string url and text")
        table[canonical_url(obj["url"])] = obj["text"]
    return table
