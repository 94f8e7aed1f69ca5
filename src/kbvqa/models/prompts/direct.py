"""The single-pass answerer's prompt (`--pipeline direct`): the model answers from the query image(s)
and the question alone — no retrieval, no tools — the "without retrieval" side of seed 001's Table 2 /
Fig. 2 comparison. The answer is shaped like the search agent's final answer (a direct first sentence,
then a short explanation), so the judge grades both on the same kind of text."""

from __future__ import annotations

from kbvqa.models.prompts import Prompt, register

DIRECT_ANSWER = register(Prompt(
    name="direct.answer", version="1",
    system=("A person asks a question about the photo(s) they attached. You cannot search or open any document: "
            "answer from what the image shows and what you know. Begin with one sentence that answers the question "
            "directly, then explain in a few sentences what in the image or in your knowledge supports it. If you "
            "are unsure, still give your best answer and say how sure you are. Write plain text."),
    user="{question_raw}",
    fields=("question_raw",),
))
