"""The four audit stages on hand-made samples and a tiny in-memory KB."""

import asyncio
import json

import pytest

from kbvqa.data.schema import Article, Evidence, Sample, Section
from kbvqa.kb.base import InMemoryKB
from kbvqa.pipelines.audit import AuditConfig, audit_file, audit_records
from kbvqa.runner.stage import Context, Invalid
from kbvqa.stages.audit.derive import DeriveConfig, DeriveStage
from kbvqa.stages.audit.leakage import LeakageStage, leaked
from kbvqa.stages.audit.verify import VerifyConfig, VerifyStage, consensus

URL = "https://en.wikipedia.org/wiki/McLaren_F1"
KB = InMemoryKB([
    Article(url=URL, title="McLaren F1", sections=[
        Section(index=0, title="McLaren F1", text="The McLaren F1 is a sports car designed by Gordon Murray."),
        Section(index=3, title="Specifications", text="It weighs 1,301 kg (2,868 lb). Production began in 1992."),
    ]),
    Article(url="https://en.wikipedia.org/wiki/Tower", title="Tower", sections=[
        Section(index=0, title="Tower", text="The tower is a French landmark. It opened in 1986. "
                                              "It is 300 m tall."),
    ]),
])


def rec(question, answers, url=URL, **kw):
    return Sample(id=kw.pop("id", "s1"), question=question, answers=answers, entity={"url": url}, **kw).dump()


def run_all(record, kb=KB, config=None):
    return asyncio.run(audit_records([record], kb, config))[0]


def test_supported_answer_is_kept_with_provenance():
    out = run_all(rec("Who designed this car?", ["Gordon Murray"]))
    a = out["audit"]
    assert a["answer_support"] == "supported" and a["action"] == "keep"
    assert a["question_before"] == "Who designed this car?" and a["answers_before"] == ["Gordon Murray"]
    for name in ("verify", "derive", "posedness", "leakage"):
        assert a["stages"][name]["backend"] == "rules" and a["stages"][name]["version"]
        assert "rationale" in a["stages"][name]
    assert a["stages"]["verify"]["entailed_sections"] == [["kb", "0"]]


def test_contradicted_number_corrected_as_evidence_writes_it():
    out = run_all(rec("How many kilogram does this vehicle weigh?", ["1302"], answer_type="Numerical"))
    a = out["audit"]
    assert a["stages"]["verify"]["label"] == "contradicted"
    assert a["answer_support"] == "mismatched" and a["action"] == "repair"
    assert out["answers"] == ["1,301"]
    assert any(h["field"] == "answers" and h["stage"] == "derive" for h in out["history"])


def test_unsupported_is_dropped_and_missing_kb_is_not_an_error():
    out = run_all(rec("Who owns this car?", ["Ron Dennis"]))
    assert out["audit"]["answer_support"] == "unsupported" and out["audit"]["action"] == "drop"
    missing = run_all(rec("Who owns this car?", ["X"], url="https://en.wikipedia.org/wiki/Nope"))
    assert missing["audit"]["answer_support"] == "unsupported"
    assert missing["audit"]["stages"]["derive"]["reason"] == "missing_kb"
    # the paper requires the evidence to exist in the KB snapshot: a missing article is Unsupported, removed
    assert missing["audit"]["action"] == "drop" and "missing_kb" in missing["audit"]["reasons"]
    cfg = AuditConfig(derive=DeriveConfig(on_missing_kb="keep"))
    kept = run_all(rec("Who owns this car?", ["X"], url="https://en.wikipedia.org/wiki/Nope"), config=cfg)
    assert kept["audit"]["action"] == "keep"


def test_a_sample_that_names_no_article_is_refused_not_dropped(tmp_path):
    """Official InfoSeek rows carry a Wikidata id, no URL: 'the KB lacks the article' would drop every
    row, so the record ends error saying what the audit needs instead."""
    with pytest.raises(ValueError, match="names no KB article"):
        run_all(Sample(id="s1", question="Who owns this car?", answers=["X"], entity={"wikidata_id": "Q1"}).dump())
    inp = tmp_path / "in.jsonl"
    inp.write_text(Sample(id="w", question="Who owns this car?", answers=["X"],
                          entity={"wikidata_id": "Q1"}).model_dump_json() + "\n")
    out = tmp_path / "out.jsonl"
    audit_file(inp, KB, out, fmt="kbvqa")
    (row,) = map(json.loads, out.read_text().splitlines())
    assert row["status"] == "error" and "entity.url" in row["reason"]


def test_policy_is_configurable():
    cfg = AuditConfig(derive=DeriveConfig(on_unsupported="keep", on_mismatched="drop"))
    assert run_all(rec("Who owns this car?", ["Ron Dennis"]), config=cfg)["audit"]["action"] == "keep"
    out = run_all(rec("How many kilogram does this vehicle weigh?", ["1302"]), config=cfg)
    assert out["audit"]["action"] == "drop" and out["answers"] == ["1302"]


def test_full_date_reduced_to_the_year_the_evidence_states():
    out = run_all(rec("On what date did this building officially open?", ["1986 11 18"],
                      url="https://en.wikipedia.org/wiki/Tower", answer_type="Time"))
    assert out["audit"]["answer_support"] == "mismatched" and out["answers"] == ["1986"]


def test_machine_date_rewritten_in_evidence_form():
    kb = InMemoryKB([Article(url=URL, title="t", sections=[Section(index=0, text="In service on 27 October 1989.")])])
    out = run_all(rec("When did this aircraft enter service?", ["1989 10 27"], answer_type="Time"), kb=kb)
    assert out["answers"] == ["1989 10 27"] and "answer_format" not in out["audit"]["tags"]  # left as annotated
    cfg = AuditConfig(derive=DeriveConfig(normalise_formats=True))  # kbvqa's option, reported apart
    out = run_all(rec("When did this aircraft enter service?", ["1989 10 27"], answer_type="Time"), kb=kb, config=cfg)
    assert out["audit"]["answer_support"] == "supported" and out["answers"] == ["27 October 1989"]
    assert {"answer_format", "format_normalised"} <= set(out["audit"]["tags"])


def test_string_correction_only_to_an_evidence_span():
    kb = InMemoryKB([Article(url=URL, title="t", sections=[Section(index=0, text="The house is Victorian.")])])
    out = run_all(rec("What is the architectural style of this building?", ["Victorian architecture"]), kb=kb)
    assert out["audit"]["answer_support"] == "mismatched" and out["answers"] == ["Victorian"]
    # the evidence calls the building Victorian: the answer stands, no rewrite (head_noun match)
    kb = InMemoryKB([Article(url=URL, title="t", sections=[Section(index=0, text="A fine Victorian house.")])])
    out = run_all(rec("What is the architectural style of this building?", ["Victorian architecture"]), kb=kb)
    assert out["audit"]["answer_support"] == "supported" and out["answers"] == ["Victorian architecture"]
    assert out["audit"]["stages"]["derive"]["match"] == "head_noun" and not out["audit"]["flagged"]


def test_sample_evidence_used_before_kb_and_alternatives_pruned():
    r = Sample(id="e1", question="Which region is this plant native to?", answers=["Europe", "Mars"],
               evidence=[Evidence(text="It is native to Europe.")], entity={"url": "https://x/none"}).dump()
    out = run_all(r, config=AuditConfig(derive=DeriveConfig(prune_unsupported_alternatives=True)))
    assert out["audit"]["stages"]["verify"]["evidence_source"] == "sample"
    assert out["answers"] == ["Europe"] and "alternatives_pruned" in out["audit"]["tags"]
    assert run_all(r)["answers"] == ["Europe", "Mars"]  # default: supported answers left as annotated


def test_country_demonym_counts_as_support():
    out = run_all(rec("Which country is this tower in?", ["France"], url="https://en.wikipedia.org/wiki/Tower"))
    assert out["audit"]["answer_support"] == "supported"


def test_yes_no_answers_are_not_flagged_by_rules():
    out = run_all(rec("Is this car still produced?", ["No"]))
    assert out["audit"]["answer_support"] == "supported" and "unchecked_by_rules" in out["audit"]["tags"]


def test_posedness_tags_and_evidence_backed_repairs():
    kb = InMemoryKB([Article(url=URL, title="t", sections=[Section(index=0, text="First excavations began in 1925. "
                                                                                  "The summit is 2,925 m high.")])])
    out = run_all(rec("When were the first excavations in this area?", ["1925"]), kb=kb)
    assert "missing_temporal_scope" in out["audit"]["tags"]
    assert out["question"] == "In what year were the first excavations in this area?"
    assert out["audit"]["action"] == "repair"
    out = run_all(rec("What is the elevation of this mountain?", ["2925"], answer_type="Numerical"), kb=kb)
    assert out["question"] == "What is the elevation of this mountain in metres?"
    kb2 = InMemoryKB([Article(url=URL, title="t", sections=[Section(index=0, text="It lives in France.")])])
    out = run_all(rec("In which country or region does this animal live?", ["France"]), kb=kb2)
    assert out["question"] == "In which country does this animal live?"
    assert "missing_spatial_reference" in out["audit"]["tags"]


def test_leak_check_is_word_bounded_and_allows_choice_questions():
    from kbvqa.data.schema import Answer
    assert leaked("Is this plant annual or perennial?", [Answer(text="perennial")]) is None
    assert leaked("Which perennial plant is this?", [Answer(text="perennial")]) == "perennial"
    assert leaked("Where is Tirana?", [Answer(text="Iran")]) is None
    assert leaked("Which country built this French jet?", [Answer(text="France")]) is not None


def test_leaking_repair_is_rolled_back():
    r = rec("When did it happen?", ["1925"])
    r["audit"] = {"question_before": "When did it happen?", "answers_before": ["1925"], "action": "repair",
                  "tags": [], "reasons": [], "answer_support": "supported",
                  "stages": {"posedness": {"repaired": ["x"], "question_in": "When did it happen?"}}}
    r["question"] = "When in 1925 did it happen?"
    out = asyncio.run(LeakageStage().run(r, Context(kb=KB)))
    assert out["question"] == "When did it happen?" and "leak_rolled_back" in out["audit"]["tags"]


def test_consensus_policies():
    assert consensus(["entailed", "not_supported"], "all") == "entailed"
    assert consensus(["entailed", "not_supported"], "any") == "not_supported"
    assert consensus(["entailed", "contradicted", "not_supported"], "majority") == "contradicted"
    assert consensus(["entailed", "entailed", "not_supported"], "majority") == "entailed"


class FakeVerifier:
    backend, model = "fake", "m1"

    def __init__(self, label):
        self.label = label

    async def verify_section(self, question, answers, title, text):
        return {"label": self.label, "rationale": "fake"} if self.label else {"oops": 1}


def test_model_verifiers_join_the_consensus_and_bad_replies_are_invalid():
    r = rec("Who owns this car?", ["Ron Dennis"])
    st = VerifyStage(VerifyConfig(verifiers=["rules", "v2"], consensus="all"))
    out = asyncio.run(st.run(r, Context(kb=KB, roles={"v2": FakeVerifier("entailed")})))
    v = out["audit"]["stages"]["verify"]
    assert v["label"] == "entailed" and [x["backend"] for x in v["verifiers"]] == ["rules", "fake"]
    out = asyncio.run(DeriveStage().run(out, Context(kb=KB)))
    assert out["audit"]["answer_support"] == "supported"
    with pytest.raises(Invalid):
        asyncio.run(st.run(r, Context(kb=KB, roles={"v2": FakeVerifier(None)})))


def test_malformed_record_raises_with_id():
    with pytest.raises(ValueError, match="bad"):
        asyncio.run(VerifyStage().run({"id": "bad", "question": "q", "answers": [], "nope": 1}, Context(kb=KB)))


def test_stages_are_idempotent_on_their_own_output():
    once = run_all(rec("How many kilogram does this vehicle weigh?", ["1302"]))
    assert once["audit"]["answers_before"] == ["1302"]
    twice = asyncio.run(audit_records([once], KB))[0]
    assert twice["audit"]["answers_before"] == ["1302"] and twice["answers"] == ["1,301"]
    assert twice["audit"]["answer_support"] == "supported"


def test_unchecked_yes_no_is_not_dropped_by_the_final_recheck():
    out = run_all(rec("Is this car still produced?", ["Yes"]))
    assert out["audit"]["action"] == "keep" and "final_unsupported" not in out["audit"]["tags"]
