"""Reference-construction prompts (seed 001 §3.2, App. C): URL scoring, candidate-image scoring, the
five-rule image filter, the "same picture?" de-duplication probe and the interleaved synthesis.

The wording is kbvqa's own; the facts carry over from the paper: five 1-5 page dimensions summed
into a top-k; a two-image call (query image first) scoring five image dimensions plus an overall
score; five removal rules (redundant with the query image, composite, global watermark, video
thumbnail, off-topic) judged with the text around the candidate; a yes/no similarity probe; one
multimodal synthesis call citing candidates as `<image>{"candidate_images": N}</image>`; the named
entities of the reference an image search should still illustrate (§3.2 stage 2); and the
multimodal consistency check of a draft before human review (§3.2 stage 4; the paper names the
check only, so its four kinds of inconsistency are kbvqa's).
"""

from __future__ import annotations

from kbvqa.models.prompts import JSON_ONLY, Prompt, register
from kbvqa.models.prompts.fragments import fragment

#: What every reference-stage check is told first: the question and its answer, known to be right.
_KNOWN_ANSWER = fragment("reference.known_answer", "Question: {question}\nKnown answer: {answer}")

#: The five removal rules of the filter, in the order the prompt lists them.
FILTER_RULES = ("redundant_with_query", "composite", "watermark", "video_thumbnail", "off_topic")

URL_SCORES = register(Prompt(
    name="reference.url_scores", version="2", system="",
    user="""\
A research agent collected the web pages below while answering a question whose correct answer is
known. Rank the pages by how much each one helps to answer it.

""" + _KNOWN_ANSWER + """

Pages (an ID, the tool that produced the page, its URL, then the text the agent saw):
{links_raw}

Rate each page on five integer scales from 1 (not at all) to 5 (fully):
- relevance: the page is about what the question asks;
- completeness: the page holds the information needed to answer;
- clarity: the page is clear, well organised and easy to read;
- answer_support: the page states or confirms the known answer;
- necessity: the answer would be weaker without this page (5) or the page only repeats others (1).
Return the {top_k} most useful pages, best first (all of them if there are fewer). Use the IDs
exactly as given.

""" + JSON_ONLY + """
{{"pages": [{{"id": "<ID>", "relevance": <1-5>, "completeness": <1-5>, "clarity": <1-5>,
"answer_support": <1-5>, "necessity": <1-5>, "reason": "<one short sentence>"}}]}}""",
    fields=("question", "answer", "links_raw", "top_k"),
))

CANDIDATE_SCORE = register(Prompt(
    name="reference.candidate_score", version="1", system="",
    user="""\
Two images follow this text. Image 1 is the photo a user attached to a question. Image 2 is a
candidate picture found while researching the answer; it may go into an illustrated answer.

""" + _KNOWN_ANSWER + """

Judge what image 2 would add to an illustrated answer, reading image 1 as context only. Give each
dimension an integer from 1 (not at all) to 5 (fully) and a short reason:
- visual_relevance: image 2 shows something the question is about;
- information_content: image 2 shows information that helps to answer;
- clarity: image 2 is sharp, legible and well composed;
- answer_substantiation: image 2 helps to confirm or explain the known answer;
- necessity: a reader needs image 2 (5) or it is decoration (1).
Then give `overall`, your own overall judgement from 1 to 5 (not necessarily the mean).

""" + JSON_ONLY + """
{{"visual_relevance": {{"score": <1-5>, "reason": "..."}}, "information_content": {{"score": <1-5>, "reason": "..."}},
"clarity": {{"score": <1-5>, "reason": "..."}}, "answer_substantiation": {{"score": <1-5>, "reason": "..."}},
"necessity": {{"score": <1-5>, "reason": "..."}}, "overall": <1-5>}}""",
    fields=("question", "answer"),
))

FIVE_RULE_FILTER = register(Prompt(
    name="reference.five_rule_filter", version="2", system="",
    user="""\
Two images follow this text. Image 1 is the user's query photo; image 2 is a candidate picture for
an illustrated reference answer.

""" + _KNOWN_ANSWER + """
Text around image 2 (in the answer where it is placed, or on the page it came from): {context}

Remove image 2 if any of these rules applies (name the first one that does):
- redundant_with_query: it shows the same subject, person or view as image 1 and adds nothing a
  reader could not already see in image 1 (crops, mirror images and re-encodings of image 1 count);
- composite: several unrelated pictures or scenes are stitched into one frame (a grid, a collage,
  stills side by side);
- watermark: a prominent watermark, agency stamp, logo or text overlay covers a large part of it;
- video_thumbnail: a play button or video-player controls are drawn over it;
- off_topic: it shows nothing the question, the answer or the text around it is about.
Otherwise keep it.

""" + JSON_ONLY + """
{{"remove": true, "rule": "<redundant_with_query | composite | watermark | video_thumbnail | off_topic>",
"reason": "<one sentence>"}}
or
{{"remove": false, "rule": null, "reason": "<one sentence>"}}""",
    fields=("question", "answer", "context"),
))

SIMILAR_PROBE = register(Prompt(
    name="reference.similar_probe", version="1", system="",
    user="""\
Do the two images that follow show essentially the same picture of the same subject: the same
scene, person or object, differing only by crop, scale, lighting, compression or a slight change
of viewpoint?

""" + JSON_ONLY + """
{{"similar": true}} or {{"similar": false}}""",
    fields=(),
))

ENTITY_CHECK = register(Prompt(
    name="reference.entity_check", version="1", system="",
    user="""\
The first image is the photo a user attached to a question. The images after it are the candidate
pictures gathered for an illustrated answer, numbered 1, 2, ... in the order shown (the query photo
is not numbered).

""" + _KNOWN_ANSWER + """
Where each candidate came from:
{candidates_raw}

List the named entities the known answer mentions: specific species, people, places, products,
works, landmarks, models and the like, each by the name a reader would search for (not generic
words such as "plant" or "car"). For each, give the numbers of the candidates that show it (an empty
list when none does) and a short query that would find a photo of it with an image search engine.

""" + JSON_ONLY + """
{{"entities": [{{"name": "<entity>", "shown_in": [<candidate numbers>], "query": "<image search query>"}}]}}
(an empty list of entities when the answer names none)""",
    fields=("question", "answer", "candidates_raw"),
))

CONSISTENCY_CHECK = register(Prompt(
    name="reference.consistency_check", version="1", system="",
    user="""\
The first image is the photo a user attached to a question. The images after it are the pictures an
illustrated reference answer embeds, in the order its tags cite them (tag 1, tag 2, ...).

Question: {question}
Short reference (correct, written by experts): {answer}

Illustrated answer (tags appear as <image>{{"candidate_images": N}}</image>):
{draft_raw}

Check the illustrated answer before it goes to human review. It is inconsistent if any of these holds:
- answer_conflict: it contradicts the short reference or names a different answer;
- image_mismatch: an embedded picture does not show what the sentence before its tag says;
- query_mismatch: it describes the query photo in a way the photo does not bear out;
- unsupported: it states as fact something neither the short reference nor the pictures support
  and that a reviewer would need to check.
Minor style issues do not count.

""" + JSON_ONLY + """
{{"consistent": true, "issues": []}}
or
{{"consistent": false, "issues": [{{"kind": "<answer_conflict | image_mismatch | query_mismatch | unsupported>",
"tag": <the tag number concerned, or null>, "detail": "<one sentence>"}}]}}""",
    fields=("question", "answer", "draft_raw"),
))

SYNTHESIS = register(Prompt(
    name="reference.synthesis", version="2",
    system="""\
You write reference answers that mix text and pictures. You receive a user's question with the
photo they attached (the first image), the correct short answer, the notes of a research agent
(its tool calls and what they returned) and a numbered set of candidate pictures (Image 1, Image 2,
... shown after the query photo, each with its scores).

How to write:
- Open with the answer itself in one sentence; do not begin with "Based on", "According to" or a
  similar preamble.
- Then explain it with concrete facts, names, numbers and context taken from the agent's notes.
  Say nothing the notes or the correct answer do not support.
- Write a detailed answer in English, in plain confident prose, about 100-400 words.

How to place pictures:
- Cite a candidate with the tag <image>{"candidate_images": N}</image> on its own line, right after
  the sentence it illustrates, where N is the number of the candidate as shown to you.
- Use a candidate only where it truly shows what the sentence before it says; among those that fit,
  prefer higher scores and the closest visual match to that sentence. Cite each candidate at most
  once. Never use a number you were not shown.
- One to four pictures is typical for an answer of this length. Never add a picture just to have
  one: if no candidate fits, write text only, with no tags.

Reply with the answer text only (with its tags): no title, no notes, no metadata.""",
    user="""\
## Question (the query photo is the first image)
{question_raw}

## Correct short answer
{answer_raw}

## Research notes (the agent's trajectory)
{trajectory_raw}

## Candidate pictures (shown after the query photo, in this order)
{candidates_raw}

Write the illustrated answer now.""",
    fields=("question_raw", "answer_raw", "trajectory_raw", "candidates_raw"),
))
