"""The one review-sheet reader/writer (curation proofreading, reference audit): the same strictness
for every sheet kbvqa hands to people."""

from __future__ import annotations

import pytest

from kbvqa.data.errors import DataError
from kbvqa.data.sheets import read_sheet, write_sheet

ARGS = {"source": "items.jsonl", "noun": "item", "export": "kbvqa curate review-export"}


def test_write_refuses_a_sheet_that_may_hold_decisions(tmp_path):
    out = tmp_path / "s.csv"
    assert write_sheet(out, ("id", "decision"), [{"id": "a", "decision": ""}], overwrite=False, who="reviewers") == 1
    with pytest.raises(FileExistsError, match="reviewers' decisions"):
        write_sheet(out, ("id", "decision"), [], overwrite=False, who="reviewers")
    assert write_sheet(out, ("id", "decision"), [], overwrite=True, who="reviewers") == 0
    assert out.read_text() == "id,decision\n" and [p.name for p in tmp_path.iterdir()] == ["s.csv"]


def test_read_names_file_row_and_column(tmp_path):
    s = tmp_path / "s.csv"
    s.write_text('id,decision\na,accept\n"b",\n', encoding="utf-8")
    assert [(n, rid) for n, rid, _ in read_sheet(s, ("id", "decision"), {"a", "b"}, **ARGS)] == [(2, "a"), (3, "b")]
    with pytest.raises(DataError, match="missing column.*notes.*kbvqa curate review-export") as e:
        list(read_sheet(s, ("id", "notes"), {"a", "b"}, **ARGS))
    assert (e.value.row, e.value.field) == (1, "notes")
    with pytest.raises(DataError, match="no item 'b' in items.jsonl") as e:
        list(read_sheet(s, ("id",), {"a"}, **ARGS))
    assert e.value.row == 3
    s.write_text("id,decision\na,accept\na,reject\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"item 'a' appears again \(first at row 2\)"):
        list(read_sheet(s, ("id",), {"a"}, **ARGS))
    s.write_bytes(b"id,decision\na,caf\xe9\n")
    with pytest.raises(DataError, match="not UTF-8"):
        list(read_sheet(s, ("id",), {"a"}, **ARGS))
    with pytest.raises(DataError, match="sheet not found"):
        list(read_sheet(tmp_path / "none.csv", ("id",), {"a"}, **ARGS))
