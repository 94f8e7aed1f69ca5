"""Reference answer pipelines (retrieve -> rerank -> answer) and the retrieval studies built on them."""

from kbvqa.pipelines.answer.rag import (VARIANTS, AnswerOptions, answer_pipelines, augmentation_recall_table,
                                        build_answer_job, markdown_table, split_variant, write_retrieval_records)

__all__ = ["VARIANTS", "AnswerOptions", "answer_pipelines", "augmentation_recall_table", "build_answer_job",
           "markdown_table", "split_variant", "write_retrieval_records"]
