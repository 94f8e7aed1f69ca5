"""End-to-end augmentation on a small benchmark built from real photographs (skimage, sklearn,
matplotlib): composites, sides, determinism, exclusions, errors, manifest and samples."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from kbvqa.data.ara import read_ara_augmented
from kbvqa.data.images import resolve_image
from kbvqa.data.formats import read_samples, write_samples
from kbvqa.data.schema import Answer, Entity, Sample
from kbvqa.data.urls import canonical_url
from kbvqa.pipelines.augment import ARA_COLUMNS, anchor_id, augment_file
from kbvqa.pipelines.augment.composite import decode

ARA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ara"
H = 96  # small panels keep the tests fast
# KB-category fallback for the pronoun question ("When was it built?" names no type)
URL_TYPES = {"https://en.wikipedia.org/wiki/Hubble_House": "building"}


def _photos() -> dict[str, np.ndarray]:
    import matplotlib.cbook as cbook
    from skimage import data
    from sklearn.datasets import load_sample_images

    imgs = {n: getattr(data, n)() for n in ("astronaut", "coffee", "chelsea", "rocket", "hubble_deep_field",
                                             "immunohistochemistry", "colorwheel", "retina")}
    china, flower = load_sample_images().images
    imgs["china"], imgs["flower"] = china, flower
    with cbook.get_sample_data("grace_hopper.jpg") as fh:
        imgs["grace_hopper"] = np.asarray(Image.open(fh).convert("RGB"))
    return imgs


# (id, type word in the question, entity title, photo, question, answer)
_ROWS = [
    ("b1", "building", "Temple of Heaven", "china", "What is the height of this building?", "38 m"),
    ("b2", "building", "Coffee House", "coffee", "What is the height of this building?", "12 m"),
    ("b3", "building", "Rocket Hall", "rocket", "Who designed this building?", "Ada Lovelace"),
    ("b4", "building", "Hubble House", "hubble_deep_field", "When was it built?", "1990"),
    ("p1", "plant", "Dahlia", "flower", "What family does this plant belong to?", "Asteraceae"),
    ("p2", "plant", "Cell Fern", "immunohistochemistry", "What family does this plant belong to?", "Polypodiaceae"),
    ("p3", "plant", "Wheel Lily", "colorwheel", "What is the native range of this specific plant?", "Asia"),
    ("p4", "plant", "Retina Moss", "retina", "What is the genus of this plant?", "Sphagnum"),
    ("a1", "animal", "Chelsea", "chelsea", "What is the lifespan of this animal?", "15 years"),
    ("a2", "animal", "Astronaut Cat", "astronaut", "What is the lifespan of this animal?", "20 years"),
    ("a3", "animal", "Hopper", "grace_hopper", "What does this animal eat?", "Mice"),
    ("a4", "animal", "Coffee Bean Beetle", "coffee", "Where is the animal in this image found?", "Brazil"),
]


def _sample(i: str, title: str, img: str, q: str, a: str, url: str | None = None) -> Sample:
    return Sample(id=i, question=q, answers=[Answer(text=a)], images=[img], answer_type="String",
                  entity=Entity(url=url or f"https://en.wikipedia.org/wiki/{title.replace(' ', '_')}", title=title))


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> tuple[Path, Path, list[Sample]]:
    root = tmp_path_factory.mktemp("bench")
    imgs = root / "images"
    imgs.mkdir()
    photos = _photos()
    samples = []
    for i, _t, title, photo, q, a in _ROWS:
        rel = f"{i}.jpg"
        Image.fromarray(photos[photo]).save(imgs / rel, quality=90)
        samples.append(_sample(i, title, rel, q, a))
    # same entity as b1 under another url spelling: never a distractor for b1 (and vice versa)
    Image.fromarray(photos["china"][::-1]).save(imgs / "b1dup.jpg")
    samples.append(_sample("b1dup", "Temple of Heaven", "b1dup.jpg", "Which dynasty built this building?", "Ming",
                           url="http://en.m.wikipedia.org/wiki/Temple%20of%20Heaven"))
    # excluded: ambiguous reference and no type at all
    samples.append(_sample("x1", "Thing", "b2.jpg", "What is this object made of?", "Wood"))
    samples.append(_sample("x2", "Nothing", "b2.jpg", "Who wrote the novel?", "Tolstoy"))
    # the answer ('left'/'right') would leak into the spatial cue: intra/blank/double invalid, inter fine
    Image.fromarray(photos["rocket"][::-1, ::-1]).save(imgs / "leak.jpg")
    leak = _sample("leak", "Left Bank Tower", "leak.jpg", "Which bank of the river is this building on?", "left")
    leak.answers.append(Answer(text="right"))  # whichever side is drawn, the cue would give it away
    samples.append(leak)
    # a missing and a corrupt image
    samples.append(_sample("miss", "Ghost Temple", "nowhere/missing.jpg", "How old is this building?", "300 years"))
    (imgs / "corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not a jpeg at all")
    samples.append(_sample("bad", "Broken Lily", "corrupt.jpg", "What colour is this plant?", "White"))
    path = root / "bench.jsonl"
    write_samples(samples, path, "kbvqa")
    return path, imgs, samples


@pytest.fixture(scope="module")
def run1(bench, tmp_path_factory):
    path, imgs, _ = bench
    out = tmp_path_factory.mktemp("out1")
    stats = augment_file(path, imgs, out, seed=7, height=H, workers=2, url_types=URL_TYPES)
    return out, stats


def _manifest(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]


def test_every_input_has_a_status_and_exclusions_are_counted(run1, bench):
    out, stats = run1
    entries = _manifest(out)
    assert sorted(e["anchor_data_id"] for e in entries) == sorted(s.id for s in bench[2])
    by = {e["anchor_data_id"]: e for e in entries}
    assert by["x1"]["status"] == "excluded" and by["x1"]["reason"] == "ambiguous_reference"
    assert by["x2"]["status"] == "excluded" and by["x2"]["reason"] == "no_type"
    assert stats["exclusions"] == {"ambiguous_reference": 1, "no_type": 1}
    assert stats["augmented_anchors"] == len(bench[2]) - 2
    assert sum(stats["side_balance"].values()) == stats["augmented_anchors"]
    assert abs(stats["side_balance"]["left"] - stats["side_balance"]["right"]) <= 1
    assert stats["type_distribution"] == {"building": 7, "plant": 5, "animal": 4}
    assert json.loads((out / "stats.json").read_text()) == stats


def test_composites_put_the_anchor_on_the_recorded_side(run1, bench):
    out, _ = run1
    _, imgs, _ = bench
    rows = list(csv.DictReader(open(out / "manifest.csv", newline="", encoding="utf-8")))
    checked = 0
    for r in rows:
        if r["method1_image_status"] != "saved":
            continue
        comp = np.asarray(Image.open(out / r["method1_composite_image_path"]).convert("RGB"), dtype=np.float32)
        anchor = np.asarray(decode(imgs / r["anchor_image_path"], H), dtype=np.float32)
        pair = decode(imgs / r["method1_pair_image_path"], H)
        assert comp.shape[0] == H and comp.shape[1] == anchor.shape[1] + pair.size[0]
        w = anchor.shape[1]
        here = comp[:, :w] if r["target_side"] == "left" else comp[:, -w:]
        there = comp[:, -w:] if r["target_side"] == "left" else comp[:, :w]
        assert np.abs(here - anchor).mean() < 6  # JPEG noise only
        if pair.size[0] == w:
            assert np.abs(there - anchor).mean() > 10
        assert f"the {r['anchor_entity_type']} on the {r['target_side']}" in r["method1_query"], r["method1_query"]
        checked += 1
    assert checked >= 10


def test_blank_and_double_controls(run1, bench):
    out, _ = run1
    _, imgs, _ = bench
    e = next(e for e in _manifest(out) if e["anchor_data_id"] == "a1")
    anchor = np.asarray(decode(imgs / "a1.jpg", H), dtype=np.float32)
    w = anchor.shape[1]
    blank = np.asarray(Image.open(out / e["blank_composite_image_path"]), dtype=np.float32)
    double = np.asarray(Image.open(out / e["double_composite_image_path"]), dtype=np.float32)
    other = blank[:, w:] if e["target_side"] == "left" else blank[:, :-w]
    assert other.min() > 240  # white panel
    assert other.shape[1] == decode(imgs / e["method1_pair_image_path"], H).size[0]
    assert double.shape[1] == 2 * w
    assert np.abs(double[:, :w] - anchor).mean() < 6 and np.abs(double[:, w:] - anchor).mean() < 6


def test_never_the_anchors_own_entity(run1):
    out, _ = run1
    for e in _manifest(out):
        if e["status"] in ("ok", "partial", "error"):
            own = canonical_url(e["anchor_wikipedia_url"])
            for col in ("method1_pair_wikipedia_url", "method2_pair_wikipedia_url"):
                if e[col]:
                    assert canonical_url(e[col]) != own, (e["anchor_data_id"], col)
            if e["method1_pair_type"]:
                assert e["method1_pair_type"] == e["anchor_entity_type"]
            if e["method2_pair_type"]:
                assert e["method2_pair_type"] != e["anchor_entity_type"]
                assert e["method2_similarity_basis"] == "different_entity_type+cross_family"


def test_missing_and_corrupt_images_error_only_their_variants(run1):
    out, stats = run1
    by = {e["anchor_data_id"]: e for e in _manifest(out)}
    miss = by["miss"]
    assert miss["status"] == "error"
    for v in ("method1", "method2"):
        assert miss[f"{v}_image_status"] == "error"
    assert "missing.jpg" in miss["image_error"] and "FileNotFoundError" in miss["image_error"]
    bad = by["bad"]
    assert bad["status"] == "error" and "corrupt.jpg" in bad["image_error"]
    # the missing image is never chosen as a distractor; the corrupt one may be, and says so
    for e in by.values():
        assert "miss" not in (e.get("method1_pair_data_id") or "").split("|")
        assert "miss" not in (e.get("method2_pair_data_id") or "").split("|")
        for v, col in (("intra", "method1"), ("inter", "method2")):
            st = e.get(f"{col}_image_status")
            if st == "error" and e["anchor_data_id"] not in ("miss", "bad"):
                assert e[f"{col}_pair_data_id"] == "bad" and "corrupt.jpg" in e["errors"][v]
    saved = sum(1 for e in by.values() if e.get("method1_image_status") == "saved")
    assert saved >= 10
    assert stats["distractor_ineligible_missing_image"] == 1


def test_answer_leak_invalidates_positional_variants_and_takes_inter_along(run1, bench, tmp_path):
    """The paper excludes an item from both splits together (§5.2): the leaking intra rewrite is
    invalid, so the anchor's inter variant is excluded too, naming why; without the pairing it stays."""
    out, stats = run1
    leak = next(e for e in _manifest(out) if e["anchor_data_id"] == "leak")
    for col in ("method1_image_status", "blank_image_status", "double_image_status"):
        assert leak[col] == "invalid"
    assert leak["method2_image_status"] == "excluded"
    assert leak["errors"]["inter"].startswith("paired: intra invalid: rewrite: answer")
    assert leak["method2_query"] == "Which bank of the river is this building on?"
    assert any("leaks" in e for e in leak["method1_query_errors"])
    assert leak["status"] == "error"
    # the two splits hold the same anchors, whichever variant failed (rewrite, distractor, composite)
    entries = [e for e in _manifest(out) if e.get("method1_image_status")]
    assert all((e["method1_image_status"] == "saved") == (e["method2_image_status"] == "saved") for e in entries)
    assert any(e["method2_image_status"] == "excluded" and e["method1_image_status"] == "error" for e in entries)
    got = {s.id for s in read_samples(out / "samples.jsonl", "kbvqa")}
    assert {anchor_id(i) for i in got if i.endswith("__intra")} == {anchor_id(i) for i in got if i.endswith("__inter")}
    assert stats["variant_status"]["inter"].get("excluded", 0) >= 1
    path, imgs, _ = bench
    alone = tmp_path / "alone"
    augment_file(path, imgs, alone, seed=7, height=24, workers=1, variants=("intra", "inter"), url_types=URL_TYPES,
                 paired_exclusion=False)
    leak = next(e for e in _manifest(alone) if e["anchor_data_id"] == "leak")
    assert leak["method1_image_status"] == "invalid" and leak["method2_image_status"] == "saved"


def test_pronoun_question_made_explicit(run1):
    out, _ = run1
    e = next(e for e in _manifest(out) if e["anchor_data_id"] == "b4")
    assert e["anchor_question_explicit"] == "When was this building built?"
    assert e["method1_query"] == f"When was the building on the {e['target_side']} built?"
    assert e["method2_query_without_position"] == "When was this building built?"
    assert e["method2_query"] == "When was it built?"  # the paper: the inter question is unchanged (§5.1)


def test_inter_explicit_option(bench, tmp_path):
    path, imgs, _ = bench
    augment_file(path, imgs, tmp_path / "x", seed=7, height=24, workers=1, variants=("inter",), url_types=URL_TYPES,
                 inter_explicit=True)
    e = next(e for e in _manifest(tmp_path / "x") if e["anchor_data_id"] == "b4")
    assert e["method2_query"] == "When was this building built?"


def test_samples_carry_the_anchor_answers(run1, bench):
    out, _ = run1
    answers = {s.id: s.answer_texts for s in bench[2]}
    got = list(read_samples(out / "samples.jsonl", "kbvqa"))
    ids = {s.id for s in got}
    assert {"a1__anchor", "a1__intra", "a1__inter", "a1__blank", "a1__double"} <= ids
    assert "leak__intra" not in ids and "leak__inter" not in ids and "miss__intra" not in ids
    for s in got:
        assert s.answer_texts == answers[anchor_id(s.id)]
        # relative to OUT, inside it: OUT is the augmented set's image root
        assert not Path(s.images[0]).is_absolute() and resolve_image(s.images[0], out).is_file()
        assert s.meta["augmented"]["variant"] == s.id.rsplit("__", 1)[1]


def test_manifest_csv_is_readable_by_the_ara_reader(run1):
    out, _ = run1
    with open(out / "manifest.csv", newline="", encoding="utf-8") as fh:
        assert tuple(next(csv.reader(fh))) == ARA_COLUMNS
    got = list(read_samples(out / "manifest.csv", "ara"))
    assert len(got) == 3 * len(list(csv.DictReader(open(out / "manifest.csv", newline=""))))
    assert {s.id.rsplit("__", 1)[1] for s in got} == {"anchor", "intra", "inter"}


def test_same_seed_same_bytes_other_seed_other_choices(bench, run1, tmp_path):
    path, imgs, _ = bench
    out1, _ = run1
    out2, out3 = tmp_path / "again", tmp_path / "seed8"
    augment_file(path, imgs, out2, seed=7, height=H, workers=1, url_types=URL_TYPES)  # in-process: same bytes as the pool
    assert (out1 / "manifest.csv").read_bytes() == (out2 / "manifest.csv").read_bytes()
    assert (out1 / "manifest.jsonl").read_bytes() == (out2 / "manifest.jsonl").read_bytes()
    f1 = sorted(p.relative_to(out1) for p in (out1 / "composites").rglob("*.jpg"))
    f2 = sorted(p.relative_to(out2) for p in (out2 / "composites").rglob("*.jpg"))
    assert f1 == f2 and len(f1) > 30
    assert all((out1 / f).read_bytes() == (out2 / f).read_bytes() for f in f1)
    augment_file(path, imgs, out3, seed=8, height=H, workers=1, variants=("intra", "inter"), url_types=URL_TYPES)
    a = {r["anchor_data_id"]: r for r in csv.DictReader(open(out1 / "manifest.csv", newline=""))}
    b = {r["anchor_data_id"]: r for r in csv.DictReader(open(out3 / "manifest.csv", newline=""))}
    assert a.keys() == b.keys()
    diff = sum(a[k]["target_side"] != b[k]["target_side"] or a[k]["method1_pair_data_id"] != b[k]["method1_pair_data_id"]
               or a[k]["method2_pair_data_id"] != b[k]["method2_pair_data_id"] for k in a)
    assert diff >= 3
    assert not (out3 / "composites" / "blank").exists()


def test_num_samples_balances_types(bench, tmp_path):
    path, imgs, _ = bench
    stats = augment_file(path, imgs, tmp_path / "o", seed=1, num_samples=6, height=32, workers=1,
                         variants=("inter",), url_types=URL_TYPES)
    assert stats["augmented_anchors"] == 6
    assert stats["type_distribution"] == {"building": 2, "plant": 2, "animal": 2}
    assert stats["status"]["not_sampled"] == len(bench[2]) - 2 - 6


def test_ara_release_round_trip_and_header(tmp_path):
    src = ARA / "augmented" / "infoseek_challenging_queries_seed3185.csv"
    if not src.exists():
        pytest.skip("ARA augmented release not available")
    from kbvqa.pipelines.augment import manifest as mf

    rows = list(read_ara_augmented(src))
    assert tuple(rows[0].keys()) == ARA_COLUMNS
    out = tmp_path / "copy.csv"
    assert mf.write_csv(rows, out) == len(rows)
    assert out.read_bytes() == src.read_bytes()
    assert list(read_ara_augmented(out)) == rows
    # prediction ids in the authors' style map back to the anchor
    assert anchor_id(rows[0]["anchor_data_id"] + "__method1__x") == rows[0]["anchor_data_id"]


def test_grid_with_three_distractors_and_similarity(bench, tmp_path):
    from kbvqa.models.image_encoders import HistogramEncoder

    path, imgs, _ = bench
    out = tmp_path / "grid"
    stats = augment_file(path, imgs, out, seed=3, height=40, workers=1, variants=("intra", "double"), k=3,
                         layout="grid", url_types=URL_TYPES, encoder=HistogramEncoder())
    # every anchor whose image embeds gets the hardest same-type distractors; the missing/corrupt two fall back
    assert stats["intra_basis"] == {"|".join(["same_type+image_similarity"] * 3): 14, "same_type|same_type|same_type": 2}
    assert stats["embedding_failures"] == 2
    e = next(e for e in _manifest(out) if e["anchor_data_id"] == "b2")
    assert e["method1_image_status"] == "saved"
    pairs = e["method1_pair_data_id"].split("|")
    assert len(pairs) == 3 and "b2" not in pairs and len(set(pairs)) == 3
    assert e["method1_query"] == f"What is the height of the building in the top {e['target_side']}?"
    im = Image.open(out / e["method1_composite_image_path"])
    assert im.height == 2 * 40  # 2 x 2 grid of 40-px rows
    assert Image.open(out / e["double_composite_image_path"]).height == 80


def test_tagging_and_intra_rewrites_reproduce_the_release():
    """On the released anchors our type tags agree with the authors' and our intra rewrite for the
    released side reproduces their method1_query (we also capitalise a sentence-initial cue)."""
    src = ARA / "augmented" / "infoseek_challenging_queries_seed3185.csv"
    if not src.exists():
        pytest.skip("ARA augmented release not available")
    from kbvqa.pipelines.augment import rewrite as rw
    from kbvqa.pipelines.augment.types import TypeVocabulary, tag_samples

    vocab = TypeVocabulary()
    rows = list(csv.DictReader(open(src, newline="", encoding="utf-8")))
    tags = tag_samples([Sample(id=r["anchor_data_id"], question=r["anchor_question"]) for r in rows], vocab)
    assert [t.type for t in tags] == [r["anchor_entity_type"] for r in rows]
    same = 0
    for r in rows:
        explicit, m, _ = rw.prepare(r["anchor_question"], r["anchor_entity_type"], vocab)
        got = rw.rewrite_positional(explicit, m, r["anchor_entity_type"], r["target_side"], vocab, [r["anchor_answer"]])
        assert got.ok, (r["anchor_question"], got.errors)
        same += got.text[:1].lower() + got.text[1:] == r["method1_query"][:1].lower() + r["method1_query"][1:]
    assert same == len(rows)
