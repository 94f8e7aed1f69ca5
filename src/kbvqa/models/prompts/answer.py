"""The answer-family prompts: the short-answer generator, the entity identifier (IBA-like) and the
LLM section reranker."""

from __future__ import annotations

from kbvqa.models.prompts import define
from kbvqa.models.prompts.fragments import json_only

SHORT_ANSWER = define(
    "answer.short", "1",
    system=("You answer knowledge-seeking questions about the entity shown in an image. Use the evidence "
            "passages from the knowledge base; if they do not contain the answer, answer from your own "
            "knowledge. " + json_only('{"answer": "..."}') + " where the answer is as short as possible (a name, a "
            "number with no unit, a year or a date)."),
    user="Evidence:\n{passages_raw}\n\nQuestion: {question_raw}")

IDENTIFY_ENTITY = define(
    "answer.identify_entity", "1",
    system=("Identify the specific entity shown in the image (a species, building, landmark, artwork, vehicle "
            "model, ...) as a Wikipedia article title. "
            + json_only('{"entities": ["title", ...]}') + " with as many candidates as asked for, most likely first."),
    user="Question about the image: {question_raw}\nWhich entity is shown? Give up to {n} candidates.")

RERANK_SECTIONS = define(
    "answer.rerank_sections", "1",
    system=("You rank knowledge-base passages by how useful they are for answering a question about the entity "
            "in an image. " + json_only('{"ranking": [passage numbers, most useful first]}')
            + ". Include every passage that could contain the answer; omit the rest."),
    user="Question: {question_raw}\n\nPassages:\n{passages_raw}")
