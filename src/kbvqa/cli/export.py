"""`kbvqa export` commands: a kbvqa benchmark as an inspect_ai, lmms-eval or VLMEvalKit task."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from kbvqa.cli.common import emit_json, fail

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)

_SCORER_HELP = ("Scorer the task applies: auto (E-VQA's for E-VQA input, InfoSeek's when every sample has an answer "
                "type, else the judge), infoseek, evqa or judge.")


def _run(harness: str, samples: Path, out: Path, name: Optional[str], fmt: Optional[str], scorer: str,
         images: Optional[Path], limit: Optional[int]) -> None:
    from kbvqa.data.errors import DataError
    from kbvqa.pipelines.export import ExportError, export

    try:
        res = export(harness, samples, out, name=name, fmt=fmt, scorer=scorer, images=images, limit=limit)
    except (ExportError, DataError, FileNotFoundError, ValueError) as exc:
        fail(exc, code=1)
    emit_json(res.as_dict())
    typer.echo(f"{harness}: {res.n_samples} samples, {res.n_images} images, scorer {res.scorer} -> {res.out}", err=True)


def _command(harness: str, doc: str) -> None:
    def command(samples: Path = typer.Argument(..., exists=True, dir_okay=False,
                                               help="Samples: any file the data adapters read (kbvqa JSONL, InfoSeek, "
                                                    "E-VQA CSV, NoteVQA, ...), e.g. an audit's fixed split."),
                out: Path = typer.Option(..., "--out", "-o", file_okay=False, help="Folder to write the task into."),
                name: Optional[str] = typer.Option(None, "--name",
                                                   help="Task / dataset name (default: the file's stem)."),
                fmt: Optional[str] = typer.Option(None, "--from", help="Input format (default: detected)."),
                scorer: str = typer.Option("auto", "--scorer", help=_SCORER_HELP),
                images: Optional[Path] = typer.Option(None, "--images", file_okay=False,
                                                      help="Image root the samples' image references are under "
                                                           "(default: the samples file's folder)."),
                limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Export the first N samples only."),
                ) -> None:
        _run(harness, samples, out, name, fmt, scorer, images, limit)

    command.__doc__ = doc
    app.command(harness)(command)


_command("inspect", "An inspect_ai task folder: `cd OUT && inspect eval task.py --model <provider/model>` (a judged "
                    "set: `--model-role grader=<model>`); kbvqa's scorer, judge failures unscored.")
_command("lmms-eval", "An lmms-eval task folder (YAML + utils.py + local docs): `lmms-eval --include_path OUT --tasks "
                      "<task> ...`; process_results scores with kbvqa.")
_command("vlmevalkit", "VLMEvalKit's custom-VQA TSV (index, base64 image, question, answer): `LMUData=OUT python "
                       "run.py --data <NAME> --mode infer`; predictions come back with `kbvqa score "
                       "convert-predictions --method vlmevalkit`.")
