"""ARA (ECCV26-ARA) release files.

Ground truth (`ground_truth/*.csv`: InfoSeek fixed/unfixed, E-VQA fixed/unfixed) is E-VQA-shaped and
read by the E-VQA engine (evqa.py) with format "ara": evidence cells equal to "0" are placeholders,
InfoSeek rows take answer_type from question_type, extra columns (final_evidence, final_check_tag,
question_before_review, ...) go to meta, and writing reproduces the file.

The augmented manifest (`augmented/infoseek_challenging_queries_*.csv`) has one row per anchor with
its intra-category (method1) and inter-category (method2) composites. It is available both as
lossless rows (`read_ara_augmented` / `write_ara_augmented`) and as three Samples per row
(`augmented_samples`): `<anchor>__anchor`, `<anchor>__intra`, `<anchor>__inter`. Where references
are read (scorers, studies, retrieval gold), `augmented_reference_rows` gives those three samples as
ground-truth-shaped rows, so the manifest is accepted wherever a reference CSV is.

Numerical answers written as ranges get `Answer.range` in both shapes (`kbvqa.data.evqa.numeric_range`).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kbvqa.data.errors import DataError, ErrorPolicy, from_validation_error
from kbvqa.data.evqa import iter_csv, numeric_range, read_evqa, write_evqa
from kbvqa.data.infoseek import SOURCE_KEY, normalise_answer_type
from kbvqa.data.schema import Answer, Entity, Sample

AUGMENTED_REQUIRED = ("anchor_data_id", "anchor_entity", "anchor_wikipedia_url", "anchor_question",
                      "anchor_answer", "anchor_question_type", "anchor_image_path", "method1_query",
                      "method1_expected_answer", "method1_composite_image_path",
                      "method2_query_with_position", "method2_query_without_position",
                      "method2_expected_answer", "method2_composite_image_path")
_INFOSEEK_TYPES = {"string", "numerical", "time"}


def _header_and_first(path: str | Path) -> tuple[list[str], list[str] | None]:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise DataError("empty file (no header)", file=path, row=1)
        if header and header[0].startswith("\ufeff"):
            header[0] = header[0][1:]
        first = next((r for r in reader if r), None)
    return header, first


def ara_variant(path: str | Path) -> str:
    """Which ARA file this is: augmented, infoseek_fixed, infoseek_unfixed, evqa_fixed or evqa_unfixed."""
    header, first = _header_and_first(path)
    if "anchor_data_id" in header:
        return "augmented"
    if "question" not in header or "answer" not in header:
        raise DataError(f"not an ARA file: no question/answer columns (columns: {header})", file=path, row=1)
    cells = dict(zip(header, first or []))
    infoseek = (cells.get("dataset_name") == "infoseek"
                or cells.get("question_type", "").strip().lower() in _INFOSEEK_TYPES
                or cells.get("data_id", "").startswith("infoseek"))
    fixed = any(c.startswith("final_") or c == "question_before_review" for c in header)
    return f"{'infoseek' if infoseek else 'evqa'}_{'fixed' if fixed else 'unfixed'}"


def read_ara_augmented(path: str | Path) -> Iterator[dict[str, str]]:
    """The augmented manifest as dicts in column order (every cell a string, nothing interpreted)."""
    policy = ErrorPolicy()
    for num, header, row in iter_csv(path, policy):
        if len(row) != len(header):
            raise DataError(f"expected {len(header)} cells, found {len(row)}", file=path, row=num)
        yield dict(zip(header, row))


def write_ara_augmented(rows: Iterable[dict[str, Any]], path: str | Path) -> int:
    """Write manifest rows; the column order is the first row's key order."""
    n = 0
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        cols: list[str] | None = None
        for r in rows:
            if cols is None:
                cols = list(r.keys())
                w.writerow(cols)
            missing = [c for c in cols if c not in r]
            if missing or len(r) != len(cols):
                raise DataError(f"row keys differ from the header (missing {missing})", file=path, row=n + 2)
            w.writerow(["" if r[c] is None else str(r[c]) for c in cols])
            n += 1
    return n


def _answers(cell: str, numeric: bool) -> list[Answer]:
    return [Answer(text=a, range=numeric_range(a) if numeric else None) for a in cell.split("|")] \
        if cell.strip() else []


def augmented_row_samples(row: dict[str, str], *, file: str | Path | None = None, rownum: int | None = None,
                          with_position: bool = False) -> list[Sample]:
    """One manifest row -> [anchor, intra, inter] Samples."""
    missing = [c for c in AUGMENTED_REQUIRED if c not in row]
    if missing:
        raise DataError(f"missing column(s) {missing}", file=file, row=1, field=missing[0])
    anchor = row["anchor_data_id"]
    if not anchor.strip():
        raise DataError("empty anchor_data_id", file=file, row=rownum, field="anchor_data_id")
    qtype = row["anchor_question_type"]
    try:
        atype = normalise_answer_type(qtype)
    except ValueError as e:
        raise DataError(str(e), file=file, row=rownum, field="anchor_question_type") from None
    entity = Entity(url=row["anchor_wikipedia_url"] or None, title=row["anchor_entity"] or None)
    common = {"anchor_data_id": anchor, "anchor_entity": row["anchor_entity"],
              "anchor_entity_type": row.get("anchor_entity_type"), "target_side": row.get("target_side")}

    def pair(prefix: str) -> dict[str, Any]:
        keys = ("pair_entity", "pair_data_id", "pair_wikipedia_url", "pair_type", "similarity_basis",
                "composite_layout", "pair_image_id", "pair_image_path", "image_status")
        return {k: row.get(f"{prefix}_{k}") for k in keys}

    q2 = row["method2_query_with_position"] if with_position else row["method2_query_without_position"]
    specs = [
        ("anchor", row["anchor_question"], row["anchor_image_path"], row["anchor_answer"], "anchor_question",
         {}),
        ("intra", row["method1_query"], row["method1_composite_image_path"], row["method1_expected_answer"],
         "method1_query", pair("method1")),
        ("inter", q2, row["method2_composite_image_path"], row["method2_expected_answer"],
         "method2_query_with_position" if with_position else "method2_query_without_position",
         {**pair("method2"), "distractor_entity": row.get("distractor_entity"),
          "distractor_wikipedia_url": row.get("distractor_wikipedia_url"), "with_position": with_position}),
    ]
    out = []
    for side, question, image, answer, qcol, extra in specs:
        if not question.strip():
            raise DataError("missing question", file=file, row=rownum, field=qcol)
        try:
            out.append(Sample(id=f"{anchor}__{side}", question=question, images=[image] if image else [],
                              answers=_answers(answer, atype == "Numerical"), question_type=qtype, answer_type=atype,
                              entity=entity, dataset="infoseek",
                              meta={"augmented": {"variant": side, **common, **extra},
                                    SOURCE_KEY: {"format": "ara_augmented", "row": rownum}}))
        except ValidationError as e:
            raise from_validation_error(e, file=file, row=rownum) from None
    return out


def augmented_samples(path: str | Path, *, with_position: bool = False,
                      policy: ErrorPolicy | None = None) -> Iterator[Sample]:
    """Anchor, intra and inter Samples for each manifest row (inter keeps the question unless
    `with_position`, as the paper describes; the release's `method2_query` has the position cue)."""
    policy = policy or ErrorPolicy()
    policy.report.note("augmented_rows", "each row of an ARA augmented CSV gives 3 samples: <anchor>__anchor, "
                                         "__intra (method1) and __inter (method2)")
    for num, header, row in iter_csv(path, policy):
        if num == 2:
            missing = [c for c in AUGMENTED_REQUIRED if c not in header]
            if missing:
                raise DataError(f"missing column(s) {missing}", file=path, row=1, field=missing[0])
        try:
            if len(row) != len(header):
                raise DataError(f"expected {len(header)} cells, found {len(row)}", file=path, row=num)
            yield from augmented_row_samples(dict(zip(header, row)), file=path, rownum=num,
                                             with_position=with_position)
        except DataError as e:
            policy.handle(e)


def augmented_reference_rows(path: str | Path) -> Iterator[tuple[int, dict[str, str]]]:
    """The augmented manifest as reference rows, three per manifest row (anchor, intra, inter), in
    the ground-truth CSV's shape: (manifest row number, {data_id: <anchor>__<variant>, question,
    answer, question_type, wikipedia_url, wikipedia_title, dataset_name, image_path}). Every variant
    keeps the anchor's entity as its gold url; the inter question is the one without the position
    cue (as `augmented_samples`). Errors are raised, never skipped: these are references."""
    for num, header, row in iter_csv(path, ErrorPolicy()):
        if len(row) != len(header):
            raise DataError(f"expected {len(header)} cells, found {len(row)}", file=path, row=num)
        for s in augmented_row_samples(dict(zip(header, row)), file=path, rownum=num):
            yield num, {"data_id": s.id, "question": s.question, "answer": "|".join(s.answer_texts),
                        "question_type": s.question_type or "", "wikipedia_url": (s.entity and s.entity.url) or "",
                        "wikipedia_title": (s.entity and s.entity.title) or "", "dataset_name": s.dataset or "",
                        "image_path": s.images[0] if s.images else ""}


def read_ara(path: str | Path, *, policy: ErrorPolicy | None = None, with_position: bool = False,
             **_: Any) -> Iterator[Sample]:
    """Any ARA CSV: the augmented manifest as anchor/intra/inter Samples, the rest as E-VQA-shaped."""
    if ara_variant(path) == "augmented":
        return augmented_samples(path, with_position=with_position, policy=policy)
    return read_evqa(path, policy=policy, fmt="ara")


def write_ara(samples: Iterable[Sample], path: str | Path, **opts: Any) -> int:
    """Write ground-truth-shaped ARA CSV. Augmented Samples cannot be folded back into manifest rows
    here: use read_ara_augmented / write_ara_augmented for a lossless copy of the manifest."""

    def check(it: Iterable[Sample]) -> Iterator[Sample]:
        for s in it:
            src = s.meta.get(SOURCE_KEY)
            if isinstance(src, dict) and src.get("format") == "ara_augmented":
                raise DataError("augmented samples cannot be written as an ARA CSV; use "
                                "write_ara_augmented on the manifest rows", file=path, field="id")
            yield s

    return write_evqa(check(samples), path, **opts)
