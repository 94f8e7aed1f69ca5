"""benchmarks/audit_ara.py: a recorded run of the LLM path against the local scripted server (two
verifiers, P/R/F1 per decision path, consensus and Cohen's kappa) on a tiny ARA-shaped dataset written
here, and the rules-only run on the real ARA dev half when it is present (skipped otherwise)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import audit_ara
from fake_llm_server import FakeLLMServer, ok

W = "https://en.wikipedia.org/wiki/"
# (id, title, question, unfixed answer, fixed answer, evidence)
INFOSEEK = [
    ("is1", "Tower One", "Who designed this building?", "Gordon Murray", "Gordon Murray",
     "The tower was designed by Gordon Murray in 1990."),
    ("is2", "Tower Two", "How tall is this building in metres?", "45", "41",
     "The tower is 41 metres tall."),
    ("is3", "Tower Three", "Who owns this building?", "Ron Dennis", "McLaren Group",
     "The tower is owned by the McLaren Group."),
    ("is4", "Asakusa Shrine", "What is this building named after?", "Asakusa", "Kannon",
     "Asakusa Shrine stands in Asakusa and honours Kannon."),
    ("is5", "Tower Five", "Which river flows past this building?", "Seine", "Seine",
     "The tower stands on the bank of a river and was finished in 1889 ..."),
]
EVQA = [
    ("ev1", "Bird One", "What does this bird eat?", "insects", "insects", "It feeds on insects and seeds."),
    ("ev2", "Bird Two", "Where does this bird live?", "Peru", "Peru", "It breeds in the Andes of Peru."),
    ("ev3", "Bird Three", "Who first described this bird?", "John Gould", "John Gould",
     "The bird was described in 1840 by an English ornithologist."),
    ("ev4", "Bird Four", "On which continent does this bird live?", "South America", "South America",
     "It breeds in the Andes of Peru."),
]


def _write(path: Path, header: list[str], rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "0") for k in header})


def write_dataset(d: Path) -> None:
    d.mkdir(parents=True)
    def base(i: str, t: str, q: str, a: str) -> dict[str, str]:
        return {"data_id": i, "wikipedia_title": t, "wikipedia_url": W + t.replace(" ", "_"),
                "question_original": q, "question": q, "answer": a}
    _write(d / "infoseek_unfixed_subset.csv",
           ["wikipedia_title", "wikipedia_url", "question_original", "question", "question_type", "answer", "evidence",
            "evidence_section_id", "evidence_section_title", "dataset_name", "dataset_category_id",
            "wikipedia_url_used_in_train", "encyclopedic_vqa_split", "dataset_image_ids", "data_id"],
           [{**base(i, t, q, a), "question_type": "Numerical" if a.isdigit() else "String", "dataset_name": "infoseek"}
            for i, t, q, a, _, _ in INFOSEEK])
    _write(d / "infoseek_fixed.csv",
           ["data_id", "wikipedia_title", "wikipedia_url", "question_original", "dataset_image_ids", "question", "answer",
            "final_evidence", "evidence", "evidence_section_id", "evidence_section_title", "question_type",
            "final_check_tag", "final_check_reason", "final_model"],
           [{**base(i, t, q, g), "final_evidence": e, "evidence": e, "evidence_section_title": t, "question_type": "String",
             "final_check_tag": "OK"} for i, t, q, _, g, e in INFOSEEK])
    _write(d / "evqa_unfixed_test_with_id.csv",
           ["data_id", "wikipedia_title", "wikipedia_url", "question_original", "question", "question_type", "answer",
            "evidence", "evidence_section_id", "evidence_section_title", "dataset_name", "dataset_category_id",
            "wikipedia_url_used_in_train", "encyclopedic_vqa_split", "dataset_image_ids"],
           [{**base(i, t, q, a), "question_type": "templated", "evidence": e, "evidence_section_title": t,
             "dataset_name": "inaturalist", "encyclopedic_vqa_split": "test"} for i, t, q, a, _, e in EVQA])
    _write(d / "evqa_fixed.csv",
           ["data_id", "wikipedia_title", "wikipedia_url", "question_type", "encyclopedic_vqa_split", "dataset_image_ids",
            "question_before_review", "question", "answer", "evidence", "evidence_section_id", "evidence_section_title",
            "final_check_reason", "dataset_name"],
           [{**base(i, t, q, g), "question_type": "templated", "question_before_review": q, "evidence": e,
             "evidence_section_title": t, "dataset_name": "inaturalist"} for i, t, q, _, g, e in EVQA])


def scripted(model_b_disagrees: bool = True):
    """Verifier: entailed when the annotated answer is written in the section; "South America" for
    Peru is accepted by the first model only; the shrine's own name is contradicted. Repairer: the
    value named in the section when there is one. Checker: fine."""
    def handler(req: dict):
        system, user = req["messages"][0]["content"], req["messages"][-1]["content"]
        if "check benchmark annotations" in system:
            claimed = next(x for x in user.splitlines() if x.startswith("Annotated answer"))
            answer = json.loads(claimed.split(": ", 1)[1])[0]
            section = next(x for x in user.splitlines() if x.startswith("Section text"))
            label = "entailed" if answer.lower() in section.lower() else "not_supported"
            if answer == "South America":  # Peru is in South America: the models disagree on it
                label = "not_supported" if model_b_disagrees and req["model"] == "fake-b" else "entailed"
            if answer in ("Asakusa", "45", "Ron Dennis"):  # another value read in every section: mismatched
                label = "contradicted"
            return ok(json.dumps({"label": label, "rationale": "scripted"}))
        if "repair benchmark answers" in system:
            if "McLaren Group" in user:
                return ok(json.dumps({"status": "mismatched", "answer": "McLaren Group",
                                      "evidence_quote": "owned by the McLaren Group", "rationale": "owner"}))
            if "Kannon" in user:
                return ok(json.dumps({"status": "mismatched", "answer": "Kannon", "evidence_quote": "honours Kannon",
                                      "rationale": "named after"}))
            return ok(json.dumps({"status": "not_answerable", "answer": None, "rationale": "not stated"}))
        if "flag questions" in system:
            return ok(json.dumps({"tags": [], "suggested_question": None, "rationale": "clear"}))
        return ok(json.dumps({"leak": False, "answerable": True, "unique": True, "rationale": "fine"}))
    return handler


def test_llm_path_recorded_run_against_the_scripted_server(tmp_path, capsys):
    data = tmp_path / "ara"
    write_dataset(data)
    out = tmp_path / "bench.json"
    with FakeLLMServer(handler=scripted()) as srv:
        rc = audit_ara.main(["--data", str(data), "--llm", srv.base_url, "--model", "fake-a",
                             "--llm2", srv.base_url, "--model2", "fake-b", "--json", str(out), "--timeout", "10"])
        verify_calls = [r for r in srv.requests if "check benchmark annotations" in r["json"]["messages"][0]["content"]]
    assert rc == 0
    printed = capsys.readouterr().out
    assert "Per decision path" in printed and "| InfoSeek | llm |" in printed and "| InfoSeek | rules |" in printed
    rows = {m["name"]: m for m in json.loads(out.read_text())}
    info, evqa = rows["InfoSeek"], rows["E-VQA"]
    assert info["n"] == 5 and evqa["n"] == 4 and info["failed"] == evqa["failed"] == 0
    # the rules decide is1 (stated in the evidence); the models everything the rules cannot
    assert info["paths"]["rules"]["n"] == 1 and info["paths"]["llm"]["n"] == 4
    assert info["paths"]["llm"]["tp"] == 3 and info["tp"] == 3 and info["fp"] == 0  # is2, is3, is4
    assert info["rewrites_equal"] == 3  # 41, McLaren Group, Kannon: the authors' answers
    assert info["inconclusive"] == 1  # is5: the evidence is cut off
    assert info["summary"]["decided_by"] == {"llm": 4, "rules": 1}
    # no verifier call for a sample the rules decided (answer written in the evidence)
    asked = {json.loads(next(x for x in r["json"]["messages"][-1]["content"].splitlines()
                              if x.startswith("Annotated answer")).split(": ", 1)[1])[0] for r in verify_calls}
    assert not asked & {"Gordon Murray", "insects", "Peru"}
    assert {"45", "Ron Dennis", "Asakusa", "Seine", "John Gould", "South America"} <= asked
    # two verifiers: per-verifier labels, consensus (policy all) and Cohen's kappa
    v = evqa["summary"]["verifiers"]
    assert v["per_verifier"] == {"verifier#1": {"not_supported": 1, "entailed": 1},
                                 "verifier#2": {"not_supported": 2}}
    assert v["consensus"] == {"not_supported": 1, "entailed": 1}  # one verifier's support keeps a sample
    pair = v["agreement"][0]
    assert (pair["a"], pair["b"], pair["n"], pair["agreement"], pair["both_unsupported"]) == \
        ("verifier#1", "verifier#2", 2, 0.5, 1)
    assert pair["kappa"] == 0.0
    assert evqa["paths"]["llm"]["n"] == 2 and evqa["fp"] == 1  # ev3: neither evidence nor model supports it


@pytest.mark.skipif(not (audit_ara.DEFAULT / "infoseek_fixed.csv").exists(), reason="ARA data not present")
def test_rules_only_run_on_the_ara_dev_half(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert audit_ara.main(["--limit", "120", "--json", str(out)]) == 0
    rows = {m["name"]: m for m in json.loads(out.read_text())}
    for m in rows.values():
        assert m["n"] == 120 and set(m["paths"]) <= {"rules", "undecided"}
        assert m["summary"]["flagged"] == m["flagged"]
    assert "samples/s" in capsys.readouterr().out
