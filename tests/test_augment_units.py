"""Units of the augmentation pipeline: type tagging, rewriting, distractor sampling, compositing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from skimage import data

from kbvqa.models.prompts.augment import ENTITY_TYPE
from kbvqa.data.schema import Article, Entity, Provenance, Sample
from kbvqa.models.result import ChatResult
from kbvqa.pipelines.augment import anchor_id
from kbvqa.pipelines.augment import composite as comp
from kbvqa.pipelines.augment import rewrite as rw
from kbvqa.pipelines.augment.distractors import Candidate, Sampler, build_pools
from kbvqa.pipelines.augment.types import TypeVocabulary, tag_samples

V = TypeVocabulary()


# ------------------------------------------------------------------------------------------ types

@pytest.mark.parametrize("q,typ,phrase", [
    ("What is the brand of this vehicle?", "vehicle", "this vehicle"),
    ("What is the total quantity of produced items for this type of aircraft?", "aircraft", "this type of aircraft"),
    ("What is the native range of this particular plant?", "plant", "this particular plant"),
    ("Which river flows past this pictured city?", "city", "this pictured city"),
    ("Where do these birds nest?", "bird", "these birds"),
    ("How long do those fungi live?", "fungus", "those fungi"),
    ("What is the height of the building in this image?", "building", "the building in this image"),
    ("In which country is this island, and is this bird native?", "island", "this island"),  # earliest wins
])
def test_type_phrases(q, typ, phrase):
    m = V.find(q)
    assert m is not None and m.type == typ and m.phrase == phrase and not m.ambiguous
    assert q[m.start:m.end] == phrase


@pytest.mark.parametrize("q", ["What is this object made of?", "Where is this place?", "Who owns this item?",
                               "What is this thing called?", "What is the elevation of this location?"])
def test_ambiguous_questions_are_excluded(q):
    [tag] = tag_samples([Sample(id="x", question=q)], V)
    assert tag.type is None and tag.excluded == "ambiguous_reference"


def test_configurable_vocabulary_and_aliases():
    v = TypeVocabulary(["tree", "bird"], aliases={"oak": "tree"}, ambiguous=["object"])
    assert v.find("How old is this oak?").type == "tree"
    assert v.find("What is this building?") is None
    assert v.find("Where do these trees grow?").type == "tree"


class FakeClient:
    """Answers like a model role; records what it was asked."""

    provenance = Provenance(backend="fake")

    def __init__(self, replies):
        self.replies = replies
        self.calls = []

    async def chat(self, messages, *, schema=None, prompt_version="", **_):
        q = messages[-1]["content"]
        self.calls.append((q, schema, prompt_version))
        for key, (status, payload) in self.replies.items():
            if key in q:
                return ChatResult(status=status, data=payload, reason="" if status == "ok" else "boom",
                                  provenance=self.provenance)
        raise AssertionError(q)


class FakeKB:
    def __init__(self, arts):
        self.arts = {a.url: a for a in arts}

    def get(self, url):
        return self.arts.get(url)


def test_llm_tagger_then_kb_fallback():
    samples = [
        Sample(id="a", question="When was it built?"),
        Sample(id="b", question="Who painted it?", entity=Entity(url="https://en.wikipedia.org/wiki/Mill")),
        Sample(id="c", question="What does it eat?", entity=Entity(url="http://en.wikipedia.org/wiki/Cat")),
        Sample(id="d", question="What is the height of this building?"),
        Sample(id="e", question="How heavy is it?"),
    ]
    client = FakeClient({"When was it built": ("ok", {"type": "Building"}),
                         "Who painted": ("invalid", None),
                         "What does it eat": ("ok", {"type": "spaceship"}),
                         "How heavy": ("error", None)})
    kb = FakeKB([Article(url="https://en.wikipedia.org/wiki/Mill", meta={"type": "building"})])
    tags = tag_samples(samples, V, client=client, kb=kb,
                       url_types={"https://en.wikipedia.org/wiki/Cat": "animal"})
    assert [(t.type, t.source) for t in tags] == [("building", "llm"), ("building", "kb"), ("animal", "url_map"),
                                                  ("building", "phrase"), (None, None)]
    assert tags[4].excluded == "no_type" and tags[4].notes[0].startswith("llm_error")
    assert tags[2].notes[0].startswith("llm_invalid")
    assert len(client.calls) == 4  # the phrase-tagged question never goes to the model
    assert all(c[2] == ENTITY_TYPE.id == "augment.entity_type@1" for c in client.calls)


def test_llm_tagger_runs_through_the_runner_with_resume_and_manifest(tmp_path):
    """The tagger is a registered stage run by a Job: a failed call is retried on resume (and only
    it), the manifest names the prompt and the tagger model and counts its tokens."""
    import json

    from kbvqa.data.schema import Usage
    from kbvqa.stages import STAGES

    assert STAGES.entry("augment-entity-type").info["family"] == "augment"
    samples = [Sample(id="a", question="When was it built?"), Sample(id="b", question="How heavy is it?"),
               Sample(id="c", question="What is the height of this building?")]

    class Billed(FakeClient):
        async def chat(self, messages, **kw):
            res = await super().chat(messages, **kw)
            return res.model_copy(update={"usage": Usage(prompt_tokens=10, completion_tokens=2, calls=1)})

    out = tmp_path / "types.jsonl"
    first = Billed({"When was it built": ("ok", {"type": "building"}), "How heavy": ("error", None)})
    tags = tag_samples(samples, V, client=first, out=out)
    assert [(t.type, t.excluded) for t in tags] == [("building", None), (None, "no_type"), ("building", None)]
    assert tags[1].notes[0].startswith("llm_error")
    lines = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert lines["b"]["status"] == "error" and lines["a"]["entity_type"]["source"] == "llm"
    m = json.loads((tmp_path / "types.manifest.json").read_text())
    assert m["counts"] == {"ok": 2, "error": 1, "invalid": 0, "needs_model": 0} and m["usage"]["prompt_tokens"] == 20
    assert ENTITY_TYPE.id in m["stages"][0]["prompt_hashes"] and m["roles"]["tagger"]["backend"] == "fake"

    second = Billed({"How heavy": ("ok", {"type": "vehicle"})})
    tags = tag_samples(samples, V, client=second, out=out)
    assert [t.type for t in tags] == ["building", "vehicle", "building"]
    assert len(second.calls) == 1  # resumed: only the failed sample was asked again
    # another input (or vocabulary) is a fresh run, never stale tags
    third = Billed({"When was it built": ("ok", {"type": "bridge"}), "How heavy": ("ok", {"type": "vehicle"})})
    tags = tag_samples(samples[:2], V, client=third, out=out)
    assert [t.type for t in tags] == ["bridge", "vehicle"] and len(third.calls) == 2


# ---------------------------------------------------------------------------------------- rewrite

@pytest.mark.parametrize("q,typ,side,want", [
    ("What is the brand of this vehicle?", "vehicle", "left", "What is the brand of the vehicle on the left?"),
    ("What is the total quantity of produced items for this type of aircraft?", "aircraft", "right",
     "What is the total quantity of produced items for the aircraft on the right?"),
    ("This bird eats what?", "bird", "left", "The bird on the left eats what?"),
    ("Where do these birds nest?", "bird", "right", "Where do the birds on the right nest?"),
    ("When was it built?", "building", "left", "When was the building on the left built?"),
    ("How tall is the tower?", "building", "right", "How tall is the tower for the building on the right?"),
    ("Where do they nest?", "bird", "left", "Where do the birds on the left nest?"),
    ("What is its height?", "building", "right", "What is the building on the right's height?"),
])
def test_positional_rewrite(q, typ, side, want):
    explicit, match, _ = rw.prepare(q, typ, V)
    r = rw.rewrite_positional(explicit, match, typ, side, V, answers=["42"])
    assert r.ok, r.errors
    assert r.text == want


def test_validation_catches_bad_rewrites():
    kw = {"etype": "bird", "vocab": V, "expect_cue": "on the left"}
    q = "What does this bird eat?"
    assert rw.validate(q, "What does the bird on the left eat?", answers=["seeds"], **kw) == []
    assert any("exactly one" in e for e in rw.validate(q, "What does the bird on the left on the left eat?", **kw))
    assert any("not consumed" in e for e in rw.validate(q, "What does this bird on the left eat?", **kw))
    assert any("'?'" in e for e in rw.validate(q, "What does the bird on the left eat", **kw))
    assert any("leaks" in e for e in rw.validate(q, "What does the bird on the left eat?", answers=["left"], **kw))
    assert any("expected" in e for e in rw.validate(q, "What does the bird on the right eat?", **kw))
    assert any("ungrammatical" in e for e in rw.validate(q, "What does the the bird on the left eat?", **kw))
    # an answer already in the original question is not a leak introduced by the rewrite
    assert rw.validate("Is this bird a seed eater?", "Is the bird on the left a seed eater?",
                       answers=["seed"], **kw) == []


def test_anchor_id():
    assert anchor_id("infoseek_val_1__intra") == "infoseek_val_1"
    assert anchor_id("x__double") == "x"
    assert anchor_id("E-VQA_3__method2__E-VQA_9") == "E-VQA_3"
    assert anchor_id("plain") == "plain"


# ----------------------------------------------------------------------------------- distractors

def _cands(spec: dict[str, int], questions: int = 1) -> list[Candidate]:
    out, i = [], 0
    for t, n in spec.items():
        for j in range(n):
            out.append(Candidate(i, f"{t}{j}", t, f"https://en.wikipedia.org/wiki/{t}_{j}", f"{t} {j}",
                                 f"What is the q{j % questions} of this {t}?", ""))
            i += 1
    return out


def test_pools_drop_small_types_and_inter_is_balanced_cross_family():
    cands = _cands({"building": 6, "bridge": 4, "bird": 5, "insect": 4, "plant": 4, "lake": 2})
    pools = build_pools(cands, min_entities=4)
    assert pools.dropped_types == {"lake": 2}
    s = Sampler(pools, seed=3)
    anchors = s.select_anchors()
    assert len(anchors) == 23
    picked = [s.inter(a) for a in anchors]
    for a, ch in zip(anchors, picked):
        assert ch.candidate.type != a.type
        assert s.family(ch.candidate.type) != s.family(a.type)
        assert ch.basis == "different_entity_type+cross_family"
    counts = s.inter_use
    assert max(counts.values()) - min(counts.values()) <= 3  # least-used type first


def test_intra_prefers_same_question_and_never_self():
    cands = _cands({"bird": 6}, questions=2)
    # a second row for bird0's entity under another url spelling
    cands.append(Candidate(99, "bird0b", "bird", cands[0].entity_key, "bird 0", "What is the q0 of this bird?", ""))
    s = Sampler(build_pools(cands, 2), seed=11)
    for _ in range(20):
        ch = s.intra(cands[0])
        assert ch.candidate.entity_key != cands[0].entity_key
        assert ch.basis == "same_type+same_question" and ch.candidate.qkey == cands[0].qkey


def test_sampling_is_seeded():
    cands = _cands({"building": 5, "bird": 5, "plant": 5})

    def draw(seed):
        s = Sampler(build_pools(cands), seed=seed)
        a = s.select_anchors(9)
        return [(x.id, s.intra(x).candidate.id, s.inter(x).candidate.id) for x in a], s.sides(9)

    assert draw(1) == draw(1)
    assert draw(1) != draw(2)
    assert sorted(draw(5)[1]) == ["left"] * 5 + ["right"] * 4


def test_similarity_aware_intra_picks_the_nearest_image(tmp_path):
    from kbvqa.models.image_encoders import HistogramEncoder

    ims = {"a": data.coffee(), "near": data.coffee()[:, ::-1], "far1": data.astronaut(), "far2": data.rocket()}
    cands = []
    for i, (k, arr) in enumerate(ims.items()):
        Image.fromarray(arr).save(tmp_path / f"{k}.png")
        cands.append(Candidate(i, k, "plant", f"u:{k}", k, f"What is {k} of this plant?", str(tmp_path / f"{k}.png")))
    s = Sampler(build_pools(cands, 2), seed=0, encoder=HistogramEncoder())
    ch = s.intra(cands[0])
    assert ch.candidate.id == "near" and ch.basis == "same_type+image_similarity" and ch.similarity > 0.9


# -------------------------------------------------------------------------------------- composite

def test_exif_orientation_and_draft_decode(tmp_path):
    arr = data.rocket()  # 427 x 640 (h x w)
    im = Image.fromarray(arr)
    exif = im.getexif()
    exif[0x0112] = 6  # rotate 90 degrees on display
    p = tmp_path / "rot.jpg"
    im.save(p, exif=exif, quality=92)
    out = comp.decode(p, 320)
    assert out.size == (round(427 * 320 / 640), 320)  # width and height swapped by the orientation
    assert comp.probe_size(p, 320) == out.size


@pytest.mark.parametrize("photo", ["coffee", "chelsea", "rocket", "hubble_deep_field"])
def test_fast_resample_stays_within_one_level_of_lanczos(tmp_path, photo):
    """The default mode enlarges with OpenCV's bicubic and shrinks (by up to 4x) with a Lanczos
    prefilter + bicubic read-out: on real photographs the panel is within 1/255 of Pillow's LANCZOS
    on average either way; `resample="lanczos"`, and a shrink by more than 4x, are LANCZOS exactly."""
    src = Image.fromarray(getattr(data, photo)()).convert("RGB")
    p = tmp_path / "src.png"  # lossless, so decode() sees exactly `src`
    src.save(p)
    for height in (src.height + 40, 2 * src.height, src.height - 40, src.height // 2, src.height // 3):
        width = round(src.width * height / src.height)
        lanczos = src.resize((width, height), Image.Resampling.LANCZOS, reducing_gap=3.0)
        fast = comp.decode(p, height)
        assert fast.size == lanczos.size and fast.mode == "RGB"
        diff = np.abs(np.asarray(fast, dtype=np.int16) - np.asarray(lanczos, dtype=np.int16)).mean()
        assert 0 < diff <= 1.0, (height, diff)  # a different filter, not a different picture
        assert np.array_equal(np.asarray(comp.decode(p, height, "lanczos")), np.asarray(lanczos))
    tiny = src.height // 5
    assert np.array_equal(np.asarray(comp.decode(p, tiny)), np.asarray(comp.decode(p, tiny, "lanczos")))


def test_fast_shrink_handles_degenerate_sizes():
    """Panels one pixel wide or high, and kernels longer than the image, still come out whole."""
    rng = np.random.default_rng(0)
    for (w0, h0), size in (((3, 40), (1, 10)), ((40, 3), (13, 1)), ((2, 2), (1, 1)), ((9, 9), (3, 3))):
        im = Image.fromarray(rng.integers(0, 256, (h0, w0, 3), dtype=np.uint8))
        out = comp.resize_panel(im, size)
        assert out.size == size and out.mode == "RGB"
        ref = np.asarray(im.resize(size, Image.Resampling.LANCZOS), dtype=np.int16)
        assert np.abs(np.asarray(out, dtype=np.int16) - ref).mean() < 16  # noise, the worst case


def test_unknown_resample_mode_is_refused():
    with pytest.raises(ValueError, match="unknown resample 'nearest'"):
        comp.Style(resample="nearest")


def test_row_grid_k2_blank_double_png(tmp_path):
    a, b, c = tmp_path / "a.jpg", tmp_path / "b.jpg", tmp_path / "c.png"
    Image.fromarray(data.coffee()).save(a)  # 600x400
    Image.fromarray(data.chelsea()).save(b)  # 451x300
    Image.fromarray(data.astronaut()).save(c)  # 512x512
    style = comp.Style(height=100, gap=4, background=(255, 0, 0), fmt="png")
    jobs = (
        comp.Job(str(tmp_path / "row.png"), ("anchor", "d1", "d2")),
        comp.Job(str(tmp_path / "grid.png"), ("d1", "anchor", "d2"), layout="grid", cols=2),
        comp.Job(str(tmp_path / "blank.png"), ("blank:d1", "anchor")),
        comp.Job(str(tmp_path / "double.png"), ("anchor", "anchor")),
        comp.Job(str(tmp_path / "broken.png"), ("anchor", "missing")),
    )
    res = comp.run_task(comp.Task({"anchor": str(a), "d1": str(b), "d2": str(c),
                                   "missing": str(tmp_path / "nope.jpg")}, jobs, style))
    assert [r.status for r in res] == ["saved"] * 4 + ["error"]
    assert "nope.jpg" in res[4].reason and "missing image" in res[4].reason
    wa, wb, wc = 150, 150, 100
    row = np.asarray(Image.open(tmp_path / "row.png"))
    assert row.shape == (100, wa + wb + wc + 8, 3)
    assert (row[:, wa:wa + 4] == [255, 0, 0]).all()  # the gap has the background colour
    grid = Image.open(tmp_path / "grid.png")
    assert grid.size == (2 * wa + 4, 2 * 100 + 4)
    blank = np.asarray(Image.open(tmp_path / "blank.png"))
    assert blank.shape[1] == wb + 4 + wa and (blank[:, :wb] == 255).all()
    double = np.asarray(Image.open(tmp_path / "double.png")).astype(int)
    assert np.abs(double[:, :wa] - double[:, wa + 4:]).max() == 0


def test_pool_matches_in_process(tmp_path):
    Image.fromarray(data.coffee()).save(tmp_path / "a.jpg")
    Image.fromarray(data.chelsea()).save(tmp_path / "b.jpg")
    tasks = [comp.Task({"anchor": str(tmp_path / "a.jpg"), "d": str(tmp_path / "b.jpg")},
                       (comp.Job(str(tmp_path / f"{w}_{i}.jpg"), ("anchor", "d") if i % 2 else ("d", "anchor")),),
                       comp.Style(height=64)) for w in ("p", "s") for i in range(4)]
    pooled = comp.run_tasks(tasks[:4], workers=2)
    serial = comp.run_tasks(tasks[4:], workers=1)
    assert all(r[0].status == "saved" for r in pooled + serial)
    for i in range(4):
        assert Path(tmp_path / f"p_{i}.jpg").read_bytes() == Path(tmp_path / f"s_{i}.jpg").read_bytes()
