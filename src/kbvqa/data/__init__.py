"""Schema and dataset adapters (the lowest layer: imports nothing else from kbvqa)."""

from kbvqa.data.schema import (Answer, Article, Change, Entity, Evidence, Prediction, Provenance, Sample,
                               Section, Usage, Verdict)

__all__ = ["Answer", "Article", "Change", "Entity", "Evidence", "Prediction", "Provenance", "Sample",
           "Section", "Usage", "Verdict"]
