"""Judge prompts: the SimpleQA-style short-answer grader (field-anchors §4.2, with strict JSON)."""

from __future__ import annotations

from kbvqa.models.prompts import Prompt, register

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

Question: {question_raw}
Gold answer: {target_raw}
Answer to grade: {predicted_raw}

Reply with one JSON object and nothing else:
{{"label": "correct" | "incorrect" | "not_attempted", "rationale": "<one short sentence>"}}""",
    fields=("question_raw", "target_raw", "predicted_raw"),
))
