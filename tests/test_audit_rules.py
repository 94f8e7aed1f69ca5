"""One small example per rule of the rules audit (issue 10): the false-flag classes, the missed-problem
classes rules can catch, the classes handed to a model, flags, evidence spans and the summary."""

import asyncio

import pytest

from kbvqa.data import matching as mt
from kbvqa.data.schema import Answer, Article, Evidence, Sample, Section
from kbvqa.kb.base import InMemoryKB
from kbvqa.pipelines.audit import AuditConfig, audit_records, audit_summary
from kbvqa.stages.audit.classes import model_classes, rank_stated, taxonomy_settled
from kbvqa.stages.audit.derive import DeriveConfig, correct_numeric, distinct_answers, evidence_number
from kbvqa.stages.audit.evidence import EvidenceUnit, expand_truncated, match_answer, match_part
from kbvqa.stages.audit.posedness import unit_conflict

URL = "https://en.wikipedia.org/wiki/Thing"


def kb_of(*texts, title="Thing", titles=None):
    return InMemoryKB([Article(url=URL, title=title, sections=[
        Section(index=i, title=(titles or [""] * len(texts))[i], text=t) for i, t in enumerate(texts)])])


def audit(question, answers, *texts, kb=None, entity_title=None, evidence=None, config=None, roles=None, **kw):
    s = Sample(id=kw.pop("id", "s1"), question=question, answers=answers,
               entity={"url": URL, "title": entity_title}, evidence=evidence or [], **kw).dump()
    return asyncio.run(audit_records([s], kb or kb_of(*texts), config, roles=roles))[0]


def kind(part, text, question=None, title=None):
    m = match_part(part, text, question, title)
    return m.kind if m else None


# ------------------------------------------------------------------------------ tokenisation classes

def test_ordinals_match_in_digits_or_words():
    assert mt.norm("8th") == mt.norm("eighth") == "8th" and mt.norm("21st") == "21st"
    assert mt.contains("built in the eighth century", "8th century")
    assert mt.contains("the 1st Battalion", "first battalion")
    assert not mt.contains("built in the 8th century", "9th century")
    assert mt.parse_quantity("8th") is None  # an ordinal is not the number 8


def test_possessive_is_dropped_from_the_word():
    assert mt.find_phrase("an art museum in one of Venice's old customs buildings", "Venice") == "Venice's"
    assert mt.contains("Punta della Dogana is one of Venice's old customs buildings", "Venice")
    assert mt.norm("Lloyd’s") == mt.norm("Lloyd's") == "lloyd"


def test_plural_and_singular_match_as_inflection():
    assert kind("convict", "The island held convicts until 1850.") == "inflection"
    assert kind("oak trees", "It grows under an oak tree.") == "inflection"
    assert mt.stem("cities") == "city" and mt.stem("marshes") == "marsh" and mt.stem("grass") == "grass"
    assert kind("convict", "The island held no prisoners.") is None


def test_inflected_demonyms_and_polities():
    assert kind("Ottoman Empire", "The fortress was taken by the Ottomans in 1521.") == "inflection"
    assert kind("Inca Empire", "a 15th-century Inca citadel") == "equivalent"
    assert kind("Persian", "built by Ottoman and Persians craftsmen") == "inflection"
    assert kind("Ming dynasty", "a Ming vase") == "equivalent"


def test_exonyms_local_spellings_and_saint_prefixes():
    assert kind("Munich", "The brewery is in München.") == "equivalent"
    assert kind("Cologne", "Der Dom in Köln") == "equivalent"
    assert kind("Saint Sebastian", "the statue of San Sebastian on top") == "equivalent"
    assert kind("Henry II of England", "during the reign of Henry II the castle grew") == "equivalent"
    assert kind("Munich", "The brewery is in Berlin.") is None


def test_abbreviated_binomials_and_initials():
    assert mt.find_abbreviated("Fossils of H. sapiens were found.", "Homo sapiens") == "H. sapiens"
    assert mt.find_abbreviated("created by Florence Kate Upton", "Florence K. Upton") == "Florence Kate Upton"
    assert mt.find_abbreviated("Fossils of H. erectus were found.", "Homo sapiens") is None
    assert mt.find_abbreviated("Homo sapiens", "Homo sapiens") is None  # exact: find_phrase's job
    assert kind("Homo sapiens", "Fossils of H. sapiens were found.") == "abbreviation"


def test_coordination_adjective_month_range_and_list_etc():
    assert kind("tannic acid", "The roots are rich in tannic and gallic acids.") == "coordination"
    assert mt.find_coordinated("high tannic content and citric acid", "tannic acid") is None
    assert kind("Sonora", "It grows in Sonoran desert scrub.") == "adjective"
    assert kind("sonora", "It grows in Sonoran desert scrub.") is None  # a proper name only
    assert kind("August", "Breeding runs from July to September.") == "month_range"
    assert kind("December", "Breeding runs from July to September.") is None
    assert kind("Brown Trout, Ohrid trout etc.", "fish include Brown Trout, Ohrid trout and eels") == "list"


def test_section_heading_is_support_but_needs_a_model():
    out = audit("What is the process of growing this plant?", ["Cultivation"], kb=kb_of(
        "The bulb grows best in well-drained soil.", titles=["Cultivation"]))
    a = out["audit"]
    assert a["answer_support"] == "supported" and a["stages"]["derive"]["match"] == "section_title"
    assert "answer_role" in a["needs_model"] and a["decided_by"] == "undecided" and not a["flagged"]


# ------------------------------------------------------------------------- rewrites that strip a head

def test_head_noun_the_evidence_uses_is_not_stripped():
    assert kind("Gothic architecture", "The Marienstiftskirche is a late Gothic hall church.") == "head_noun"
    assert kind("eclectic architecture", "a monumental building in a highly eclectic style") == "head_noun"
    out = audit("What is the architectural style of this building?", ["Gothic architecture"],
                "The church is a late Gothic hall church.")
    assert out["answers"] == ["Gothic architecture"] and not out["audit"]["flagged"]
    out = audit("What is the architectural style of this building?", ["Gothic architecture"],
                "Its nave and transepts are Gothic.")
    assert out["answers"] == ["Gothic"] and out["audit"]["flagged"]


# ---------------------------------------------------------------------------------- truncated evidence

def test_truncation_marks():
    assert mt.is_truncated("It was founded by the Serbian king ...") and mt.is_truncated("and the lake…")
    assert mt.is_truncated("teammates Jim Landis, J. C.")
    assert not mt.is_truncated("It holds vitamin C.") and not mt.is_truncated("made in the U.S.")


def test_answer_missing_from_truncated_evidence_is_inconclusive_not_unsupported():
    cut = "The tower was designed by Gordon Murray and built by a team of ..."
    out = audit("Who owns this tower?", ["Ron Dennis"], cut)
    a = out["audit"]
    assert a["answer_support"] == "unsupported" and a["stages"]["derive"]["reason"] == "truncated_evidence"
    assert a["action"] == "keep" and a["flags"] == ["truncated_evidence"] and not a["flagged"]
    assert "truncated_evidence" in a["needs_model"] and a["decided_by"] == "undecided"
    s = audit_summary([out, audit("Who owns this tower?", ["Ron Dennis"], "The tower was designed by Gordon Murray.")])
    assert s["unsupported_reasons"] == {"truncated_evidence": 1, "not_in_evidence": 1}
    assert s["flagged"] == 1 and s["flags"]["truncated_evidence"] == 1


def test_truncated_sample_span_is_read_in_full_from_the_kb_section():
    full = ("The tower was designed by Gordon Murray and built by a team of engineers. "
            "It is owned by Ron Dennis.")
    cut = "The tower was designed by Gordon Murray and built by a team of ..."
    s = Sample(id="t", question="Who owns this tower?", answers=["Ron Dennis"], entity={"url": URL},
               evidence=[Evidence(text=cut)])
    units = expand_truncated([EvidenceUnit(cut, None, None, "sample")], s, kb_of(full))
    assert units[0].text == full and units[0].expanded and not units[0].truncated
    out = audit("Who owns this tower?", ["Ron Dennis"], kb=kb_of(full), evidence=[Evidence(text=cut)])
    assert out["audit"]["answer_support"] == "supported" and out["audit"]["evidence"][0]["expanded_from_kb"]


# ------------------------------------------------------------------------------------------- numbers

def test_answer_built_from_several_numbers_is_checked_part_by_part():
    text = ("The adult male has a wingspan of 59–64 cm (23–25 in). The female is larger, with a wingspan "
            "of 67–80 cm (26–31 in).")
    ans = "male 59–64 cm (23–25 in) and female 67–80 cm (26–31 in)"
    assert kind(ans, text) == "numbers"
    assert kind("male 59–64 cm and female 67–90 cm", text) is None  # one part not stated
    out = audit("What is the wingspan of this bird?", [ans], text)
    assert out["answers"] == [ans] and not out["audit"]["flagged"]  # never rewritten to one of them


def test_range_merged_from_two_stated_ranges_is_supported():
    text = "Males are 59–64 cm long and females 67–80 cm."
    assert kind("59–80 cm", text) == "range_parts"
    assert kind("3 to 4 months", "Adults survive for three or four months.") == "range_parts"
    assert kind("59–90 cm", text) is None


def test_single_number_inside_a_range_is_rewritten_to_the_range_with_its_unit():
    out = audit("How many centimetre is the wingspan of this bird?", ["180"], "Its wingspan is 170–200 cm.",
                answer_type="Numerical")
    a = out["audit"]
    assert out["answers"] == ["170–200 cm"] and a["answer_support"] == "mismatched" and a["flagged"]
    assert "range" in a["stages"]["derive"]["rationale"]
    # the question names the unit: a range still keeps it ("65–75 cm", not "65–75")
    out = audit("How many centimetre is the wingspan of this bird?", ["70"], "The wingspan is 65–75 cm.")
    assert out["answers"] == ["65–75 cm"]
    # a question asking the maximum is answered by the range's end: supported, no rewrite
    out = audit("What is the maximum wingspan of this bird in cm?", ["200"], "Its wingspan is 170–200 cm.")
    assert out["answers"] == ["200"] and out["audit"]["stages"]["derive"]["match"] == "range_end"
    # a number is never found as the end of a range
    assert kind("7", "a height of 6–7 m") is None


def test_single_value_keeps_the_evidence_unit_unless_the_question_names_it():
    q = mt.find_quantities("It is 41 metres tall.")[0]
    assert evidence_number("How tall is this tower in metres?", q) == "41"
    assert evidence_number("How tall is this tower?", q) == "41 metres"
    assert evidence_number("How tall is this tower in metres?", q, keep_units="always") == "41 metres"
    assert correct_numeric("How tall is this tower in metres?", Answer(text="45"), "It is 41 metres tall.")[0] == "41"
    assert correct_numeric("How tall is this tower?", Answer(text="45 m"), "It is 41 metres tall.")[0] == "41 metres"


def test_number_words_written_as_digits_when_the_question_asks_a_number():
    out = audit("How long do adults of this insect live?", ["3 weeks"], "Adults survive for four months.")
    assert out["audit"]["answer_support"] == "unsupported"  # weeks vs months: no conversion, no rewrite
    out = audit("How many months do adults of this insect live?", ["3"], "Adults survive for four months.")
    assert out["answers"] == ["4"]
    out = audit("How long do adults of this insect live?", ["3 months"], "Adults survive four months.")
    assert out["answers"] == ["4 months"]
    assert mt.number_words_to_digits("twenty-five to thirty eggs") == "25 to 30 eggs"


NORMALISE = AuditConfig(derive=DeriveConfig(normalise_formats=True))  # kbvqa's option, off by default


def test_machine_numbers_and_bare_counts_are_written_as_the_evidence_writes_them():
    out = audit("How many days does the gestation of this animal take?", ["28.0-30.0"],
                "Gestation lasts 28 to 30 days.")
    assert out["answers"] == ["28.0-30.0"] and out["audit"]["action"] == "keep"  # the paper: left as annotated
    out = audit("How many days does the gestation of this animal take?", ["28.0-30.0"],
                "Gestation lasts 28 to 30 days.", config=NORMALISE)
    assert out["answers"] == ["28 to 30 days"] and "answer_format" in out["audit"]["tags"] and out["audit"]["flagged"]
    out = audit("What is the area in square kilometre of this lake?", ["4.10"], "The lake covers 4.1 km².",
                config=NORMALISE)
    assert out["answers"] == ["4.1"]
    out = audit("How many aircraft of this type were built?", ["1010"], "In total 1,010 were built.", config=NORMALISE)
    assert out["answers"] == ["1,010"]
    out = audit("What is the height of this mountain in metres?", ["2017"], "The summit is 2,017 m high.",
                config=NORMALISE)
    assert out["answers"] == ["2017"] and not out["audit"]["flagged"]  # a measure with its unit: kept


def test_question_counting_in_a_scale():
    assert kind("eleven", "approximately eleven million coins pass through each year",
                "Approximately how many millions of coins pass through the arcade?") == "number"
    assert kind("eleven", "approximately eleven million coins pass through each year") is None


# ---------------------------------------------------------------------------------------- alternatives

def test_alternatives_the_evidence_does_not_support_are_pruned_as_a_repair():
    out = audit("Which city is this bridge in?", ["Paris", "Lyon"], "The bridge crosses the Seine in Paris.")
    assert out["answers"] == ["Paris", "Lyon"] and out["audit"]["action"] == "keep"  # default: as annotated
    out = audit("Which city is this bridge in?", ["Paris", "Lyon"], "The bridge crosses the Seine in Paris.",
                config=NORMALISE)
    a = out["audit"]
    assert out["answers"] == ["Paris"] and "alternatives_pruned" in a["tags"] and a["action"] == "repair"
    assert a["answer_support"] == "supported" and a["flagged"] and "answer_rewritten" in a["flags"]
    # a rewording of a supported alternative is not a different answer: kept, not flagged
    out = audit("Where does this plant grow?", ["Europe and Asia", "Europe, Asia and Siberia"],
                "It grows in Europe and Asia.", config=NORMALISE)
    assert len(out["answers"]) == 2 and not out["audit"]["flagged"]


def test_several_different_supported_answers_are_flagged():
    out = audit("Which city or region is this bridge in?", ["Paris", "Invalides"],
                "The bridge in Paris links the Invalides to the Champs-Élysées.")
    assert "distinct_alternatives" in out["audit"]["flags"] and out["audit"]["flagged"]
    assert distinct_answers(Answer(text="Paris"), Answer(text="Invalides"))
    assert not distinct_answers(Answer(text="No"), Answer(text="no"))
    assert not distinct_answers(Answer(text="a", parts=["Tunisia", "Algeria"]), Answer(text="b", parts=["Iran", "Peru"]))


def test_multi_part_answer_needs_most_parts():
    a = Answer(text="x", parts=["Botswana", "Namibia", "Zimbabwe", "Ethiopia"])
    m = match_answer(a, "its range includes Botswana, Namibia and Zimbabwe")
    assert m and m[-1].kind == "most_parts:1_missing"
    assert match_answer(Answer(text="x", parts=["Botswana", "Ethiopia"]), "in Botswana") is None


def test_official_long_name_written_as_the_evidence_names_it():
    out = audit("What country does this building belong to?", ["United States of America"],
                "It is the tallest building in the United States.", config=NORMALISE)
    assert out["answers"] == ["United States"] and "answer_format" in out["audit"]["tags"]
    out = audit("What country does this building belong to?", ["France"], "A French landmark.")
    assert out["answers"] == ["France"] and not out["audit"]["flagged"]  # a demonym is not a shorter name


# --------------------------------------------------------------------------------- question-side repair

def test_question_repair_must_keep_the_answers_unit():
    s = Sample(id="q", question="How long is the gestation of this animal?", answers=["28 to 30 days"])
    assert unit_conflict("How long is the gestation of this animal in months?", s, []) is not None
    assert unit_conflict("How long is the gestation of this animal in days?", s, []) is None
    assert unit_conflict("How long is the gestation of this animal?", s, []) is None
    s2 = Sample(id="q", question="How tall is it?", answers=["41"])
    units = [EvidenceUnit("It is 41 metres tall.", "0", None, "kb")]
    assert unit_conflict("How tall is it in feet?", s2, units) is not None  # the evidence writes metres


# ------------------------------------------------------------------------------- classes for a model

def test_taxonomy_rank_needs_a_model_unless_the_rank_is_explicit():
    q = "What is the closest parent taxonomy of this bird?"
    s = Sample(id="x", question=q, answers=["Anatidae"], entity={"title": "Aix sponsa"})
    assert model_classes(s, ["The wood duck is a species of perching duck in the family Anatidae."]) == []
    s = Sample(id="x", question=q, answers=["Aix"], entity={"title": "Aix sponsa"})
    assert taxonomy_settled(s, [])  # the genus of the entity's own binomial
    s = Sample(id="x", question=q, answers=["Anas"], entity={"title": "Mallard"})
    assert model_classes(s, ["The mallard is a dabbling duck (Anas) of the Americas."]) == ["taxonomy_rank"]
    assert rank_stated("Aix", ["placed in the genus Aix"]) == "genus"
    out = audit(q, ["Anas"], "The mallard is a dabbling duck (Anas) of the Americas.", entity_title="Mallard")
    assert out["audit"]["needs_model"] == ["taxonomy_rank"] and out["audit"]["decided_by"] == "undecided"


def test_answer_in_another_role_needs_a_model():
    out = audit("What is this building named after?", ["Asakusa"],
                "Asakusa Shrine stands in Asakusa, Tokyo.", entity_title="Asakusa Shrine")
    assert "answer_role" in out["audit"]["needs_model"] and not out["audit"]["flagged"]
    out = audit("Where is this building?", ["Asakusa"], "Asakusa Shrine stands in Asakusa, Tokyo.",
                entity_title="Asakusa Shrine")
    assert "needs_model" not in out["audit"] and out["audit"]["decided_by"] == "rules"


class _Verifier:
    backend, model = "fake", "m"

    def __init__(self, label):
        self.label, self.calls = label, 0

    async def verify_section(self, question, answers, title, text):
        self.calls += 1
        return {"label": self.label, "rationale": "x"}


def test_model_verifiers_run_only_where_the_rules_cannot_decide():
    from kbvqa.stages.audit.verify import VerifyConfig

    cfg = AuditConfig(verify=VerifyConfig(verifiers=["rules", "v"]), stages=["verify", "derive"])
    v = _Verifier("not_supported")
    out = audit("Where is this building?", ["Tokyo"], "Asakusa Shrine stands in Asakusa, Tokyo.",
                entity_title="Asakusa Shrine", config=cfg, roles={"v": v})
    assert v.calls == 0 and out["audit"]["decided_by"] == "rules"  # a decisive rules match: no call
    out = audit("What is this building named after?", ["Asakusa"], "Asakusa Shrine stands in Asakusa, Tokyo.",
                entity_title="Asakusa Shrine", config=cfg, roles={"v": v})
    a = out["audit"]
    assert v.calls == 1 and a["decided_by"] == "llm" and a["answer_support"] == "unsupported"
    rules = a["stages"]["verify"]["verifiers"][0]
    assert rules["label"] == "entailed" and rules["counted"] is False  # abstains: the model decides


# ------------------------------------------------------------------------------- spans, flags, summary

def test_supporting_sentence_per_section_is_written_to_audit_evidence():
    out = audit("Who designed this car?", ["Gordon Murray"], "The car is fast. It was designed by Gordon Murray.",
                "Production began in 1992.")
    ev = out["audit"]["evidence"]
    assert len(ev) == 1 and ev[0]["span"] == "It was designed by Gordon Murray."
    assert ev[0]["section_id"] == "0" and ev[0]["kind"] == "phrase" and ev[0]["start"] == 17


def test_summary_counts_flags_paths_and_verifier_agreement():
    from kbvqa.stages.audit.verify import VerifyConfig

    cfg = AuditConfig(verify=VerifyConfig(verifiers=["a", "b"]), stages=["verify", "derive"])
    recs = []
    for i, (la, lb) in enumerate([("entailed", "entailed"), ("not_supported", "not_supported"),
                                  ("entailed", "not_supported"), ("not_supported", "not_supported")]):
        recs.append(audit("Who owns this car?", ["Ron Dennis"], "The car is red.", id=f"r{i}", config=cfg,
                          roles={"a": _Verifier(la), "b": _Verifier(lb)}))
    s = audit_summary(recs)
    assert s["decided_by"] == {"llm": 4}
    ev = recs[0]["audit"]["evidence"]  # support only the models saw: their entailed sections
    assert ev and ev[0]["kind"] == "model" and ev[0]["verifier"] == "a" and ev[0]["span"] is None
    v = s["verifiers"]
    assert v["per_verifier"]["a"] == {"entailed": 2, "not_supported": 2}
    assert v["consensus"] == {"entailed": 2, "not_supported": 2}  # policy all: both must fail to find support
    pair = v["agreement"][0]
    assert pair["n"] == 4 and pair["agreement"] == 0.75 and pair["both_unsupported"] == 2
    assert pair["kappa"] == pytest.approx(0.5)
    assert s["flagged"] == 2 and s["flags"] == {"not_in_evidence": 2}
