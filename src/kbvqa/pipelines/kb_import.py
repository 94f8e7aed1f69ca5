"""`kbvqa kb import` as one options object: the wiki file, the KB to write and the importer's settings.

The importer lives in the KB layer, below the runner, so its settings are a plain pydantic model there
(`kbvqa.kb.importer.ImportConfig`, the only place their defaults are written); `KBImportOptions` nests
it as it is and is built once from `[kb.import]` of `--config` and the flags (flags win). The import
gets `opts.importer` unchanged, and the KB's kb_info records `opts.used()` as `import_options` (with
the batch size and the number of indexing processes the import resolved):

    [kb.import]
    force = true
    [kb.import.importer]
    on_duplicate = "error"
    workers = 2
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from kbvqa.kb.importer import ImportConfig, ImportStats, ProgressFn, import_wiki_json
from kbvqa.runner.options import JobOptions, read_table

__all__ = ["KBImportOptions", "import_kb", "kb_import_options"]

SECTION = "kb.import"


class KBImportOptions(JobOptions):
    """Every setting of one KB import. Paths are as given."""

    wiki: Path | None = None  # the E-VQA/EchoSight wiki JSON (url -> article), JSONL, or .gz of either
    out: Path | None = None  # the KB file to write (.sqlite)
    config: Path | None = None  # the kbvqa.toml whose [kb.import] table these settings come from
    force: bool = False  # replace `out` if it exists
    importer: ImportConfig = Field(default_factory=ImportConfig)  # batch size, duplicates, workers


def kb_import_options(config: str | Path | None = None, **flags: Any) -> KBImportOptions:
    """The import's options, built once: the class defaults, under `[kb.import]` of `config`, under
    `flags` (None: a flag not given). A bad value is an OptionsError naming the flag, or the file and key."""
    if config is None:
        return KBImportOptions.build(**flags)
    return KBImportOptions.build(read_table(config, SECTION), source=f"{config} [{SECTION}]", config=Path(config),
                                 **flags)


def import_kb(opts: KBImportOptions, *, progress: bool | ProgressFn = False) -> ImportStats:
    """`kbvqa kb import`: stream-import `opts.wiki` into a new KB at `opts.out` with `opts.importer`."""
    if opts.wiki is None or opts.out is None:
        raise ValueError("a KB import needs the wiki file and --out")
    return import_wiki_json(opts.wiki, opts.out, opts.importer, progress=progress, overwrite=opts.force,
                            record=opts.used())
