"""Build the demo benchmark at run time from photographs that ship inside PyPI packages.

Each entity gets two pictures: the KB image (the photograph as shipped) and a query image (a crop,
mirror and resize of it), so image retrieval has real work to do. Articles and questions come from
content.json; questions with a `planted_flaw` are broken on purpose for the audit to find.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from kbvqa.data.schema import Answer, Article, Entity, Sample, Section

CONTENT = "content.json"
COMMUNITY = "community.json"


def load_content(name: str = CONTENT) -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath(name).read_text(encoding="utf-8"))


def load_photo(source: str) -> Image.Image:
    """'skimage:NAME' | 'sklearn:FILE' | 'matplotlib:FILE' -> RGB image, all offline."""
    lib, _, name = source.partition(":")
    if lib == "skimage":
        from skimage import data

        arr = getattr(data, name)()
        if arr.ndim == 2:
            arr = np.stack([arr] * 3, axis=-1)
        return Image.fromarray(arr).convert("RGB")
    if lib == "sklearn":
        from sklearn.datasets import load_sample_image

        return Image.fromarray(load_sample_image(name)).convert("RGB")
    if lib == "matplotlib":
        from matplotlib import cbook

        with cbook.get_sample_data(name) as f:
            return Image.open(f).convert("RGB")
    raise ValueError(f"unknown photo source {source!r}")


def query_view(img: Image.Image) -> Image.Image:
    """A different photograph of the same thing, as far as pixels go: crop, mirror, resize."""
    w, h = img.size
    crop = img.crop((int(w * 0.08), int(h * 0.06), int(w * 0.94), int(h * 0.96)))
    return crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT).resize((384, int(384 * crop.height / crop.width)))


@dataclass
class DemoBench:
    root: Path
    samples: Path  # kbvqa JSONL (also the reference file for scoring)
    kb: Path  # SQLite KB
    kb_images: dict[str, Path]  # article url -> KB image
    flaws: dict[str, str]  # sample id -> planted flaw
    n_samples: int


def build_bench(root: Path) -> DemoBench:
    from kbvqa.data.formats import write_samples
    from kbvqa.kb.importer import build_kb

    content = load_content()
    root = Path(root)
    (root / "images").mkdir(parents=True, exist_ok=True)
    entities = {e["key"]: e for e in content["entities"]}
    articles, kb_images = [], {}
    for key, e in entities.items():
        photo = load_photo(e["source"])
        kb_img = root / "images" / f"kb_{key}.jpg"
        photo.save(kb_img, quality=92)
        query_view(photo).save(root / "images" / f"query_{key}.jpg", quality=90)
        kb_images[e["url"]] = kb_img
        articles.append(Article(url=e["url"], title=e["title"], image_urls=[f"images/kb_{key}.jpg"],
                                sections=[Section(index=i, title=t, text=x) for i, (t, x) in enumerate(e["sections"])],
                                meta={"type": e["type"], "photo_source": e["source"]}))
    build_kb(articles, root / "kb.sqlite", overwrite=True)

    samples, flaws = [], {}
    keys = list(entities)
    for i, (key, question, answer, atype, flaw) in enumerate(content["questions"]):
        e = entities[key]
        sid = f"demo_{i:03d}"
        # InfoSeek-style splits so the official harmonic mean has two halves: alternate by entity.
        split = "demo_unseen_question" if keys.index(key) % 2 == 0 else "demo_unseen_entity"
        samples.append(Sample(id=sid, question=question, answers=[Answer(text=answer)], answer_type=atype,
                              question_type=atype, images=[f"images/query_{key}.jpg"],
                              entity=Entity(url=e["url"], title=e["title"]), split=split, dataset="kbvqa-demo",
                              meta={"entity_type": e["type"], **({"planted_flaw": flaw} if flaw else {})}))
        if flaw:
            flaws[sid] = flaw
    write_samples(samples, root / "samples.jsonl", "kbvqa")
    return DemoBench(root=root, samples=root / "samples.jsonl", kb=root / "kb.sqlite", kb_images=kb_images,
                     flaws=flaws, n_samples=len(samples))


def community_view(img: Image.Image) -> Image.Image:
    """A community member's own snapshot of the thing: a tighter, off-centre crop, not mirrored."""
    w, h = img.size
    crop = img.crop((int(w * 0.15), int(h * 0.1), int(w * 0.9), int(h * 0.85)))
    return crop.resize((320, int(320 * crop.height / crop.width)))


def build_community(bench: DemoBench) -> Path:
    """The NoteVQA-style community set (community.json): query snapshots, short and interleaved
    references citing the KB photographs, category and intent. Written as `community.jsonl` in the
    NoteVQA layout (kbvqa.data.notevqa), beside the bench's samples and images."""
    from kbvqa.data.notevqa import write_notevqa, sample_from_notevqa

    content = load_content(COMMUNITY)
    entities = {e["key"]: e for e in load_content()["entities"]}
    root = bench.root
    rows = []
    for i, item in enumerate(content["items"]):
        key = item["key"]
        query = root / "images" / f"community_{key}.jpg"
        if not query.exists():
            community_view(Image.open(root / "images" / f"kb_{key}.jpg").convert("RGB")).save(query, quality=90)
        ref_images = [{"path": f"images/kb_{k}.jpg", "source_url": entities[k]["url"]} for k in item["images"]]
        rows.append(sample_from_notevqa({
            "id": f"community_{i:03d}", "images": [f"images/community_{key}.jpg"], "question": item["question"],
            "answer": item["answer"], "category": item["category"], "intent": item["intent"], "language": "en",
            "reference": {"text": item["reference"], "images": ref_images},
            "source": {"platform": "kbvqa-demo", "entity": entities[key]["url"]}}))
    out = root / "community.jsonl"
    write_notevqa(rows, out)
    return out


POSTS = "posts.json"


def build_posts(bench: DemoBench) -> Path:
    """The community posts of the curation demo (posts.json): written as `posts/posts.jsonl` in the
    posts layout (kbvqa.data.posts) with their pictures under `posts/images/`, including the posts each
    filter should drop — no image, a re-uploaded picture, a missing and a broken file, a thumbnail, a
    repeated id, spam, no question — and the ones only a model can drop (text-only answerable,
    answer-revealing wording, not a visual question). Each post's `expect` says where it should end."""
    from kbvqa.data.jsonl import write_jsonl

    root = bench.root / "posts"
    (root / "images").mkdir(parents=True, exist_ok=True)

    def render(spec: str, pid: str, row: int, n: int) -> str:
        kind, _, key = spec.partition(":")
        rel = f"images/post{row:02d}_{n}.jpg"  # by row: a repeated id must not overwrite the first post's picture
        target = root / rel
        if kind == "missing":
            return f"images/post{row:02d}_{n}_missing.jpg"
        if kind == "broken":
            target.write_bytes(b"this is not a JPEG file\n" * 4)
            return rel
        photo = Image.open(bench.root / "images" / f"kb_{key}.jpg").convert("RGB")
        if kind == "photo":
            community_view(photo).save(target, quality=90)
        elif kind == "repost":
            view = community_view(photo)
            view.resize((view.width * 5 // 4, view.height * 5 // 4)).save(target, quality=55)
        elif kind == "part":
            half = photo.crop((0, 0, photo.width // 2, photo.height))
            half.resize((320, int(320 * half.height / half.width))).save(target, quality=90)
        elif kind == "thumb":
            photo.resize((64, int(64 * photo.height / photo.width))).save(target, quality=85)
        else:
            raise ValueError(f"posts.json: unknown image spec {spec!r} in post {pid}")
        return rel

    rows = []
    for row, post in enumerate(load_content(POSTS)["posts"], start=1):
        rows.append({**{k: v for k, v in post.items() if k != "images"},
                     "images": [render(spec, post["id"], row, n) for n, spec in enumerate(post["images"], start=1)],
                     "platform": {"name": "kbvqa-demo"}})
    out = root / "posts.jsonl"
    write_jsonl(out, rows)
    return out
