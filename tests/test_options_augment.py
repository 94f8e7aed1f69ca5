"""`kbvqa augment`'s options (issue 29 part 3): one AugmentOptions built from the defaults, the
[augment] table of --config and the flags; the type tagger and every composite get the very objects
in it; stats.json and the tagger's manifest record it as used."""

from __future__ import annotations

import json

import pytest
from PIL import Image
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.formats import write_samples
from kbvqa.data.schema import Entity, Sample
from kbvqa.pipelines.augment import composite as comp
from kbvqa.pipelines.augment import run as augment_run
from kbvqa.pipelines.augment.options import AugmentOptions
from kbvqa.pipelines.augment.types import tagging_job
from kbvqa.runner import manifest_path
from kbvqa.runner.options import OptionsError

runner = CliRunner()


def _bench(folder):
    """Six samples, two types of three entities each, each with its own small image."""
    (folder / "img").mkdir(parents=True)
    samples = []
    for i in range(6):
        Image.new("RGB", (40 + 4 * i, 30), (40 * i, 200 - 30 * i, 90)).save(folder / "img" / f"{i}.jpg")
        t = "bird" if i < 3 else "lake"
        samples.append(Sample(id=f"s{i}", question=f"What is the depth of this {t}?", answers=[str(i)],
                              images=[f"{i}.jpg"], entity=Entity(url=f"https://en.wikipedia.org/wiki/E{i}")))
    write_samples(samples, folder / "in.jsonl", "kbvqa")
    return samples


def test_help_shows_the_class_defaults():
    res = runner.invoke(app, ["augment", "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert f"Default {AugmentOptions().seed}." in text and "Default 3185." in text
    assert "Default 512." in text and "Default 4." in text and "Default row." in text


def test_flag_over_file_over_default():
    file = {"seed": 1, "k": 2, "composite": {"height": 64, "background": "ff0000"}, "tagging": {"types": ["bird"]}}
    opts = AugmentOptions.build(file, source="kbvqa.toml", seed=2, variants=["inter", "intra"], image_format="png")
    assert opts.seed == 2 and opts.k == 2 and opts.variants == ("inter", "intra")  # flag, file
    assert opts.composite.height == 64 and opts.composite.background == (255, 0, 0) and opts.composite.fmt == "png"
    assert opts.tagging.types == ["bird"] and opts.tagging.role == "tagger"
    assert opts.layout == "row" and opts.min_entities == 4 and opts.composite.gap == 0  # class defaults
    assert AugmentOptions().seed == 3185 and AugmentOptions().variants == ("intra", "inter", "blank", "double")


@pytest.mark.parametrize("flags, where", [
    ({"height": 4}, "--height"),
    ({"background": "teal"}, "--background"),
    ({"variants": ["intra", "sideways"]}, "--variants"),
    ({"image_format": "gif"}, "--image-format"),
    ({"input_format": 3}, "--from"),
])
def test_a_bad_flag_names_the_flag(flags, where):
    with pytest.raises(OptionsError) as exc:
        AugmentOptions.build(**flags)
    assert str(exc.value).startswith(where + ":"), exc.value


def test_a_bad_file_value_names_the_file_and_key():
    with pytest.raises(OptionsError, match=r"^kbvqa\.toml: composite\.resample: .*unknown resample 'nearest'"):
        AugmentOptions.build({"composite": {"resample": "nearest"}}, source="kbvqa.toml")
    with pytest.raises(OptionsError, match=r"^kbvqa\.toml: layuot: "):  # a misspelt key is refused, not ignored
        AugmentOptions.build({"layuot": "grid"}, source="kbvqa.toml")
    # the flag wins over a bad file value, so the run goes on
    assert AugmentOptions.build({"k": 0}, source="kbvqa.toml", k=2).k == 2


def test_stages_get_the_identical_objects_and_stats_record_the_options(tmp_path, monkeypatch):
    samples = _bench(tmp_path)
    opts = AugmentOptions.build(seed=5, height=32, workers=1, min_entities=3, variants=["intra", "blank"])
    seen: dict[str, list] = {"styles": [], "tagging": []}
    real_tasks, real_tag = comp.run_tasks, augment_run.tag_samples

    def run_tasks(tasks, workers=None, **kw):
        seen["styles"] += [t.style for t in tasks]
        seen["workers"] = workers
        return real_tasks(tasks, workers, **kw)

    def tag_samples(samples, config, **kw):
        seen["tagging"].append(config)
        return real_tag(samples, config, **kw)

    monkeypatch.setattr(comp, "run_tasks", run_tasks)
    monkeypatch.setattr(augment_run, "tag_samples", tag_samples)
    stats = augment_run.augment_samples(samples, tmp_path / "img", tmp_path / "out", opts)
    assert seen["styles"] and all(s is opts.composite for s in seen["styles"]) and seen["workers"] == 1
    assert seen["tagging"] == [opts.tagging] and seen["tagging"][0] is opts.tagging
    assert tagging_job(opts.tagging).stages[0].config is opts.tagging
    assert stats["augmented_anchors"] == 6 and stats["variants"] == ["intra", "blank"]
    written = json.loads((tmp_path / "out" / "stats.json").read_text(encoding="utf-8"))
    assert written["options"] == opts.used() == stats["options"]
    tagger = json.loads(manifest_path(tmp_path / "out" / "types.jsonl").read_text(encoding="utf-8"))
    assert tagger["run_config"]["options"] == opts.used()


def test_library_keywords_go_through_the_one_builder(tmp_path):
    _bench(tmp_path)
    with pytest.raises(OptionsError, match="^--k:"):
        augment_run.augment_file(tmp_path / "in.jsonl", tmp_path / "img", tmp_path / "o", k=0)
    with pytest.raises(TypeError, match="not both"):
        augment_run.augment_file(tmp_path / "in.jsonl", tmp_path / "img", tmp_path / "o", AugmentOptions(), k=2)


def test_cli_as_a_user_runs_it(tmp_path, monkeypatch):
    """Relative paths from another working directory, the cache on, a config file under the flags."""
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    work = tmp_path / "work"
    _bench(work)
    (work / "kbvqa.toml").write_text('[augment]\nseed = 11\nvariants = ["intra", "inter"]\nmin_entities = 3\n'
                                     'workers = 1\n[augment.composite]\nheight = 40\nbackground = "0,0,255"\n',
                                     encoding="utf-8")
    monkeypatch.chdir(work)
    res = runner.invoke(app, ["augment", "in.jsonl", "--images", "img", "--out", "out", "--config", "kbvqa.toml",
                              "--height", "36", "--json"])
    assert res.exit_code == 0, res.output
    stats = json.loads(res.stdout)
    used = json.loads((work / "out" / "stats.json").read_text(encoding="utf-8"))["options"]
    assert used == stats["options"]
    assert used["seed"] == 11 and used["variants"] == ["intra", "inter"] and used["config"] == "kbvqa.toml"
    assert used["composite"]["height"] == 36 and used["composite"]["background"] == [0, 0, 255]  # flag, file
    assert used["k"] == 1 and used["composite"]["resample"] == "fast"  # class defaults
    row = json.loads((work / "out" / "manifest.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert Image.open(work / "out" / row["method1_composite_image_path"]).height == 36
    bad = runner.invoke(app, ["augment", "in.jsonl", "--images", "img", "--out", "out2", "--config", "kbvqa.toml",
                              "--background", "nope"])
    assert bad.exit_code == 2 and "--background" in bad.output and "nope" in bad.output
