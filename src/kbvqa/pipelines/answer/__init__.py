"""Reference answer pipelines (retrieve -> rerank -> answer) and their retrieval records.

The augmentation study that used to live here is kbvqa.evaluate.augmentation (a study is evaluation,
and evaluate may not import pipelines); the augmented-id convention is kbvqa.data.variants."""

from kbvqa.pipelines.answer.rag import AnswerOptions, answer_pipelines, build_answer_job, write_retrieval_records

__all__ = ["AnswerOptions", "answer_pipelines", "build_answer_job", "write_retrieval_records"]
