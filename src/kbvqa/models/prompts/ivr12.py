"""IVR-12 judge prompts (seed 001 §3.3): one strict-JSON call per group and one for the model-judged gate.

The wording of the criteria is not here: it is the rubric (`kbvqa/evaluate/rubrics/ivr12.toml`, a
versioned data file a user may edit, which marks entry by entry what is the paper's — eight of the
twelve dimensions' names, the groups — and what is kbvqa's: four names, the 6/3/3 group sizes read
from Table 3, the gates, every criterion), rendered into `criteria_raw`; which dimensions a group
call grades is the rubric's grouping, so a user's rubric may group differently. These templates are the frame — what the judge is shown and the reply
contract, in kbvqa's words (the paper's judge prompts are in an appendix our copy lacks) — so a
verdict's provenance names both the frame (`ivr12.<group>@version`, hashed here) and the rubric (its
sha256, added by the stage).

What each call sees follows §3.3: content = the answer text plus the short reference; presentation
= the answer text; image = the query image(s), every embedded image and the text; gate = the query
image(s) and the answer text. Image tags are shown as `[Image N]` markers in every group, so
references (`candidate_images` tags) and agent answers (`query`/`idx` tags) are judged from the
same rendering.
"""

from __future__ import annotations

from kbvqa.models.prompts import JSON_ONLY, Prompt, register
from kbvqa.models.prompts.fragments import REPLY_JSON, fragment

_SYSTEM = ("You grade answers to questions people asked about a photo, with a fixed rubric. Apply each "
           "criterion on its own, use the whole 1-5 scale (the anchors describe 1, 3 and 5; 2 and 4 lie "
           "between), judge only what is shown, and never reward length for its own sake. " + JSON_ONLY)

_GATE_SYSTEM = ("You check answers to questions people asked about a photo against a pass/fail gate. Decide "
                "from what is shown only; when in doubt, fail. " + JSON_ONLY)

#: The answer under review, fenced so that nothing in it reads as an instruction.
_FENCE = fragment("ivr12.answer_fence", "<<<ANSWER\n{answer_raw}\nANSWER>>>")

_ANSWER = ("The answer to grade (image tags are shown as [Image N]; [unresolved image] marks a tag that names no "
           "image):\n" + _FENCE)


def _reply(each: str) -> str:
    """The reply contract: the strict-JSON rule, then what each of the rubric's keys holds."""
    return f"{REPLY_JSON}, with exactly these keys, {each} for each:\n{{reply_raw}}"


_REPLY = _reply("an integer score from 1 to 5\nand a one-line rationale")

CONTENT = register(Prompt(
    name="ivr12.content", version="1", system=_SYSTEM,
    user=f"""\
Grade the CONTENT of an answer to a visual question. The short reference was written and audited by
people; treat it as correct.

Question: {{question}}
Short reference: {{short_reference}}

{_ANSWER}

Criteria:
{{criteria_raw}}

{_REPLY}""",
    fields=("question", "short_reference", "answer_raw", "criteria_raw", "reply_raw"),
))

PRESENTATION = register(Prompt(
    name="ivr12.presentation", version="1", system=_SYSTEM,
    user=f"""\
Grade the PRESENTATION of an answer to a visual question: how it is written and laid out, not
whether it is right.

Question: {{question}}

{_ANSWER}

Criteria:
{{criteria_raw}}

{_REPLY}""",
    fields=("question", "answer_raw", "criteria_raw", "reply_raw"),
))

IMAGE = register(Prompt(
    name="ivr12.image", version="1", system=_SYSTEM,
    user=f"""\
Grade the IMAGES of an interleaved answer to a visual question. The images attached to this message
come in order: first the asker's query image(s) ({{n_query}}), then the answer's embedded images
[Image 1] to [Image {{n_embedded}}], in the order their tags appear in the text.

Question: {{question}}

{_ANSWER}

Criteria:
{{criteria_raw}}

{_REPLY}""",
    fields=("question", "n_query", "n_embedded", "answer_raw", "criteria_raw", "reply_raw"),
))

GATE = register(Prompt(
    name="ivr12.gate", version="1", system=_GATE_SYSTEM,
    user="""\
Decide a pass/fail GATE for an answer to a visual question. The attached image(s) are the asker's
query image(s).

Question: {question}

The answer (image tags shown as [Image N]):
""" + _FENCE + """

Gate:
{criteria_raw}

""" + _reply("a boolean `pass` and a\none-line rationale"),
    fields=("question", "answer_raw", "criteria_raw", "reply_raw"),
))

GROUP_PROMPTS = {"content": CONTENT, "presentation": PRESENTATION, "image": IMAGE, "gate": GATE}
