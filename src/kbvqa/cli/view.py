"""`kbvqa view RUN_DIR…`: browse runs in a local, read-only web app; `--export DIR` writes a static site.

The CLI is where the viewer meets the layers the report layer does not import: it opens the KB
(evidence text, article titles and thumbnails) and hands in the augmentation study (Recall@K per
variant) as `Lookups`.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any

import typer

from kbvqa.cli.common import fail


def find_kb(run_dirs: list[Path]) -> Path | None:
    """A kbvqa KB (SQLite with the KB's own format marker) inside the run folders, if any."""
    import sqlite3

    from kbvqa.kb.store import KBError, KBStore

    for root in run_dirs:
        if not root.is_dir():
            continue
        for d, dirs, files in os.walk(root):
            dirs[:] = sorted(x for x in dirs if not x.startswith("."))
            for name in sorted(files):
                if name.endswith(".sqlite"):
                    try:
                        KBStore(Path(d) / name).close()
                    except (KBError, sqlite3.DatabaseError, OSError):  # a cache or a tool store: look on
                        continue
                    return Path(d) / name
    return None


def build_site(run_dirs: list[Path], *, images: list[Path] = (), kb: Path | None = None,
               samples: list[Path] = (), find_kb_in_runs: bool = True) -> Any:
    """Discover the runs and build the viewer's Site with the KB and the augmentation study."""
    from kbvqa.evaluate.augmentation import augmentation_recall_study
    from kbvqa.kb.store import KBStore
    from kbvqa.report.viewer import Lookups, Site, discover

    catalog = discover(list(run_dirs), list(images))
    kb_path = kb or (find_kb(catalog.roots) if find_kb_in_runs else None)
    store = KBStore(kb_path) if kb_path is not None else None
    lookups = Lookups(article=store.get if store is not None else None,
                      kb_dir=kb_path.parent.resolve() if kb_path is not None else None,
                      augmentation_recall=lambda records, refs: augmentation_recall_study([records], refs, ks=(1, 5, 10)),
                      samples=[Path(s).resolve() for s in samples])
    return Site(catalog, lookups)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def view(
    run_dirs: list[Path] = typer.Argument(..., exists=True, help="Run folders (or single JSONL outputs) to browse."),
    port: int = typer.Option(8765, "--port", min=1, max=65535, help="Port to listen on."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (default loopback only: the viewer has "
                                                         "no authentication)."),
    images: list[Path] = typer.Option([], "--images", exists=True, file_okay=False,
                                      help="Extra image roots the viewer may serve images from (repeatable); "
                                           "the run folders always are."),
    kb: Path | None = typer.Option(None, "--kb", exists=True, dir_okay=False,
                                      help="KB SQLite for evidence text, titles and thumbnails (default: a KB found "
                                           "inside the run folders)."),
    samples: list[Path] = typer.Option([], "--samples", exists=True, dir_okay=False,
                                       help="Samples / references files for outputs whose manifest names none "
                                            "(repeatable)."),
    export: Path | None = typer.Option(None, "--export", file_okay=False,
                                          help="Write the views as a static site into this folder instead of serving."),
) -> None:
    """Browse audits, composites, retrieval, predictions, agent episodes and verdicts in a browser."""
    try:
        site = build_site(run_dirs, images=images, kb=kb, samples=samples)
    except (OSError, ValueError) as exc:
        fail(exc)
    cat = site.catalog
    typer.echo(f"found {len(cat.outputs)} output(s) in {', '.join(str(r) for r in cat.roots)}"
               + (f"; KB {site.lookups.kb_dir}" if site.lookups.kb_dir else "; no KB (evidence text not shown)"),
               err=True)
    for p in cat.problems:
        typer.echo(f"  problem: {p}", err=True)
    if export is not None:
        from kbvqa.report.viewer import export_site
        from kbvqa.runner.write_errors import as_write_failure

        try:
            res = export_site(site, export)
        except OSError as exc:  # a full disk: name the export folder when write() names no file
            failed = as_write_failure(exc, export)
            if failed is None or failed is exc:
                raise  # not a write failure, or one that names its file already: as it was raised
            raise failed from exc
        for p in res.problems:
            typer.echo(f"  note: {p}", err=True)
        typer.echo(f"exported {res.pages} pages ({res.records} records, {res.images} images) -> {res.out / 'index.html'}")
        return
    try:
        import uvicorn

        from kbvqa.report.viewer.app import create_app
    except ImportError as exc:
        fail(f"the viewer needs the `view` extra: pip install 'kbvqa[view]' ({exc})")
    if not _loopback(host):
        typer.echo(f"warning: binding {host}: anyone who can reach it can read these runs (no authentication)",
                   err=True)
    typer.echo(f"kbvqa view: http://{host}:{port}/  (Ctrl-C to stop)", err=True)
    uvicorn.run(create_app(site), host=host, port=port, log_level="warning")
