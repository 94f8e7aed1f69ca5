"""Curation prompts (seed 001 §3.1): the model checks of the four-step funnel that turns community posts
into benchmark items, and the reasoning-hops estimate of the benchmark comparison (§2, Table 1).

The wording is kbvqa's own; the paper gives the checks, not their prompts. Every reply is one strict
JSON object (kbvqa.pipelines.curate reads it with a `Reply` model); post text, comments and answers are
inserted as JSON strings, so quotes or braces in a post cannot break the layout.
"""

from __future__ import annotations

from kbvqa.models.prompts import JSON_ONLY, Prompt, register
from kbvqa.models.prompts.fragments import fragment

#: How every post-level check shows the post.
_POST = fragment("curate.post", "Post title: {title}\nPost text: {text}")

VQA_CANDIDATE = register(Prompt(
    name="curate.vqa_candidate", version="1", system="",
    user="""\
The images after this text come with a post from an online community.

""" + _POST + """

Is this post a visual question that could go into a question-answering benchmark? It is one when the
author asks for knowledge about what the images show (what or who it is, facts about it, how to use,
fix or care for it, whether something is true of it) and the question cannot be settled without
looking. It is not one when the post only shares, sells or advertises, asks for opinions or votes,
or asks nothing.

""" + JSON_ONLY + """
{{"candidate": true | false, "reason": "<one short sentence>"}}""",
    fields=("title", "text"),
))

TEXT_ONLY_ANSWER = register(Prompt(
    name="curate.text_only_answer", version="1",
    system="""\
You cannot see any image. You read a question someone posted together with a photo, and you answer
it from the words alone if they are enough. Do not guess what the photo shows: if the answer depends
on it, say you cannot answer.""",
    user=_POST + """

""" + JSON_ONLY + """
{{"answerable": true | false, "answer": "<the answer in a few words>" | null}}""",
    fields=("title", "text"),
))

IMAGE_TEXT_CONSISTENCY = register(Prompt(
    name="curate.image_text_consistency", version="1", system="",
    user="""\
The images after this text were posted with it.

""" + _POST + """

Do the images show what the text talks about (the same object, place, person, animal or scene)?
Answer false when the text is about something the images do not show, or the images are unrelated.

""" + JSON_ONLY + """
{{"consistent": true | false, "reason": "<one short sentence>"}}""",
    fields=("title", "text"),
))

AESTHETIC = register(Prompt(
    name="curate.aesthetic", version="1", system="",
    user="""\
Rate the images after this text as the picture of a benchmark question: are they sharp, well lit, well framed,
free of heavy filters, stickers, watermarks, collages and screenshots of other apps? Give one integer
from 1 (unusable) to 5 (excellent) for the set as a whole.

""" + JSON_ONLY + """
{{"score": <1-5>, "reason": "<one short sentence>"}}""",
    fields=(),
))

INTERLEAVED_FIT = register(Prompt(
    name="curate.interleaved_fit", version="1", system="",
    user="""\
A community post asks the question below; its comments follow.

""" + _POST + """
Comments (most liked first): {comments}

A good illustrated answer to this question would cover several substantive aspects (for example:
what it is, how to tell it from look-alikes, where it comes from, how to use or care for it, what to
watch out for). List the distinct substantive aspects a complete answer should cover, as short
phrases, at most 6; list fewer when the question needs fewer. Do not count restating the question or
greetings as aspects.

""" + JSON_ONLY + """
{{"aspects": ["<short phrase>", ...], "reason": "<one short sentence>"}}""",
    fields=("title", "text", "comments"),
))

RUBRIC = register(Prompt(
    name="curate.rubric", version="1", system="",
    user="""\
The images after this text come with this community question.

""" + _POST + """

Score the item on five axes, each an integer from 1 (poor) to 5 (excellent):
- question_clarity: the question is clear and answerable as asked;
- image_quality: the images are clear enough to answer from;
- image_text_alignment: the images show what the question asks about;
- interleaved_fit: the answer is best given as text with pictures (comparisons, visual cues);
- answer_objectivity: the question has an objective, checkable answer, not a matter of taste.

""" + JSON_ONLY + """
{{"question_clarity": <1-5>, "image_quality": <1-5>, "image_text_alignment": <1-5>, "interleaved_fit": <1-5>,
"answer_objectivity": <1-5>, "reason": "<one short sentence>"}}""",
    fields=("title", "text"),
))

PLAUSIBLE_ANSWER = register(Prompt(
    name="curate.plausible_answer", version="1", system="",
    user="""\
A community post asks the question below. Its comments are numbered from 1, most liked first.

""" + _POST + """
Comments: {comments}

Does any comment give a plausible, specific answer to the question (not a joke, a guess without
substance, or "me too")? If so, give the number of the best such comment.

""" + JSON_ONLY + """
{{"plausible": true | false, "comment": <number> | null, "reason": "<one short sentence>"}}""",
    fields=("title", "text", "comments"),
))

STANDARDIZE = register(Prompt(
    name="curate.standardize", version="2", system="",
    user="""\
Turn this community post into one benchmark question with its reference answer, writing as a domain
expert who has read every comment and distils what they establish.

""" + _POST + """
Best answering comment: {answer_comment}
Other comments: {comments}

- question: one or two plain sentences in the post's own language that keep everything the author
  asks and the context needed to answer, written as a question about "this" thing in the picture,
  without greetings, hashtags, emojis or usernames.
- answer: the key fact the comments support, in a few words (a name, a number, yes/no with the key
  fact), in the same language.
- reference: the expert's short reference answer, one paragraph of about {reference_words} words in
  the same language. Open with the answer, then give the reasons and distinguishing features that
  support it and any practical guidance the comments offer. State facts directly (not "commenters
  say"), name no users, and add nothing the comments do not support.

""" + JSON_ONLY + """
{{"question": "<the question>", "answer": "<the key fact>", "reference": "<the paragraph>"}}""",
    fields=("title", "text", "answer_comment", "comments", "reference_words"),
))

REWRITE = register(Prompt(
    name="curate.rewrite", version="1", system="",
    user="""\
This benchmark question comes with a photo. Its answer is known.

Question: {question}
Answer: {answer}

Rewrite the question so that it no longer contains the answer or domain terms that give the answer
away (names, species, models, places the asker could only know by already knowing the answer), while
asking exactly the same thing about what the photo shows. Refer to the subject as "this" or by what
anyone can see. If the question reveals nothing, return it unchanged and list no terms.

""" + JSON_ONLY + """
{{"question": "<the rewritten question>", "removed_terms": ["<term>", ...]}}""",
    fields=("question", "answer"),
))

REWRITE_CHECK = register(Prompt(
    name="curate.rewrite_check", version="1", system="",
    user="""\
A benchmark question was rewritten to stop it from giving away its answer.

Original question: {original}
Rewritten question: {rewritten}
Answer: {answer}

Does the rewritten question still ask the same thing as the original (same subject, same
information need)? Does it still reveal the answer, or a term that gives the answer away?

""" + JSON_ONLY + """
{{"same_intent": true | false, "reveals_answer": true | false, "reason": "<one short sentence>"}}""",
    fields=("original", "rewritten", "answer"),
))

ANSWER_PROBE = register(Prompt(
    name="curate.answer_probe", version="1", system="",
    user="""\
Answer the question about the image after this text in a few words.

Question: {question}

""" + JSON_ONLY + """
{{"answer": "<a few words>"}}""",
    fields=("question",),
))

PROBE_AGREEMENT = register(Prompt(
    name="curate.probe_agreement", version="1", system="",
    user="""\
A model answered the same visual question {runs} times. Group the answers that give the same answer
(the same entity, value or verdict, however worded; an answer that adds or drops detail but names
the same thing is the same answer; a negation or a different thing is not).

Question: {question}
Reference answer (only to read the answers against; grouping is about the answers themselves): {answer}
Answers:
{answers_raw}

Then say which answers agree with the reference answer.

""" + JSON_ONLY + """
{{"groups": [[<answer numbers>], ...], "agree_with_reference": [<answer numbers>]}}
(every answer number in exactly one group)""",
    fields=("runs", "question", "answer", "answers_raw"),
))

CLASSIFY = register(Prompt(
    name="curate.classify", version="1",
    system="""\
You sort community visual questions into a benchmark's category and intent cells.
Categories: {categories}
Intents: {intents}
Choose exactly one category and one intent from these lists, spelled as given.""",
    user="""\
Question: {question}
Answer: {answer}

""" + JSON_ONLY + """
{{"category": "<one category>", "intent": "<one intent>"}}""",
    fields=("question", "answer"), system_fields=("categories", "intents"),
))

TRANSLATE = register(Prompt(
    name="curate.translate", version="2", system="",
    user="""\
Translate this benchmark item from {language} into natural English. Keep names, numbers and units
exact; keep the question a question and the answer in its form and length (a short answer stays
short, a paragraph stays a paragraph).

Question: {question}
Answer: {answer}

""" + JSON_ONLY + """
{{"question": "<English question>", "answer": "<English answer>"}}""",
    fields=("language", "question", "answer"),
))

TRANSLATION_CHECK = register(Prompt(
    name="curate.translation_check", version="1", system="",
    user="""\
Check an English translation of a benchmark item written in {language}.

Source question: {question}
Source answer: {answer}
English question: {question_en}
English answer: {answer_en}

Is the translation faithful (same meaning, nothing added or lost, names and numbers exact) and
fluent? List the problems you find; an empty list when there are none.

""" + JSON_ONLY + """
{{"faithful": true | false, "issues": ["<problem>", ...]}}""",
    fields=("language", "question", "answer", "question_en", "answer_en"),
))

REASONING_HOPS = register(Prompt(
    name="curate.reasoning_hops", version="1", system="",
    user="""\
Estimate how many reasoning hops a person needs to answer this visual question: count each step of
recognising something in the image, looking up a fact, or combining facts. Recognising the subject
and reading one fact about it is 2 hops; a question answered by just looking is 1.

Question: {question}
Reference answer: {answer}

""" + JSON_ONLY + """
{{"hops": <an integer from 1 to 10>}}""",
    fields=("question", "answer"),
))
