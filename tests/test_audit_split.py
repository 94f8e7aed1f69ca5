"""`kbvqa audit split` (issue 37): the fixed and unfixed splits of an audited file as files in the input's
format, aligned on the same ids, with kept / repaired / dropped and why; and scoring or a study against
an audited file that still holds dropped rows is refused unless --include-dropped.

On the demo's real audit, on InfoSeek JSONL (+ qtype file) made from the demo, and on the ARA rows in
../shared/data/ara (E-VQA CSV and the ARA InfoSeek CSV, repaired as the authors repaired them); the
ARA tests skip without that folder."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.formats import read_samples, write_samples
from kbvqa.data.schema import Answer
from kbvqa.evaluate.analyses import norm_text
from kbvqa.evaluate.io import ScoreInputError, including_dropped, load_infoseek_references
from kbvqa.evaluate.evqa import load_evqa_references
from kbvqa.evaluate.retrieval import load_retrieval_references
from kbvqa.pipelines.audit_split import qtypes_path, write_split
from kbvqa.stages.audit.record import join_record, split_record

runner = CliRunner()
ARA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ara" / "ground_truth"
needs_ara = pytest.mark.skipif(not (ARA / "evqa_fixed.csv").exists(), reason="ARA data not present")


@pytest.fixture(scope="module")
def demo(demo_copy, tmp_path_factory):
    return demo_copy(tmp_path_factory.mktemp("split") / "demo")[0]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _audited(samples, decisions: dict, path: Path, *, failed: dict | None = None) -> Path:
    """An audited file as `audit run` writes it: `decisions` id -> (action, question, answers, reasons);
    an id missing from it is kept as it is; `failed` id -> reason makes an error record."""
    with path.open("w", encoding="utf-8") as f:
        for s in samples:
            if failed and s.id in failed:
                f.write(json.dumps({**s.dump(), "status": "error", "reason": failed[s.id]}) + "\n")
                continue
            rec = s.dump()
            sample, audit = split_record(rec)
            action, q, answers, reasons = decisions.get(s.id, ("keep", None, None, []))
            if q is not None and q != sample.question:
                sample.record_change("posedness", "question", sample.question, q, "repaired")
                sample.question = q
            if answers is not None:
                sample.answers = [Answer(text=a) for a in answers]
            audit["action"], audit["reasons"] = action, list(reasons)
            audit["stages"] = {"posedness": {}, "derive": {}}
            f.write(json.dumps({**join_record(sample, audit), "status": "ok"}, ensure_ascii=False) + "\n")
    return path


# ------------------------------------------------------------------------------------------ the demo


def test_demo_split_aligns_ids_and_restores_the_original_rows(demo, tmp_path):
    audited = demo / "audit" / "audited.jsonl"
    res = write_split(audited, tmp_path / "fixed.jsonl", tmp_path / "unfixed.jsonl")
    recs = _lines(audited)
    drops = {r["id"] for r in recs if r["audit"]["action"] == "drop"}
    fixed, unfixed = _lines(tmp_path / "fixed.jsonl"), _lines(tmp_path / "unfixed.jsonl")
    assert [r["id"] for r in fixed] == [r["id"] for r in unfixed] == [r["id"] for r in recs if r["id"] not in drops]
    assert drops and res["dropped"] == len(drops) and res["drop_reasons"] == {"unsupported": len(drops)}
    actions = [r["audit"]["action"] for r in recs]
    assert (res["kept"], res["repaired"]) == (actions.count("keep"), actions.count("repair")) and res["repaired"]
    assert res["retained"] == len(fixed) == len(recs) - len(drops) and res["format"] == "kbvqa"
    assert sum(res["changes"].values()) == len(fixed) and res["changes"]["neither"] < len(fixed)
    original = {r["id"]: r for r in _lines(demo / "bench" / "samples.jsonl")}
    assert all(u == original[u["id"]] for u in unfixed)  # the content before the audit, nothing else
    assert all("audit" not in r and "status" not in r for r in fixed)
    assert any(f != original[f["id"]] for f in fixed)  # the repairs are in the fixed split
    assert json.loads((tmp_path / "fixed.split.json").read_text())["dropped"] == len(drops)
    # the demo writes its fixed.jsonl with the same function
    assert _lines(demo / "audit" / "fixed.jsonl") == fixed and (demo / "audit" / "unfixed.jsonl").is_file()


def test_cli_split_prints_the_counts_and_writes_them_beside(demo, tmp_path):
    audited = demo / "audit" / "audited.jsonl"
    actions = [r["audit"]["action"] for r in _lines(audited)]
    r = runner.invoke(app, ["audit", "split", str(audited), "--fixed", str(tmp_path / "f.jsonl"), "--unfixed",
                            str(tmp_path / "u.jsonl")])
    assert r.exit_code == 0, r.output
    assert f"kept {actions.count('keep')}, repaired {actions.count('repair')}" in r.output
    assert f"dropped {actions.count('drop')} (unsupported {actions.count('drop')}" in r.output
    assert (tmp_path / "f.split.json").is_file() and "wrote unfixed" in r.output
    r = runner.invoke(app, ["audit", "split", str(demo / "audit" / "audited.jsonl")])
    assert r.exit_code == 2 and "fixed split's path" in r.output


def test_audit_run_writes_the_splits_with_fixed_out(demo, tmp_path):
    bench = demo / "bench"
    r = runner.invoke(app, ["audit", "run", str(bench / "samples.jsonl"), "--kb", str(bench / "kb.sqlite"), "--out",
                            str(tmp_path / "a.jsonl"), "--fixed-out", str(tmp_path / "f.jsonl"), "--unfixed-out",
                            str(tmp_path / "u.jsonl"), "--json"])
    assert r.exit_code == 0, r.output
    split = json.loads(r.stdout)["split"]
    assert split["fixed"]["rows"] == split["unfixed"]["rows"] == split["retained"] == len(_lines(tmp_path / "f.jsonl"))
    assert split["retained"] + split["dropped"] == 38
    assert [x["id"] for x in _lines(tmp_path / "f.jsonl")] == [x["id"] for x in _lines(tmp_path / "u.jsonl")]


def test_scoring_an_audited_file_with_drops_is_refused_unless_asked(demo, tmp_path):
    audited = demo / "audit" / "audited.jsonl"
    preds = demo / "answers" / "predictions_fixed.jsonl"
    n_drop = sum(r["audit"]["action"] == "drop" for r in _lines(audited))
    for load in (load_infoseek_references, load_retrieval_references):
        with pytest.raises(ScoreInputError, match=rf"references hold {n_drop} dropped rows; use the fixed split"):
            load(audited)
        with including_dropped():
            assert len(load(audited)) == 38
        assert len(load(audited, include_dropped=True)) == 38
    evqa = tmp_path / "evqa_audited.jsonl"  # the E-VQA loader too (its own question types)
    evqa.write_text("".join(json.dumps({**r, "question_type": "templated"}) + "\n" for r in _lines(audited)))
    with pytest.raises(ScoreInputError, match=rf"references hold {n_drop} dropped rows"):
        load_evqa_references(evqa)
    with including_dropped():
        assert len(load_evqa_references(evqa)) == 38
    r = runner.invoke(app, ["score", "infoseek", "-p", str(preds), "-r", str(audited), "--json"])
    assert r.exit_code == 2 and f"{n_drop} dropped rows" in r.output and "--include-dropped" in r.output
    r = runner.invoke(app, ["score", "--include-dropped", "infoseek", "-p", str(preds), "-r", str(audited), "--json"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["study", "by-type", "-p", str(preds), "-r", str(audited), "--scorer", "infoseek-strict",
                            "--resamples", "100"])
    assert r.exit_code == 2 and "kbvqa audit split" in r.output
    r = runner.invoke(app, ["study", "--include-dropped", "by-type", "-p", str(preds), "-r", str(audited),
                            "--scorer", "infoseek-strict", "--resamples", "100"])
    assert r.exit_code == 0, r.output
    with pytest.raises(ScoreInputError):  # the flag did not outlive its command
        load_infoseek_references(audited)
    from kbvqa.evaluate.judge import read_judge_references  # the judge's references too

    with pytest.raises(ScoreInputError, match=rf"references hold {n_drop} dropped rows"):
        read_judge_references(audited)
    with including_dropped():
        assert len(read_judge_references(audited)) == 38
    write_split(audited, tmp_path / "fixed.jsonl")
    r = runner.invoke(app, ["score", "infoseek", "-p", str(preds), "-r", str(tmp_path / "fixed.jsonl"), "--mode",
                            "strict", "--json"])
    assert r.exit_code == 0 and json.loads(r.output.splitlines()[-1])["n"] == 38 - n_drop


# --------------------------------------------------------------------------------- InfoSeek JSONL


def test_infoseek_split_writes_jsonl_and_qtype_files_and_keeps_unchanged_lines(demo, tmp_path):
    src = [s for s in read_samples(demo / "bench" / "samples.jsonl", "kbvqa")][:8]
    write_samples(src, tmp_path / "val.jsonl", "infoseek", qtypes_out=tmp_path / "val_qtype.jsonl")
    samples = list(read_samples(tmp_path / "val.jsonl", "infoseek", qtypes=tmp_path / "val_qtype.jsonl"))
    ids = [s.id for s in samples]
    decisions = {ids[1]: ("drop", None, None, ["unsupported"]),
                 ids[2]: ("repair", None, ["Somewhere else"], ["answer_corrected"]),
                 ids[3]: ("repair", samples[3].question.rstrip("?") + " in 2001?", None, ["question_repaired"])}
    audited = _audited(samples, decisions, tmp_path / "audited.jsonl", failed={ids[4]: "verifier: HTTP 500"})
    res = write_split(audited, tmp_path / "out" / "fixed.jsonl", tmp_path / "out" / "unfixed.jsonl")
    assert res["format"] == "infoseek" and res["not_finished"] == 1
    assert res["not_finished_reasons"] == {"error: verifier: HTTP 500": 1}
    kept = [i for i in ids if i not in (ids[1], ids[4])]
    orig = {json.loads(line)["data_id"]: line for line in (tmp_path / "val.jsonl").read_text().splitlines()}
    unfixed = (tmp_path / "out" / "unfixed.jsonl").read_text().splitlines()
    fixed = [json.loads(line) for line in (tmp_path / "out" / "fixed.jsonl").read_text().splitlines()]
    assert [json.loads(line)["data_id"] for line in unfixed] == [f["data_id"] for f in fixed] == kept
    assert unfixed == [orig[i] for i in kept]  # byte for byte the input's lines
    by = {f["data_id"]: f for f in fixed}
    assert by[ids[2]]["answer_eval"] == ["Somewhere else"] and by[ids[3]]["question"].endswith("in 2001?")
    assert by[ids[0]] == json.loads(orig[ids[0]])
    qt = qtypes_path(tmp_path / "out" / "fixed.jsonl")
    assert qt.name == "fixed_qtype.jsonl" and res["fixed"]["qtypes"] == str(qt)
    assert [json.loads(line)["data_id"] for line in qt.read_text().splitlines()] == kept
    # the split reads back with its qtype file, question types as before
    back = list(read_samples(tmp_path / "out" / "fixed.jsonl", "infoseek", qtypes=qt))
    assert [(s.id, s.question_type) for s in back] == [(s.id, s.question_type) for s in samples if s.id in kept]


def test_a_split_with_nothing_retained_keeps_the_input_format(demo, tmp_path):
    src = list(read_samples(demo / "bench" / "samples.jsonl", "kbvqa"))[:3]
    write_samples(src, tmp_path / "val.jsonl", "infoseek")
    samples = list(read_samples(tmp_path / "val.jsonl", "infoseek"))
    audited = _audited(samples, {s.id: ("drop", None, None, ["missing_kb"]) for s in samples}, tmp_path / "a.jsonl")
    res = write_split(audited, tmp_path / "fixed.jsonl", tmp_path / "unfixed.jsonl", summary="")
    assert (res["format"], res["retained"], res["dropped"], res["drop_reasons"]) == ("infoseek", 0, 3, {"missing_kb": 3})
    assert (tmp_path / "fixed.jsonl").read_text() == "" and "summary_path" not in res
    with pytest.raises(ValueError, match="cannot write a split as 'csv'"):
        write_split(audited, tmp_path / "f.csv", fmt="csv")


# ------------------------------------------------------------------------------- ARA rows (shared)


def _ara_rows(name: str, n: int) -> tuple[list[str], list[dict]]:
    with (ARA / name).open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return list(rows[0]), rows[:n]


def _head(src: Path, dest: Path, n: int) -> Path:
    """The first n data rows of a shared ARA file (only rows that are in ../shared/data/ara)."""
    with src.open(newline="", encoding="utf-8") as f:
        lines = f.read().splitlines(keepends=True)
    dest.write_text("".join(lines[: n + 1]), encoding="utf-8", newline="")
    return dest


@needs_ara
def test_evqa_csv_split_with_the_authors_repairs(tmp_path):
    src = _head(ARA / "evqa_unfixed_test_with_id.csv", tmp_path / "evqa.csv", 40)
    samples = list(read_samples(src, "evqa"))
    _, fixed_rows = _ara_rows("evqa_fixed.csv", 2388)
    authors = {r["data_id"]: r for r in fixed_rows}
    decisions = {}
    for s in samples:
        f = authors[s.id]
        changed_q = f["question"] != s.question
        decisions[s.id] = ("repair" if changed_q else "keep", f["question"], None,
                           ["question_repaired"] if changed_q else [])
    dropped = samples[5].id
    decisions[dropped] = ("drop", None, None, ["unsupported"])
    res = write_split(_audited(samples, decisions, tmp_path / "audited.jsonl"), tmp_path / "fixed.csv",
                      tmp_path / "unfixed.csv")
    assert res["format"] == "evqa" and res["dropped"] == 1 and res["retained"] == 39
    with src.open(newline="", encoding="utf-8") as f:
        original = {r["data_id"]: r for r in csv.DictReader(f)}
    with (tmp_path / "unfixed.csv").open(newline="", encoding="utf-8") as f:
        unfixed = list(csv.DictReader(f))
    with (tmp_path / "fixed.csv").open(newline="", encoding="utf-8") as f:
        fixed = list(csv.DictReader(f))
    assert [r["data_id"] for r in unfixed] == [r["data_id"] for r in fixed] == [s.id for s in samples if s.id != dropped]
    assert all(r == original[r["data_id"]] for r in unfixed)  # every cell as the input had it
    assert all(r["question"] == authors[r["data_id"]]["question"] for r in fixed)
    assert res["repaired"] == sum(r["question"] != original[r["data_id"]]["question"] for r in fixed) > 0
    # what changed, by the ARA rule every seed-000 analysis uses (a case-only edit is no change)
    assert res["changes"]["question_only"] == sum(norm_text(r["question"]) != norm_text(original[r["data_id"]]["question"])
                                                  for r in fixed) > 0


@needs_ara
def test_ara_infoseek_csv_split_drops_what_the_authors_found_not_answerable(tmp_path):
    src = _head(ARA / "infoseek_unfixed_subset.csv", tmp_path / "infoseek.csv", 60)
    samples = list(read_samples(src))
    _, fixed_rows = _ara_rows("infoseek_fixed.csv", 992)
    authors = {r["data_id"]: r for r in fixed_rows}
    decisions = {}
    for s in samples:
        f = authors[s.id]
        if f["final_check_tag"] == "Not_answerable":
            decisions[s.id] = ("drop", None, None, ["not_answerable"])
        elif f["final_check_tag"] == "Needs_revision":
            decisions[s.id] = ("repair", f["question"], f["answer"].split("|"), ["answer_corrected"])
    res = write_split(_audited(samples, decisions, tmp_path / "audited.jsonl"), tmp_path / "fixed.csv",
                      tmp_path / "unfixed.csv")
    n_drop = sum(d[0] == "drop" for d in decisions.values())
    assert res["format"] == "ara" and res["dropped"] == n_drop and res["retained"] == 60 - n_drop
    assert res["repaired"] == sum(d[0] == "repair" for d in decisions.values()) > 0
    fixed = {s.id: s for s in read_samples(tmp_path / "fixed.csv")}
    unfixed = {s.id: s for s in read_samples(tmp_path / "unfixed.csv")}
    assert list(fixed) == list(unfixed) and not set(fixed) & {i for i, d in decisions.items() if d[0] == "drop"}
    for i, d in decisions.items():
        if d[0] == "repair":
            assert fixed[i].question == d[1] and unfixed[i].question == next(s for s in samples if s.id == i).question
    assert (tmp_path / "unfixed.csv").read_text().splitlines()[0] == src.read_text().splitlines()[0]
