"""Augmentation prompts: the entity-type tagger that decides intra- vs inter-category distractors."""

from __future__ import annotations

from kbvqa.models.prompts import Prompt, register

ENTITY_TYPE = register(Prompt(
    name="augment.entity_type", version="1",
    system=("You label the kind of entity a visual question is about. Reply with JSON "
            '{"type": <one label from the list, or "none">, "reason": <short>}.'),
    user="Labels: {labels_raw}\nQuestion: {question_raw}\nEntity: {entity_raw}",
    fields=("labels_raw", "question_raw", "entity_raw"),
))
