"""audit diff, entity-unique subset, the agreement statistics (and their CLI commands)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.schema import Sample
from kbvqa.pipelines.audit_tools import (cohen_kappa, diff_versions, entity_unique_subset, fleiss_kappa,
                                        load_records)

ARA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ara" / "ground_truth"


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def s(id, q, a, url="https://w/E", qt="String", **kw):
    return Sample(id=id, question=q, answers=a, entity={"url": url} if url else None, question_type=qt, **kw).dump()


def test_diff_counts_normalised_changes_by_type_and_tag(tmp_path):
    a = write(tmp_path / "a.jsonl", [s("1", "What is it?", ["Red|Blue"]), s("2", "How tall?", ["5"], qt="Numerical"),
                                    s("3", "Where?", ["Paris"]), s("4", "Who?", ["Bo"]), s("9", "x", ["y"])])
    b_rows = [s("1", "what is it", ["blue", "red"]), s("2", "How tall in metres?", ["5.5"], qt="Numerical"),
              s("3", "In which city?", ["Paris"]), s("4", "Who?", ["Bob"]), s("7", "z", ["w"])]
    for r, tags in zip(b_rows, [[], ["answer_mismatch", "missing_attribute_constraint"], ["missing_spatial_reference"],
                                ["answer_mismatch"], []]):
        r["audit"] = {"tags": tags, "answer_support": "supported", "action": "keep"}
    b = write(tmp_path / "b.jsonl", b_rows)
    d = diff_versions(a, b, examples=2)
    assert d["joined"] == 4 and (d["neither"], d["question_only"], d["answer_only"], d["both"]) == (1, 1, 1, 1)
    # one definition with `study modification-rates`: "9" (only in A) is dropped, the shares are of the kept rows
    assert d["by_question_type"]["Numerical"]["both"] == 1 and d["by_question_type"]["String"]["n"] == 4
    assert (d["n"], d["dropped"], d["kept"], d["pct"]["neither"]) == (5, 1, 4, 25.0)
    assert d["by_tag"]["answer_mismatch"]["n"] == 2 and d["by_tag"]["answer_mismatch"]["answer_changed"] == 2
    assert d["by_tag"]["(none)"]["neither"] == 1
    assert d["only_in_a"] == {"count": 1, "ids": ["9"]} and d["only_in_b"]["ids"] == ["7"]
    assert d["examples"]["both"][0]["answers_b"] == ["5.5"]
    res = CliRunner().invoke(app, ["audit", "diff", str(a), str(b), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["joined"] == 4
    res = CliRunner().invoke(app, ["audit", "diff", str(a), str(b), "--examples", "1"])
    assert res.exit_code == 0 and "only in A: 1" in res.output


@pytest.mark.skipif(not (ARA / "infoseek_fixed.csv").exists(), reason="ARA data not present")
def test_diff_on_ara_infoseek_matches_the_protocol_table():
    d = diff_versions(ARA / "infoseek_unfixed_subset.csv", ARA / "infoseek_fixed.csv")
    # ara-protocol.md §4 (all 1,924 rows): Q only 44.9, A only 7.2, both 31.0, neither 16.9
    for cat, ref in {"question_only": 44.9, "answer_only": 7.2, "both": 31.0, "neither": 16.9}.items():
        assert abs(d["pct"][cat] - ref) < 4, (cat, d["pct"])
    assert d["only_in_a"]["count"] == 0 and d["by_question_type"]["Numerical"]["pct"]["both"] > 45


def test_entity_unique_subset_is_deterministic(tmp_path):
    rows = [s("3", "Where is it?", ["A"]), s("1", "Where is it ?", ["A"], images=["i1"]),
            s("2", "Where is it?", ["A"], url="https://w/F"), s("4", "Who made it?", ["B"]),
            s("5", "Where is it?", ["A"], url=None), s("6", "Where is it?", ["A"], url=None)]
    recs = load_records(write(tmp_path / "in.jsonl", rows))
    kept, st = entity_unique_subset(recs)
    assert [r["id"] for r in kept] == ["1", "2", "4", "5", "6"]  # smallest id of the E/"where" group
    assert st["removed"] == 1 and st["groups_with_duplicates"] == 1 and st["no_entity"] == 2 and st["entities"] == 2
    seeded = [entity_unique_subset(recs, seed=7)[0] for _ in range(2)]
    assert seeded[0] == seeded[1]
    out = tmp_path / "sub.jsonl"
    res = CliRunner().invoke(app, ["audit", "subset", str(tmp_path / "in.jsonl"), "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["kept"] == 5 and len(out.read_text().splitlines()) == 5


# The human-evaluation sheets are tests/test_human_eval.py's.


def test_kappa_reference_values():
    assert cohen_kappa([1, 1, 0, 0], [1, 1, 0, 0]) == 1.0
    assert cohen_kappa([1, 0, 1, 0], [1, 1, 0, 0]) == 0.0
    assert cohen_kappa([1, 1], [1, 1]) is None  # one category only: undefined, not 1
    # Fleiss (1971)-style check: perfect agreement -> 1; 2 raters reduce to Scott's pi
    assert fleiss_kappa([[1, 1], [0, 0], [1, 1]]) == 1.0
    assert fleiss_kappa([[1, 0], [0, 1]]) == pytest.approx(-1.0)
