"""Judge prompts: the SimpleQA-style short-answer grader (field-anchors §4.2, with strict JSON) and
kbvqa's grader for paragraph references (NoteVQA short references), which grades the conclusion."""

from __future__ import annotations

from kbvqa.models.prompts import Prompt, register
from kbvqa.models.prompts.fragments import grading_tail

SIMPLEQA = register(Prompt(
    name="judge.simpleqa", version="1", system="",
    user="""\
You grade one answer to a factual question against the gold answer. Decide between three labels.

correct – the answer states the gold answer (all of it, if the gold answer has several parts) and
  says nothing that contradicts it.
  * Ignore case, punctuation, word order, and small misspellings of names.
  * Hedging is fine ("I think it is X") as long as the gold answer is stated and not contradicted.
  * Details the question already implies may be left out (for "which city…", "Paris" is enough
    even if the gold answer is "Paris, France").
  * A number must agree with the gold answer up to the gold answer's last significant figure
    (gold "120 thousand": "124 thousand" is correct, "100 thousand" is incorrect).
incorrect – the answer contains any claim that contradicts the gold answer, even a hedged one, or it
  offers several candidate answers instead of committing to one.
not_attempted – the gold answer is not given but nothing in the answer contradicts it
  (for example "I don't know", "I cannot tell from the image", or a vaguer value such as
  "around a hundred thousand" when the gold answer is more precise).

Judge only the answer below; do not solve the question yourself and do not use knowledge that
contradicts the gold answer.

""" + grading_tail("Gold answer", "one short sentence"),
    fields=("question_raw", "target_raw", "predicted_raw"),
))

# kbvqa's own rubric for paragraph references (seed 001's judge prompt is not in our copy): a NoteVQA
# short reference is a ~100-word paragraph, so "states the gold answer, all of it" would fail an answer
# that reaches the reference's conclusion but leaves out one supporting detail. This one grades the
# conclusion the question asks for, allows missing secondary details and fails any contradiction of a
# central claim. Same fields and reply as judge.simpleqa, so the two are interchangeable per record.
PARAGRAPH = register(Prompt(
    name="judge.paragraph", version="1", system="",
    user="""\
You grade one answer to a visual question against a reference answer written by a domain expert. The
reference is a paragraph: it reaches a conclusion on what the question asks (what the pictured thing
is, whether it is genuine, what to do, which option to pick, how to do something) and backs it with
reasons and details. Compare the answer's conclusion with the reference's and decide between three
labels.

correct – the answer reaches the reference's conclusion (the same identification, the same verdict or
  decision, the same recommendation or method) and contradicts none of the reference's central claims.
  * Supporting details, reasons, examples and side advice from the reference may be missing: leaving
    out a secondary point is not an error.
  * Information the reference does not mention is fine unless it contradicts a central claim.
  * Wording, order, language and length do not matter. A more specific identification that fits the
    reference (a species within the reference's genus) is fine; a different one is not.
  * Hedging is fine as long as the conclusion is stated.
incorrect – the answer reaches another conclusion, or states anything that contradicts a central claim
  of the reference (the identification, the verdict, the recommended action, or a fact the conclusion
  rests on), or offers competing conclusions without committing to one.
not_attempted – the answer reaches no conclusion on what the question asks (for example "I cannot tell
  from the photo", or general background only) and contradicts no central claim of the reference.

A central claim is one the reference's conclusion depends on; every other statement is secondary.
Judge only the answer below; do not answer the question yourself and do not use knowledge that
contradicts the reference.

""" + grading_tail("Reference answer", "one short sentence: the reference's conclusion and whether the answer "
                                       "reaches it"),
    fields=("question_raw", "target_raw", "predicted_raw"),
))
