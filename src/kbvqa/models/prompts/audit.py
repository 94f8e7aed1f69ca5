"""The audit prompts (seed 000's four stages): verify a section, correct an answer, question
well-posedness, and the final leak/answerability/uniqueness check."""

from __future__ import annotations

from kbvqa.models.prompts import define
from kbvqa.models.prompts.fragments import BOOL, free, one_of, returns
from kbvqa.models.prompts.fragments import JSON_ONLY as _JSON_ONLY

VERIFY_SECTION = define(
    "audit.verify_section", "2",
    system=("You check benchmark annotations against an encyclopedia. You read ONE section of the "
            "article about the entity in an image and decide whether that section, on its own, "
            "establishes the annotated answer to the question. " + _JSON_ONLY),
    user=("Question: {question}\n"
          "Annotated answer(s) (any one alternative is enough; parts joined by && must all hold): {answers}\n"
          "Section title: {title}\n"
          "Section text: {text}\n\n"
          "Labels:\n"
          "- entailed: the section states the answer (or an exact equivalent: same value in another "
          "unit spelling, a country for its adjective, a full date for the same day).\n"
          "- contradicted: the section states a DIFFERENT value for exactly what the question asks.\n"
          "- not_supported: the section does not settle the question either way.\n"
          "The answer must be stated as what the question asks for, in the same role: a name that "
          "appears in the section as something else (the entity's own name given as what it is named "
          "after, the thing itself given as its operator or owner, a section heading) is not support. "
          "For a taxonomy question the answer must be the rank the question asks for (the closest "
          "parent taxon of the entity), not another rank the section names.\n"
          "Judge only from this section, not from your own knowledge.\n"
          + returns(label=one_of("entailed", "contradicted", "not_supported"),
                    rationale=free("one sentence, quoting the decisive words"))))

CORRECT_ANSWER = define(
    "audit.correct_answer", "2",
    system=("You repair benchmark answers using only the evidence given. You never use outside "
            "knowledge and never invent a value the evidence does not contain. " + _JSON_ONLY),
    user=("Question: {question}\n"
          "Answer type: {answer_type}\n"
          "Annotated answer(s): {answers}\n"
          "Evidence sections:\n{evidence}\n\n"
          "Decide what the evidence says the answer is.\n"
          "- matched: the evidence states the annotated answer.\n"
          "- mismatched: the evidence states a different answer; give it in `answer`.\n"
          "- not_answerable: the evidence does not answer the question.\n"
          "Rules for `answer`: copy it from the evidence as written (numbers with the evidence's digits "
          "and separators, no unit conversion, number words as digits when the question asks for a "
          "number); a single value keeps the evidence's unit unless the question already names it, a "
          "range always keeps it (\"65–75 cm\"); a single value when the question asks for one, the "
          "evidence's range when the evidence gives a range containing the annotated value; an answer "
          "built from several numbers is corrected part by part, never collapsed to one of them; the "
          "shortest phrase that answers a text question; `evidence_quote` is the sentence you took it "
          "from.\n"
          + returns(status=one_of("matched", "mismatched", "not_answerable"), answer=free("string or null"),
                    evidence_quote=free("string"), rationale=free("one sentence"))))

POSEDNESS = define(
    "audit.posedness", "2",
    system=("You review visual question answering items whose question refers to the entity in an "
            "image (\"this building\", \"this bird\"). You flag questions that admit more than one "
            "correct answer and propose the smallest edit that fixes them. " + _JSON_ONLY),
    user=("Question: {question}\n"
          "Annotated answer(s) (every alternative the benchmark accepts): {answers}\n"
          "Evidence:\n{evidence}\n\n"
          "Possible problems (zero or more):\n"
          "- missing_attribute_constraint: the question does not say which property or unit is meant "
          "(\"how big\" - height, length or weight?).\n"
          "- missing_temporal_scope: the question does not say which time or granularity is meant "
          "(\"when\" - year, date, season?).\n"
          "- missing_spatial_reference: the question does not say which place level is meant "
          "(\"where\" - country, region, city?).\n"
          "If there is a problem, `suggested_question` adds only the missing constraint, as stated by "
          "the evidence; it keeps the wording otherwise, keeps referring to the entity as in the "
          "original, and must not contain any of the answers. Otherwise `suggested_question` is null.\n"
          + returns(tags="[<zero or more of the three names>]", suggested_question=free("string or null"),
                    rationale=free("one sentence"))))

FINAL_CHECK = define(
    "audit.final_check", "1",
    system=("You do the last quality check on a repaired benchmark item before release. "
            + _JSON_ONLY),
    user=("Question: {question}\n"
          "Answer: {answer}\n"
          "Evidence:\n{evidence}\n\n"
          "Check three things:\n"
          "- leak: the question gives away the answer (states it, a synonym, or an obvious form of it). "
          "Offering it as one option of an either/or question is not a leak.\n"
          "- answerable: the evidence supports the answer to this question.\n"
          "- unique: the question, read with the evidence, has one correct answer.\n"
          + returns(leak=BOOL, answerable=BOOL, unique=BOOL, rationale=free("one sentence"))))
