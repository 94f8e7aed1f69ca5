"""Answer pipelines: reference MM-RAG presets (retrieve -> rerank -> answer), the search agent, and
their retrieval records. Every preset is a PIPELINES entry declaring the roles `--llm` fills and the
settings it takes.

The augmentation study that used to live here is kbvqa.evaluate.augmentation (a study is evaluation,
and evaluate may not import pipelines); the augmented-id convention is kbvqa.data.variants."""

from kbvqa.pipelines.answer.rag import (AnswerOptions, answer_pipelines, build_answer_job, pipeline_roles,
                                        pipeline_settings, write_retrieval_records)

__all__ = ["AnswerOptions", "answer_pipelines", "build_answer_job", "pipeline_roles", "pipeline_settings",
           "write_retrieval_records"]
