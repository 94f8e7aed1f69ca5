"""Reference answer pipelines (retrieve -> rerank -> answer) and the retrieval studies built on them."""

from kbvqa.pipelines.answer.rag import (PIPELINES, VARIANTS, answer_samples, augmentation_recall_table, build_stages,
                                        markdown_table, split_variant, write_retrieval_records)

__all__ = ["PIPELINES", "VARIANTS", "answer_samples", "augmentation_recall_table", "build_stages", "markdown_table",
           "split_variant", "write_retrieval_records"]
