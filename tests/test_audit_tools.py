"""audit diff, entity-unique subset, human-evaluation export/import (and their CLI commands)."""

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.schema import Sample
from kbvqa.pipelines.audit_tools import (cohen_kappa, diff_versions, entity_unique_subset, fleiss_kappa,
                                        human_export, human_import, load_records)

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


def _audited(tmp_path, n=60):
    rows = []
    for i in range(n):
        r = s(f"id{i:03d}", f"Question {i}?", [f"ans{i}"], qt="String" if i % 3 else "Numerical",
              evidence=[{"text": f"The answer is ans{i}."}])
        drop = i % 4 == 0
        r["audit"] = {"answer_support": "unsupported" if drop else "supported", "action": "drop" if drop else "keep",
                      "tags": []}
        r["status"] = "ok"
        rows.append(r)
    rows.append({"id": "bad", "question": "q", "status": "invalid", "reason": "x"})
    return write(tmp_path / "audited.jsonl", rows)


def test_human_export_is_stratified_blind_and_seeded(tmp_path):
    audited = _audited(tmp_path)
    res = human_export(audited, tmp_path / "sheet.csv", fraction=0.2, seed=3, annotators=2)
    assert res["skipped_not_ok"] == 1 and len(res["strata"]) == 4
    assert all(v["sampled"] == max(1, round(0.2 * v["size"])) for v in res["strata"].values())
    sheets = [list(csv.DictReader(open(p))) for p in res["sheets"]]
    assert [r["id"] for r in sheets[0]] == [r["id"] for r in sheets[1]] and len(sheets[0]) == res["sampled"]
    assert "action" not in sheets[0][0] and "answer_support" not in sheets[0][0]  # blind
    assert sheets[0][0]["evidence"].startswith("The answer is")
    cli = CliRunner().invoke(app, ["audit", "human-export", str(audited), "--out", str(tmp_path / "again.csv"),
                                   "--fraction", "0.2", "--seed", "3", "--annotators", "1", "--json"])
    assert cli.exit_code == 0, cli.output
    again = json.loads(cli.output)
    assert [r["id"] for r in csv.DictReader(open(again["sheets"][0]))] == [r["id"] for r in sheets[0]]


def test_human_import_accuracy_agreement_and_kappa(tmp_path):
    res = human_export(_audited(tmp_path), tmp_path / "sheet.csv", fraction=0.5, seed=1, annotators=3)
    key = {r["id"]: r for r in csv.DictReader(open(res["key"]))}
    for j, p in enumerate(res["sheets"]):
        rows = list(csv.DictReader(open(p)))
        for k, r in enumerate(rows):
            truth = key[r["id"]]["audit_valid"] == "yes"
            flip = (j == 1 and k < 3) or (j == 2 and k < 6)
            if j == 2 and k == len(rows) - 1:
                r["human_answer"] = r["answer"] if truth else "something else"  # answer instead of yes/no
            else:
                r["human_valid"] = "yes" if truth != flip else "no"
        with open(p, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    out = human_import(res["sheets"])
    n = res["sampled"]
    a = out["annotators"]
    assert a["sheet.a1"]["accuracy"] == 1.0 and a["sheet.a2"]["accuracy"] == round((n - 3) / n, 4)
    assert a["sheet.a3"]["annotated"] == n and a["sheet.a3"]["answer_accuracy"] is not None
    assert out["accuracy"]["mean"] == pytest.approx((1 + (n - 3) / n + (n - 6) / n) / 3, abs=1e-3)
    assert out["accuracy"]["std"] > 0
    assert out["pairwise"]["sheet.a1 vs sheet.a2"]["agreement"] == round((n - 3) / n, 4)
    assert 0 < out["fleiss_kappa"] < 1 and out["items_rated_by_all"] == n
    cli = CliRunner().invoke(app, ["audit", "human-import", *res["sheets"], "--json"])
    assert cli.exit_code == 0, cli.output
    assert json.loads(cli.output)["fleiss_kappa"] == out["fleiss_kappa"]
    bad = Path(res["sheets"][0])
    bad.write_text(bad.read_text().replace(",yes,", ",perhaps,", 1))
    with pytest.raises(ValueError, match="perhaps"):
        human_import([bad])


def test_kappa_reference_values():
    assert cohen_kappa([1, 1, 0, 0], [1, 1, 0, 0]) == 1.0
    assert cohen_kappa([1, 0, 1, 0], [1, 1, 0, 0]) == 0.0
    assert cohen_kappa([1, 1], [1, 1]) is None  # one category only: undefined, not 1
    # Fleiss (1971)-style check: perfect agreement -> 1; 2 raters reduce to Scott's pi
    assert fleiss_kappa([[1, 1], [0, 0], [1, 1]]) == 1.0
    assert fleiss_kappa([[1, 0], [0, 1]]) == pytest.approx(-1.0)
