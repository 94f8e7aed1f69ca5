"""Schema and dataset adapters (the lowest layer: imports nothing else from kbvqa).

The schema names are exported lazily (PEP 562): `import kbvqa.data.jsonl` must not pay for pydantic
and the schema, which a 300k-line scoring run never uses.
"""

from typing import Any

__all__ = ["Answer", "Article", "Change", "Entity", "Evidence", "Prediction", "Provenance", "Sample",
           "Section", "Usage", "Verdict"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from kbvqa.data import schema

        return getattr(schema, name)
    raise AttributeError(f"module 'kbvqa.data' has no attribute {name!r}")
