"""Hostile inputs: image references that try to leave the image root, and untrusted text (dataset
questions, model output, method and split names) in every output format kbvqa writes."""

from __future__ import annotations

import json
import os
import re

import pytest

from kbvqa.data.images import ALLOW_OUTSIDE_ROOT_ENV, ImageRefError, resolve_image
from kbvqa.report.html import Interleaved, Table, render_page
from kbvqa.report.tables import ResultTable, to_latex, to_markdown

SCRIPT = "<script>alert(1)</script>"
IMG = '<img src=x onerror="alert(2)">'
MD_IMAGE = "![pwn](http://evil.example/a.png)"
MD_LINK = "[click](javascript:alert(3))"
TEX = r"\input{/etc/passwd}"
PAYLOADS = [SCRIPT, IMG, MD_IMAGE, MD_LINK, TEX]


# ------------------------------------------------------------------------------------ image references

@pytest.fixture()
def root(tmp_path):
    (tmp_path / "root" / "images").mkdir(parents=True)
    (tmp_path / "root" / "images" / "ok.jpg").write_bytes(b"x")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.jpg").write_bytes(b"s")
    os.symlink(tmp_path / "outside" / "secret.jpg", tmp_path / "root" / "images" / "link.jpg")
    return tmp_path / "root"


@pytest.mark.parametrize("ref", ["../outside/secret.jpg", "images/../../outside/secret.jpg", "%2e%2e/outside/secret.jpg",
                                 "images/%2E%2E/%2e%2e/outside/secret.jpg", "images/link.jpg",
                                 "../../../../etc/passwd", "http://127.0.0.1/../etc/passwd", "file:///etc/passwd"])
def test_references_cannot_leave_the_image_root(root, ref):
    with pytest.raises(ImageRefError):
        resolve_image(ref, root)


def test_absolute_references_must_be_inside_the_root_too(root):
    secret = root.parent / "outside" / "secret.jpg"
    with pytest.raises(ImageRefError, match="outside the image root"):
        resolve_image(str(secret), root)
    assert resolve_image(str(root / "images" / "ok.jpg"), root) == root / "images" / "ok.jpg"


def test_references_inside_the_root_resolve_and_the_opt_in_is_explicit(root, monkeypatch):
    assert resolve_image("images/ok", root).name == "ok.jpg"  # a bare id gets its extension
    assert resolve_image("images/link.jpg", root, allow_outside_root=True).name == "link.jpg"
    monkeypatch.setenv(ALLOW_OUTSIDE_ROOT_ENV, "1")  # what `kbvqa --allow-outside-root` sets
    assert resolve_image("../outside/secret.jpg", root).name == "secret.jpg"
    with pytest.raises(ImageRefError):
        resolve_image("../outside/secret.jpg", root, allow_outside_root=False)


def test_kb_image_entries_cannot_climb_out_of_the_image_root(root):
    from kbvqa.pipelines.index import ImageResolver

    for rule in ("auto", "relative", "urlpath"):
        res = ImageResolver(root, rule)
        assert res.resolve("images/ok.jpg" if rule != "urlpath" else "http://x.org/images/ok.jpg") is not None
        assert res.resolve("../outside/secret.jpg" if rule != "urlpath" else "http://x.org/../outside/secret.jpg") \
            is None
        assert res.refused == 1, rule


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:8080/a.png",
                                 "http://localhost/a.png", "http://10.1.2.3/a.png", "http://[::1]/a.png",
                                 "http://user:pw@example.org/a.png", "http://2130706433/a.png"])
def test_image_urls_that_would_make_the_model_server_a_proxy_are_refused(url):
    from kbvqa.models.images import image_part

    with pytest.raises(ImageRefError):
        image_part(url)
    assert image_part("https://upload.wikimedia.org/a.jpg")["image_url"]["url"].startswith("https://upload")


def test_retrieve_refuses_hostile_rows_per_record_and_the_flag_opts_in(bench_copy, tmp_path, monkeypatch):
    """End to end: each hostile row is an error record naming the image root; nothing else fails;
    `kbvqa --allow-outside-root` lets the same rows through."""
    from typer.testing import CliRunner

    from kbvqa.cli.app import app

    monkeypatch.setenv(ALLOW_OUTSIDE_ROOT_ENV, "0")  # restored after the test, whatever the flag sets
    b = bench_copy(tmp_path / "bench")
    first = json.loads(b.samples.read_text().splitlines()[0])
    outside = tmp_path / "outside.jpg"
    outside.write_bytes((b.root / first["images"][0]).read_bytes())
    hostile = [str(outside), "../outside.jpg", "%2e%2e/outside.jpg"]
    rows = [first] + [{**first, "id": f"hostile{i}", "images": [ref]} for i, ref in enumerate(hostile)]
    samples = b.root / "hostile.jsonl"
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    runner = CliRunner()
    idx = tmp_path / "idx"
    res = runner.invoke(app, ["index", "images", "--kb", str(b.kb), "--images", str(b.root), "--out", str(idx)])
    assert res.exit_code == 0, res.output
    out = tmp_path / "r.jsonl"
    res = runner.invoke(app, ["retrieve", "--index", str(idx), "--samples", str(samples), "--out", str(out)])
    assert res.exit_code == 0, res.output
    lines = {x["id"]: x for x in map(json.loads, out.read_text().splitlines())}
    assert lines[first["id"]]["status"] == "ok"
    for i in range(len(hostile)):
        assert lines[f"hostile{i}"]["status"] == "error" and "outside the image root" in lines[f"hostile{i}"]["reason"]
    res = runner.invoke(app, ["--allow-outside-root", "retrieve", "--index", str(idx), "--samples", str(samples),
                              "--out", str(tmp_path / "r2.jsonl")])
    assert res.exit_code == 0, res.output
    assert {x["status"] for x in map(json.loads, (tmp_path / "r2.jsonl").read_text().splitlines())} == {"ok"}


# ---------------------------------------------------------------------------------- output formats

def _table() -> ResultTable:
    return ResultTable("t", f"method {SCRIPT}", f"scorer {MD_LINK}", ["question", "answer", "split"],
                       [[p, f"model said {p}", f"split {p}"] for p in PAYLOADS], notes=[f"note {IMG} {TEX}"])


def test_markdown_escapes_html_links_and_images():
    md = to_markdown(_table())
    for live in ("<script>", "![pwn](", "[click](", "](javascript:"):
        assert live not in md
    assert not re.search(r"(?<!\\)<img", md)  # only escaped tags remain
    assert r"\<script\>" in md and r"\!\[pwn\]" in md


def test_latex_escapes_commands():
    tex = to_latex(_table())
    assert r"\input{" not in tex and r"\textbackslash{}input\{" in tex


def test_html_escapes_every_block():
    page = render_page(f"title {SCRIPT}", [
        ("h2", SCRIPT), ("p", IMG), ("note", MD_LINK),
        ("table", Table([{"q": p} for p in PAYLOADS], caption=SCRIPT)),
        ("interleaved", Interleaved(f"answer {SCRIPT} " + '<image>{"query": "q", "idx": 1}</image>',
                                    {("q", 1): 'x.jpg" onerror="alert(4)'}, question=IMG))])
    assert "<script>" not in page and "<img src=x" not in page and 'onerror="alert' not in page
    assert "&lt;script&gt;" in page


def test_report_build_escapes_names_and_labels(tmp_path):
    """A study whose method and group names are hostile: report.md, tables/*.md, *.tex and the HTML
    page all show them as text."""
    import numpy as np

    from kbvqa.evaluate.studies import ItemScores, by_group, save_study
    from kbvqa.report.results import build_report

    scores = ItemScores(scorer=f"s {MD_LINK}", ids=["a", "b", "c"], correct=np.array([True, False, True]),
                        missing=np.array([False, False, False]), qtype=[f"g {IMG}", f"g {IMG}", f"h {MD_IMAGE}"],
                        label=f"m {SCRIPT}")
    study = save_study(tmp_path / "in", by_group(scores, n_resamples=50))
    out = build_report([study], tmp_path / "out")
    files = [p for p in (tmp_path / "out").rglob("*") if p.suffix in (".md", ".html", ".tex")]
    assert files
    for f in files:
        text = f.read_text(encoding="utf-8")
        if f.suffix == ".md":  # a backslash-escaped character is plain text: only what is left can be live
            text = re.sub(r"\\.", "", text)
        live = {".md": ("<script>", "<img src=x", "![pwn](", "](javascript:"),  # markdown renders all four
                ".html": ("<script>", "<img src=x"),  # markdown syntax is plain text in HTML
                ".tex": (r"\input{",)}[f.suffix]
        for payload in live:
            assert payload not in text, (f.name, payload)
    assert out.html is not None
