"""Answer pipelines: reference MM-RAG presets (retrieve -> rerank -> answer), the search agent, and
their retrieval records. Every preset is a PIPELINES entry declaring the roles `--llm` fills and the
option groups it takes; one run's settings are one AnswerOptions (kbvqa.pipelines.answer.options).

The augmentation study that used to live here is kbvqa.evaluate.augmentation (a study is evaluation,
and evaluate may not import pipelines); the augmented-id convention is kbvqa.data.variants."""

from kbvqa.pipelines.answer.options import AgentOptions, AnswerOptions, answer_options
from kbvqa.pipelines.answer.rag import answer_pipelines, build_answer_job, pipeline_roles, write_retrieval_records

__all__ = ["AgentOptions", "AnswerOptions", "answer_options", "answer_pipelines", "build_answer_job",
           "pipeline_roles", "write_retrieval_records"]
