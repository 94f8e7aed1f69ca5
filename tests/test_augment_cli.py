"""`kbvqa augment` as the lead registers it: flags reach the pipeline, outputs land in OUT."""

from __future__ import annotations

import csv
import json

import typer
from PIL import Image
from skimage import data
from typer.testing import CliRunner

from kbvqa.cli.augment import augment
from kbvqa.data.formats import write_samples
from kbvqa.data.schema import Entity, Sample
from kbvqa.pipelines.augment import ARA_COLUMNS


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("augment")(augment)
    app.command("noop")(lambda: None)  # two commands, so "augment" is addressed by name as in kbvqa
    return app


def test_cli_augment(tmp_path):
    imgs = tmp_path / "img"
    imgs.mkdir()
    photos = [data.coffee(), data.chelsea(), data.rocket(), data.astronaut(), data.colorwheel(),
              data.immunohistochemistry()]
    samples = []
    for i, arr in enumerate(photos):
        Image.fromarray(arr).save(imgs / f"{i}.jpg")
        t = "bird" if i < 3 else "lake"
        samples.append(Sample(id=f"s{i}", question=f"What is the depth of this {t}?", answers=[str(i)],
                              images=[f"{i}.jpg"], entity=Entity(url=f"https://en.wikipedia.org/wiki/E{i}")))
    write_samples(samples, tmp_path / "in.jsonl", "kbvqa")
    out = tmp_path / "out"
    res = CliRunner().invoke(_app(), ["augment", str(tmp_path / "in.jsonl"), "--images", str(imgs), "--out", str(out),
                                      "--variants", "intra,inter", "--seed", "5", "--height", "48", "--workers", "1",
                                      "--min-entities", "3", "--with-position", "--gap", "2", "--json"])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.output)
    assert stats["augmented_anchors"] == 6 and stats["variants"] == ["intra", "inter"] and stats["with_position"]
    assert stats["resample"] == "fast"
    rows = list(csv.DictReader(open(out / "manifest.csv", newline="")))
    assert tuple(rows[0].keys()) == ARA_COLUMNS
    assert all(r["method2_query"] == r["method2_query_with_position"] != r["method2_query_without_position"]
               for r in rows)
    assert all(Image.open(out / r["method1_composite_image_path"]).height == 48 for r in rows)
    bad = CliRunner().invoke(_app(), ["augment", str(tmp_path / "in.jsonl"), "--images", str(imgs), "--out",
                                      str(out), "--variants", "intra,sideways"])
    assert bad.exit_code != 0 and "sideways" in bad.output
    bad = CliRunner().invoke(_app(), ["augment", str(tmp_path / "in.jsonl"), "--images", str(imgs), "--out",
                                      str(tmp_path / "out2"), "--resample", "nearest", "--min-entities", "3"])
    assert bad.exit_code == 2 and "unknown resample 'nearest' (one of: fast, lanczos)" in bad.output
