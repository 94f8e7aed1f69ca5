"""Image-ablation prompts (seed 001 §4.3): the probe generator and the passage reader.

The generator sees an interleaved reference with its images inline and writes image-critical and
text-answerable probes as strict JSON; the reader answers one probe from the passage alone, under
the text / placeholder / full conditions (the passage is inserted verbatim, `passage_raw`, so the
pipeline can put each image where its tag was). The reader's wording is the same in all three
conditions: only the passage changes. The grading is the SimpleQA-style judge (`judge.simpleqa`).
"""

from __future__ import annotations

from kbvqa.models.prompts import JSON_ONLY, Prompt, register

GENERATE_PROBES = register(Prompt(
    name="ablation.generate_probes", version="1",
    system="""\
You write probe questions that test whether a reader needs the images of an illustrated passage.
You will see a passage with its images shown inline, where they belong in the text.

Write exactly {per_kind} probes of each kind:
- "image_critical": the answer can only be read from one of the images (something it shows: a
  colour, a count, a shape, a position, a visible marking or label) and the passage text does not
  state it or let anyone infer it.
- "text_answerable": the answer is stated in the passage text; the images are not needed.

Each probe is one question and its short answer (a few words). A question must make sense to someone
who sees the passage: ask about the subject itself and never number the pictures ("image 1", "the
second photo"). Do not ask about anything the passage neither says nor shows.

""" + JSON_ONLY + """
{{"probes": [{{"kind": "image_critical" | "text_answerable", "question": "<question>", "answer": "<short answer>"}}, ...]}}""",
    user="Passage:\n{passage_raw}",
    fields=("passage_raw",), system_fields=("per_kind",),
))

READ_PASSAGE = register(Prompt(
    name="ablation.read_passage", version="1",
    system="""\
You answer one question about a passage. Use only the passage: its text and, where it has them, the
images shown in it. Do not use outside knowledge. If the passage does not give the answer, reply
"I cannot tell from the passage." Otherwise reply with the answer only, in a few words.""",
    user="Passage:\n{passage_raw}\n\nQuestion: {question}",
    fields=("passage_raw", "question"),
))
