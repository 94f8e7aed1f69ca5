"""Reference construction (seed 001 §3.2, App. C): every stage against a scripted VLM server and a fake
web server on 127.0.0.1, the deterministic gates on shipped photographs, the human audit, and an
offline build over the demo community set up to the first VLM stage."""

from __future__ import annotations

import base64
import csv
import io
import json
import pickle
import re
import struct
import sys
import zlib
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.formats import read_samples
from kbvqa.data.phash import CERTAIN_BITS, distance, phash
from kbvqa.demo.bench import build_community, load_photo
from kbvqa.kb.store import KBStore
from kbvqa.models.client import OpenAIChatClient
from kbvqa.models.image_encoders import HistogramEncoder
from kbvqa.pipelines.answer import build_answer_job
from kbvqa.pipelines.index import build_image_index
from kbvqa.pipelines.reference import ReferenceConfig, load_reference_config, reference_context, stage_job
from kbvqa.pipelines.reference.harvest import HarvestConfig, ImageStore, LoopFetcher, page_images, pre_gate
from kbvqa.pipelines.reference.synthesis import check_tags, renumber
from kbvqa.pipelines.reference.urls import collect_urls, split_visit
from kbvqa.runner import read_results
from kbvqa.tools.base import VISIT_HEADER

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply  # noqa: E402
from fake_web_server import FakeWebServer, Resp, json_resp, loopback_only, redirect  # noqa: E402

runner = CliRunner()
Q, A = "Who is the astronaut in this photo?", "Eileen Collins"


# ----------------------------------------------------------------------------------------- helpers


def jpeg(img: Image.Image, quality: int = 90) -> bytes:
    buf = io.BytesIO()
    img.convert("RGB").save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def png(img: Image.Image) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()


def photo(name: str = "astronaut") -> Image.Image:
    return load_photo(f"skimage:{name}")


def crop(img: Image.Image, frac: float) -> Image.Image:
    w, h = img.size
    return img.crop((int(w * frac), int(h * frac), int(w * (1 - frac)), int(h * (1 - frac))))


def bomb_png(w: int = 100_000, h: int = 100_000) -> bytes:
    """A valid PNG header claiming w×h pixels with almost no data: a decompression bomb's shape."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b""))


def text_of(req: dict) -> str:
    """All text of a chat request (system + user parts)."""
    out = []
    for m in req["messages"]:
        c = m["content"]
        out.extend([c] if isinstance(c, str) else [p.get("text", "") for p in c if p.get("type") == "text"])
    return "\n".join(out)


def images_of(req: dict) -> list[Image.Image]:
    imgs = []
    for m in req["messages"]:
        if isinstance(m["content"], list):
            for p in m["content"]:
                if p.get("type") == "image_url":
                    data = p["image_url"]["url"].split(",", 1)[1]
                    imgs.append(Image.open(io.BytesIO(base64.b64decode(data))))
    return imgs


def kind_of(req: dict) -> str:
    t = text_of(req)
    for key, marker in (("urls", "Rank the pages"), ("candidate", "candidate picture found while researching"),
                        ("filter", "Remove image 2 if"), ("probe", "essentially the same picture"),
                        ("synthesis", "You write reference answers"), ("entities", "List the named entities"),
                        ("consistency", "Check the illustrated answer")):
        if marker in t:
            return key
    raise AssertionError(f"unexpected request: {t[:200]}")


def client(srv: FakeLLMServer) -> OpenAIChatClient:
    return OpenAIChatClient(srv.base_url, "vlm-x", max_retries=0, concurrency=4)


def ok_json(obj) -> Reply:
    return Reply(content=json.dumps(obj))


def dims(score: int) -> dict:
    return {d: {"score": score, "reason": "r"} for d in
            ("visual_relevance", "information_content", "clarity", "answer_substantiation", "necessity")}


def store_image(store: ImageStore, img: Image.Image, **extra) -> dict:
    res = store.admit(jpeg(img), HarvestConfig())
    assert isinstance(res, dict), res
    return {**res, "pool": "best_link", "page_url": "https://example.org/p", "source_url": "https://example.org/i.jpg",
            "context": "a photo", **extra}


def run_stage(key: str, records: list[dict], tmp: Path, *, roles=None, config: ReferenceConfig | None = None,
              journal: str | None = None, **ctx_kw) -> list[dict]:
    config = config or ReferenceConfig()
    if "kb" not in ctx_kw and config.harvest.backend == "local":
        config = config.model_copy(update={"harvest": config.harvest.model_copy(update={"backend": "web"})})
    config = config.settled()  # what build_references hands each stage
    ctx = reference_context(tmp, config, roles=roles, **ctx_kw)
    out = tmp / (journal or f"{key}.jsonl")
    stage_job(key, config, ctx).run(records, out=out, progress=False)
    return list(read_results(out))


@pytest.fixture
def qimg(tmp_path) -> tuple[str, str]:
    p = tmp_path / "query.jpg"
    p.write_bytes(jpeg(crop(photo(), 0.12).resize((320, 320))))
    import hashlib

    return str(p), hashlib.sha256(p.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------- stage 1: URLs


def steps_fixture() -> list[dict]:
    visit_obs = "\n\n".join([
        VISIT_HEADER.format(url="https://en.wikipedia.org/wiki/Eileen_Collins", goal="who is she\nand her first")
        + "\nEvidence in page:\nEileen Collins was the first woman to pilot a Space Shuttle.",
        "[visit: error] the page https://dead.example/x could not be read: HTTP 404",
        VISIT_HEADER.format(url="https://nasa.example/bio", goal="who is she\nand her first")
        + "\nEvidence in page:\nCollins commanded STS-93."])
    return [
        {"turn": 1, "tool": "image_search", "status": "ok", "arguments": {}, "items": [
            {"kind": "image", "rank": 1, "url": "https://en.wikipedia.org/wiki/Eileen_Collins",
             "title": "Eileen Collins",
             "text": "retired astronaut", "image": "https://img.example/collins.jpg"},
            {"kind": "image", "rank": 2, "url": "https://cats.example/", "title": "Cat", "text": "a cat",
             "image": "https://img.example/cat.jpg"}], "observation": "..."},
        {"turn": 2, "tool": "search", "status": "ok", "arguments": {"query": ["eileen collins"]}, "items": [
            {"kind": "page", "rank": i, "url": f"https://site{i}.example/", "title": f"Result {i}", "text": "text"}
            for i in range(1, 6)] + [{"kind": "page", "rank": 6, "url": "https://SITE1.example", "title": "dup",
                                      "text": "the same page again"}], "observation": "..."},
        {"turn": 3, "tool": "visit", "status": "ok", "arguments": {}, "items": [], "observation": visit_obs},
        {"turn": 4, "tool": "text_to_image_search", "status": "ok", "arguments": {"query": "x"}, "items": []},
        {"turn": 5, "tool": "search", "status": "error", "reason": "quota", "items": []},
    ]


def test_collect_urls_is_the_c1_prepass():
    pages = split_visit(steps_fixture()[2]["observation"])
    goal = "who is she\nand her first"
    assert [(u, g) for u, g, _ in pages] == [("https://en.wikipedia.org/wiki/Eileen_Collins", goal),
                                             ("https://nasa.example/bio", goal)]
    assert "could not be read" not in pages[0][2] and pages[1][2].endswith("Collins commanded STS-93.")
    entries, tally = collect_urls(steps_fixture())
    assert [e["type"] for e in entries] == ["image_search"] * 2 + ["search"] * 5 + ["visit"] * 2
    assert [e["id"] for e in entries] == [f"P{i}" for i in range(1, 10)]
    assert entries[0]["image"] == "https://img.example/collins.jpg"
    assert tally == {"merged_duplicates": 1, "skipped_text_to_image_search": 1, "failed_calls": 1}


def url_reply(ids_scores: dict[str, int], extra: dict | None = None) -> Reply:
    pages = [{"id": i, "relevance": s, "completeness": s, "clarity": s, "answer_support": s, "necessity": s,
              "reason": "r", **(extra or {})} for i, s in ids_scores.items()]
    return ok_json({"pages": pages})


def test_url_scoring_keeps_the_top5_by_summed_scores(tmp_path):
    rec = {"id": "u1", "question": Q, "answer": A, "steps": steps_fixture()}
    with FakeLLMServer() as srv:
        # seven pages returned (more than asked): ranked by the sum, ties in the model's order
        srv.push(url_reply({"P2": 2, "P8": 5, "P3": 4, "P9": 5, "P1": 4, "P4": 1, "P5": 3}))
        lines = run_stage("urls", [rec], tmp_path, roles={"vision": client(srv)})
        sent = text_of(srv.requests[0]["json"])
        assert "Known answer" in sent and "[ID P8] type=visit" in sent
    (line,) = lines
    assert line["status"] == "ok", line["reason"]
    sel = line["urls"]["selected"]
    assert [s["id"] for s in sel] == ["P8", "P9", "P3", "P1", "P5"]
    assert [s["total"] for s in sel] == [25, 25, 20, 20, 15] and [s["rank"] for s in sel] == [1, 2, 3, 4, 5]
    assert sel[0]["type"] == "visit" and sel[0]["scores"]["answer_support"] == 5
    assert line["urls"]["scorer"]["model"] == "vlm-x" and line["urls"]["scorer"]["prompt_version"].startswith(
        "reference.url_scores@")
    assert line["funnel"]["urls"]["selected"] == 5 and line["funnel"]["urls"]["image_results"] == 2
    assert all(len(st["observation"]) <= 3000 for st in line["steps"]) and "items" not in line["steps"][0]


@pytest.mark.parametrize("reply,why", [
    (url_reply({"P1": 6}), "less than or equal to 5"),
    (url_reply({"P77": 3}), "was not offered"),
    (ok_json({"pages": [{"id": "P1", "relevance": 3, "clarity": 3, "answer_support": 3, "necessity": 3,
                         "reason": "no completeness"}]}), "completeness"),
    (Reply(content='Here you go: {"pages": []}'), "reply"),
])
def test_url_scoring_unusable_reply_is_invalid(tmp_path, reply, why):
    rec = {"id": "u1", "question": Q, "answer": A, "steps": steps_fixture()}
    with FakeLLMServer() as srv:
        srv.push(reply)
        (line,) = run_stage("urls", [rec], tmp_path, roles={"vision": client(srv)})
    assert line["status"] == "invalid" and why in line["reason"], line["reason"]
    assert "urls" not in line  # nothing half-written, nothing defaulted


def test_url_scoring_offline_ranks_by_rules_and_says_so(tmp_path):
    rec = {"id": "u1", "question": Q, "answer": "Eileen Collins, the first woman to pilot a Space Shuttle",
           "steps": steps_fixture()}
    (line,) = run_stage("urls", [rec], tmp_path)
    sel = line["urls"]["selected"]
    assert line["status"] == "ok" and line["urls"]["scorer"]["backend"] == "rules"
    assert all(s["scores"] is None for s in sel) and len(sel) == 5
    assert sel[0]["url"] == "https://en.wikipedia.org/wiki/Eileen_Collins" and sel[0]["type"] == "visit"
    assert len({s["url"] for s in sel}) == 5  # distinct pages


# -------------------------------------------------------------------------- stage 2: harvesting


@pytest.fixture
def web(monkeypatch):
    yield from loopback_only(monkeypatch)


#: pages read as raw HTML through the guarded fetcher (the default reads them through the scrape endpoint)
HTML_PAGES = ReferenceConfig(harvest=HarvestConfig(backend="web", page_source="html"))
KBVQA_FILTERS = {"max_aspect": 3.0, "min_bytes": 1024, "skip_gif_svg": True}  # kbvqa's own, off by default


def test_harvest_gates_count_every_drop(tmp_path, web):
    good_a = jpeg(crop(photo(), 0.05).resize((300, 240)))
    og = jpeg(photo("rocket").resize((260, 400)))
    pool = jpeg(photo("coffee").resize((300, 200)))
    page = """<html><head><title>Eileen Collins — astronaut</title>
<meta property="og:image" content="/img/og.jpg"></head><body>
<p>Eileen Collins was the first woman to pilot a Space Shuttle.</p>
<img src="data:image/png;base64,iVBORw0KGgo=">
<img src="/img/diagram.svg"> <img src="/img/anim.gif">
<img src="/ads/banner.jpg"> <img src="https://stats.doubleclick.net/pixel.jpg">
![a small thumbnail](/img/small.jpg)
<img src="/img/wide.jpg"> <img src="/img/bomb.png">
<p>She commanded STS-93 in 1999.</p><img src="/img/a.jpg" alt="Collins in orbit"><p>After the image.</p>
<img data-src="/img/a_copy.jpg"> <img src="/img/redirect.jpg"> <img src="/img/really.jpg">
<img src="/img/notimage.jpg"> <img src="/img/a.jpg">
</body></html>"""
    with FakeWebServer() as srv:
        srv.route("/page1", Resp(body=page))
        srv.route("/page2", Resp(404, "gone", "text/plain"))
        jpg = "image/jpeg"
        srv.route("/img/og.jpg", Resp(body=og, content_type=jpg))
        srv.route("/img/a.jpg", Resp(body=good_a, content_type=jpg))
        srv.route("/img/a_copy.jpg", Resp(body=good_a, content_type=jpg))
        srv.route("/img/small.jpg", Resp(body=jpeg(photo().resize((60, 60))), content_type=jpg))
        srv.route("/img/wide.jpg", Resp(body=jpeg(photo("rocket").resize((800, 200))), content_type=jpg))
        srv.route("/img/bomb.png", Resp(body=bomb_png(), content_type="image/png"))
        srv.route("/img/redirect.jpg", redirect("http://10.0.0.1/x.jpg"))
        srv.route("/img/really.jpg", Resp(body=b"GIF89a...", content_type="image/gif"))
        srv.route("/img/notimage.jpg", Resp(body="<html>login</html>"))
        srv.route("/img/pool.jpg", Resp(body=pool, content_type=jpg))
        rec = {"id": "h1", "query_sha256": None, "urls": {
            "selected": [{"url": srv.url("/page1"), "rank": 1}, {"url": srv.url("/page2"), "rank": 2}],
            "image_results": [{"image": srv.url("/img/pool.jpg"), "page_url": "https://x.example", "context": "coffee"},
                              {"image": srv.url("/img/og.jpg"), "page_url": "https://y.example", "context": "rocket"}]}}
        fetcher = LoopFetcher(allow_hosts=["127.0.0.1"], retries=0, timeout=5)
        cfg = ReferenceConfig(harvest=HTML_PAGES.harvest.model_copy(update=KBVQA_FILTERS))
        (line,) = run_stage("harvest", [rec], tmp_path, fetcher=fetcher, config=cfg)
        assert srv.hits("/ads/banner.jpg") == [] and srv.hits("/img/diagram.svg") == []
        assert len(srv.hits("/img/a.jpg")) == 1  # the repeated URL was not fetched twice
    assert line["status"] == "ok", line["reason"]
    f = line["funnel"]["harvest"]
    assert f["dropped"] == {"data_uri": 1, "svg": 1, "gif": 2, "blocklisted": 2, "too_small": 1, "too_elongated": 1,
                            "decompression_bomb": 1, "duplicate_sha256": 2, "fetch_blocked": 1, "bad_type": 1,
                            "duplicate_url": 1}
    assert f["pages_failed"] == {"fetch_http_error": 1} and f["kept"] == 3
    assert line["harvest"]["kbvqa_filters"] == KBVQA_FILTERS
    assert f["kept_by_pool"] == {"best_link": 2, "image_search_pool": 1}
    cands = line["harvest"]["candidates"]
    assert [c["source_url"].rsplit("/", 1)[-1] for c in cands] == ["og.jpg", "a.jpg", "pool.jpg"]  # og:image first
    assert cands[0]["also_found"][0]["pool"] == "image_search_pool"
    assert "STS-93" in cands[1]["context"] and "After the image" in cands[1]["context"]
    assert cands[0]["context"].startswith("Eileen Collins — astronaut")
    for c in cands:
        p = tmp_path / "images" / c["path"]
        assert p.is_file() and min(c["width"], c["height"]) >= 100 and p.name.startswith(c["sha256"])
    assert not any((tmp_path / "images").glob(".incoming/*"))  # no scratch file left (decoding reads a temp copy)


def test_harvest_applies_only_the_papers_floor_by_default(tmp_path, web):
    """Seed 001 C.1 harvests under a 100-px floor and the 20-of-60 cap; the aspect, file-size and
    GIF/SVG filters are kbvqa's: off by default, and when on they come after the floor."""
    gif = io.BytesIO()
    photo("coffee").resize((200, 150)).convert("P").save(gif, "GIF")
    tiny = png(Image.new("RGB", (120, 120), (200, 30, 30)))
    assert len(tiny) < 1024
    files = {"wide.jpg": (jpeg(photo("rocket").resize((800, 200))), "image/jpeg"),
             "anim.gif": (gif.getvalue(), "image/gif"), "tiny.png": (tiny, "image/png"),
             "small_wide.jpg": (jpeg(photo().resize((400, 60))), "image/jpeg"),
             "v.svg": (b"<svg xmlns='http://www.w3.org/2000/svg'/>", "image/svg+xml")}
    with FakeWebServer() as srv:
        srv.route("/p", Resp(body="".join(f'<img src="/{n}">' for n in files)))
        for n, (body, ctype) in files.items():
            srv.route(f"/{n}", Resp(body=body, content_type=ctype))
        rec = {"id": "h0", "urls": {"selected": [{"url": srv.url("/p"), "rank": 1}], "image_results": []}}
        fetcher = LoopFetcher(allow_hosts=["127.0.0.1"], retries=0)
        (plain,) = run_stage("harvest", [rec], tmp_path, config=HTML_PAGES, fetcher=fetcher, journal="plain.jsonl")
        on = ReferenceConfig(harvest=HTML_PAGES.harvest.model_copy(update=KBVQA_FILTERS))
        (extra,) = run_stage("harvest", [rec], tmp_path, config=on, fetcher=fetcher, journal="extra.jsonl")
    f = plain["funnel"]["harvest"]
    assert f["kept"] == 3 and f["dropped"] == {"too_small": 1, "svg_not_raster": 1}
    assert sorted(c["source_url"].rsplit("/", 1)[-1] for c in plain["harvest"]["candidates"]) == [
        "anim.gif", "tiny.png", "wide.jpg"] and "kbvqa_filters" not in plain["harvest"]
    g = extra["funnel"]["harvest"]  # each of kbvqa's filters counted under its own reason; the floor first
    assert g["kept"] == 0 and g["dropped"] == {"too_small": 1, "too_elongated": 1, "gif": 1, "tiny_file": 1, "svg": 1}


def test_harvest_keeps_at_most_n_per_page(tmp_path, web):
    imgs = [jpeg(photo(n).resize((200, 150))) for n in ("astronaut", "rocket", "coffee", "chelsea")]
    with FakeWebServer() as srv:
        srv.route("/p", Resp(body="".join(f'<img src="/i{i}.jpg">' for i in range(4))))
        for i, b in enumerate(imgs):
            srv.route(f"/i{i}.jpg", Resp(body=b, content_type="image/jpeg"))
        cfg = ReferenceConfig(harvest=HarvestConfig(backend="web", max_per_url=2, page_source="html"))
        rec = {"id": "h2", "urls": {"selected": [{"url": srv.url("/p"), "rank": 1}], "image_results": []}}
        (line,) = run_stage("harvest", [rec], tmp_path, config=cfg,
                            fetcher=LoopFetcher(allow_hosts=["127.0.0.1"], retries=0))
        assert srv.hits("/i2.jpg") == [] and srv.hits("/i3.jpg") == []  # windows: never fetched past the cap
    assert line["funnel"]["harvest"]["kept"] == 2 and line["funnel"]["harvest"]["dropped"] == {"per_url_cap": 2}


def test_harvest_settings_user_agent_and_uncapped_pool(tmp_path, web):
    imgs = [jpeg(photo(n).resize((200, 150))) for n in ("astronaut", "rocket", "coffee", "chelsea")]
    with FakeWebServer() as srv:
        for i, b in enumerate(imgs):
            srv.route(f"/pool{i}.jpg", Resp(body=b, content_type="image/jpeg"))
        rec = {"id": "ua", "urls": {"selected": [], "image_results": [{"image": srv.url(f"/pool{i}.jpg")}
                                                                      for i in range(4)]}}
        local = {"allow_hosts": ["127.0.0.1"], "retries": 0}
        (line,) = run_stage("harvest", [rec], tmp_path, config=ReferenceConfig(fetch=local))  # default User-Agent
        ua = srv.hits("/pool0.jpg")[0]["headers"]["user-agent"]
        capped = ReferenceConfig(harvest=HarvestConfig(backend="web", max_pool=2),
                                 fetch={**local, "user_agent": "kbvqa-test/1"})
        (small,) = run_stage("harvest", [{**rec, "id": "ua2"}], tmp_path, config=capped, journal="h2.jsonl")
        ua2 = srv.hits("/pool0.jpg")[-1]["headers"]["user-agent"]
    assert ua.startswith("Mozilla/5.0") and ua2 == "kbvqa-test/1"  # the paper's browser User-Agent by default
    assert line["funnel"]["harvest"]["kept_by_pool"] == {"image_search_pool": 4}  # uncapped, as the paper
    assert small["funnel"]["harvest"]["kept"] == 2 and small["funnel"]["harvest"]["dropped"] == {"per_url_cap": 2}


def test_harvest_reads_pages_through_the_scrape_endpoint_by_default(tmp_path, web, monkeypatch):
    """Seed 001 C.1: each page as markdown from the web backend's scrape endpoint, its og:image put
    first; the images themselves still come through the guarded fetcher. A failed scrape is a failed
    page with its reason; a private page address is never sent to the scraper."""
    monkeypatch.setenv("TEST_SERPER_KEY", "k-123")
    hero = jpeg(photo("rocket").resize((260, 400)))
    inline = jpeg(crop(photo(), 0.05).resize((300, 240)))
    with FakeWebServer() as srv:
        page1, page2 = srv.url("/page1"), srv.url("/page2")

        def scrape(req):
            if req["json"]["url"] == page2:
                return Resp(500, "scraper down", "text/plain")
            return json_resp({"text": "plain text without images", "metadata": {"og:image": "/img/hero.jpg"},
                              "markdown": "# Eileen Collins\nShe piloted STS-63.\n\n![in orbit](/img/inline.jpg)\n"
                                          "After the picture."})

        srv.route("/scrape", scrape)
        srv.route("/img/hero.jpg", Resp(body=hero, content_type="image/jpeg"))
        srv.route("/img/inline.jpg", Resp(body=inline, content_type="image/jpeg"))
        rec = {"id": "s1", "urls": {"selected": [{"url": page1, "rank": 1}, {"url": page2, "rank": 2},
                                                 {"url": "http://10.0.0.7/intranet", "rank": 3}], "image_results": []}}
        settings = {"provider": "serper", "base_url": srv.url(""), "scrape_url": srv.url("/scrape"),
                    "api_key_env": "TEST_SERPER_KEY", "retries": 0}
        cfg = ReferenceConfig(harvest=HarvestConfig(backend="web"), fetch={"allow_hosts": ["127.0.0.1"], "retries": 0})
        assert cfg.harvest.page_source == "scrape"
        (line,) = run_stage("harvest", [rec], tmp_path, config=cfg, web_tools=settings)
        sent = [h["json"] for h in srv.hits("/scrape")]
        assert srv.hits("/page1") == [] and srv.hits("/page2") == []  # pages are never fetched directly
        assert srv.hits("/scrape")[0]["headers"]["x-api-key"] == "k-123"
    # pages are scraped concurrently: the requests, in any order
    assert sorted(sent, key=lambda x: x["url"]) == [{"url": page1, "includeMarkdown": True},
                                                    {"url": page2, "includeMarkdown": True}]
    assert line["status"] == "ok", line.get("reason")
    f = line["funnel"]["harvest"]
    assert f["pages_failed"] == {"scrape_error": 1, "scrape_blocked": 1} and f["kept"] == 2
    cands = line["harvest"]["candidates"]
    assert [c["source_url"].rsplit("/", 1)[-1] for c in cands] == ["hero.jpg", "inline.jpg"]  # og:image first
    assert "STS-63" in cands[1]["context"] and "After the picture" in cands[1]["context"]
    rows = {r["rank"]: r for r in line["harvest"]["pages"]}
    assert "HTTP 500" in rows[2]["reason"] and rows[3]["reason"] == "private address 10.0.0.7"


def test_scrape_source_needs_its_key_or_html(tmp_path, monkeypatch, demo):
    from kbvqa.pipelines.reference.harvest import PageScraper

    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    assert "SERPER_API_KEY" in PageScraper({}).check()
    assert "no scrape endpoint" in PageScraper({"provider": "searxng", "base_url": "http://127.0.0.1:1"}).check()
    res = runner.invoke(app, build_args(demo, tmp_path / "b") + ["--tools", "web"])
    assert res.exit_code == 2 and 'page_source = "html"' in res.output and "Traceback" not in res.output


def test_pre_gate_and_page_patterns():
    block = re.compile("|".join(HarvestConfig().blocklist), re.IGNORECASE)
    assert pre_gate("data:image/png;base64,xx", block, remote_allowed=True) == "data_uri"
    assert pre_gate("https://x.org/a.SVG?v=1", block, remote_allowed=True, skip_gif_svg=True) == "svg"
    assert pre_gate("https://x.org/a.SVG?v=1", block, remote_allowed=True) is None  # kbvqa's filter: off by default
    assert pre_gate("https://x.org/favicon.ico", block, remote_allowed=True) == "blocklisted"
    assert pre_gate("https://upload.wikimedia.org/wikipedia/commons/a/ab/Collins.jpg", block,
                    remote_allowed=True) is None
    assert pre_gate("ftp://x.org/a.jpg", block, remote_allowed=True) == "bad_url"
    assert pre_gate("https://x.org/a.jpg", block, remote_allowed=False) == "remote_offline"
    found = page_images('Intro ![cap](img/a.png "t") and <IMG alt=x SRC=\'//cdn.example/b.jpg\'> '
                        '<meta content="https://o.example/og.jpg" property="og:image">',
                        "https://site.example/dir/page")
    assert [f.ref for f in found] == ["https://o.example/og.jpg", "https://site.example/dir/img/a.png",
                                      "https://cdn.example/b.jpg"]


def test_harvest_local_reads_kb_images_only_from_the_image_root(tmp_path, demo):
    outside = tmp_path / "elsewhere.jpg"
    outside.write_bytes(jpeg(photo("chelsea").resize((300, 300))))
    kb = KBStore(demo["bench"].kb)
    rec = {"id": "l1", "query_sha256": None, "urls": {
        "selected": [{"url": "https://en.wikipedia.org/wiki/Eileen_Collins", "rank": 1},
                     {"url": "https://en.wikipedia.org/wiki/Not_In_KB", "rank": 2}],
        "image_results": [{"image": str(outside), "context": "x"},
                          {"image": str(demo["bench"].root / "images" / "kb_rocket.jpg"), "context": "rocket"},
                          {"image": "https://img.example/remote.jpg", "context": "web"}]}}
    (line,) = run_stage("harvest", [rec], tmp_path, config=ReferenceConfig(), kb=kb, kb_images=demo["bench"].root)
    f = line["funnel"]["harvest"]
    assert line["status"] == "ok" and f["kept"] == 2 and f["pages_failed"] == {"not_in_kb": 1}
    assert f["dropped"] == {"outside_image_root": 1, "remote_offline": 1}
    first = line["harvest"]["candidates"][0]
    assert first["source_url"] == "images/kb_astronaut.jpg" and first["context"].startswith("Eileen Collins — ")


# ------------------------------------------------------------------- stage 3: candidate scoring


def test_candidate_scoring_stable_top_k_with_pools(tmp_path, qimg):
    store = ImageStore(tmp_path / "images")
    base = photo("coffee")
    widths = {200: ("best_link", 3), 210: ("best_link", 5), 220: ("image_search_pool", 5),
              230: ("image_search_pool", 2), 240: ("best_link", 3)}
    cands = [store_image(store, base.resize((w, 160)), pool=pool) for w, (pool, _) in widths.items()]
    broken = {**cands[0], "sha256": "0" * 64, "path": "00/broken.jpg"}
    (tmp_path / "images" / "00").mkdir(parents=True)
    (tmp_path / "images" / "00" / "broken.jpg").write_bytes(b"not an image")
    rec = {"id": "c1", "question": Q, "answer": A, "query_image": qimg[0], "query_sha256": qimg[1],
           "harvest": {"candidates": [*cands, broken]}}

    def handler(req):
        q, cand = images_of(req)
        assert q.size == (320, 320)
        s = widths[cand.size[0]][1]
        return ok_json({**dims(s), "overall": s})

    cfg = ReferenceConfig(candidates={"top_k": 3})
    with FakeLLMServer(handler=handler) as srv:
        (line,) = run_stage("candidates", [rec], tmp_path, roles={"vision": client(srv)}, config=cfg)
        assert srv.count == 5  # the broken file is never sent
    assert line["status"] == "ok", line["reason"]
    kept = line["candidates"]["kept"]
    assert [(k["width"], k["pool"], k["overall"], k["rank"]) for k in kept] == [
        (210, "best_link", 5, 1), (220, "image_search_pool", 5, 2), (200, "best_link", 3, 3)]
    assert kept[0]["scores"]["clarity"] == {"score": 5, "reason": "r"}
    assert line["funnel"]["candidates"]["dropped"] == {"unloadable": 1, "below_top_k": 2}
    # offline: the item stops, saying why
    (off,) = run_stage("candidates", [rec], tmp_path, journal="off.jsonl")
    assert off["status"] == "needs_model" and off["reason"].startswith("NeedsModel:") and "vision" in off["reason"]


# ------------------------------------------------------------------ the entity image search


class FakeImageSearch:
    """A forward image search answering from a table of query -> image URLs (and recording queries)."""

    name = "fake"

    def __init__(self, table: dict[str, list[str]]):
        self.table, self.queries = table, []

    async def text_to_image_search(self, args, episode, ctx):
        from kbvqa.tools.base import ToolItem, ToolResult

        self.queries.append(args.query)
        urls = self.table.get(args.query, [])
        items = [ToolItem(id=str(i), kind="image", rank=i, title=f"result {i}", url="https://pages.example/x",
                          image=u) for i, u in enumerate(urls, 1)]
        return ToolResult(tool="text_to_image_search", status="ok" if items else "empty", items=items,
                          reason="" if items else "nothing found")


def test_entity_search_finds_a_picture_for_an_entity_missing_from_the_pool(tmp_path, qimg, web):
    store = ImageStore(tmp_path / "images")
    cands = [{**store_image(store, photo("astronaut").resize((300, 300))), "overall": 5, "scores": dims(5), "rank": 1}]
    rec = {"id": "e1", "question": Q, "answer": "Eileen Collins, who flew Columbia on STS-93.", "query_image": qimg[0],
           "query_sha256": qimg[1], "candidates": {"kept": cands}}
    entity_reply = ok_json({"entities": [
        {"name": "Eileen Collins", "shown_in": [1], "query": "Eileen Collins portrait"},
        {"name": "Space Shuttle Columbia", "shown_in": [], "query": "Space Shuttle Columbia launch"},
        {"name": "STS-93 mission patch", "shown_in": [], "query": "STS-93 patch"}]})

    def handler(req):
        k = kind_of(req)
        if k == "entities":
            assert len(images_of(req)) == 2 and "Candidate 1: from https://example.org/p" in text_of(req)
            return entity_reply
        assert k == "candidate"
        return ok_json({**dims(4), "overall": 4})

    with FakeWebServer() as web_srv:
        web_srv.route("/columbia.jpg", Resp(body=jpeg(photo("rocket").resize((300, 400))), content_type="image/jpeg"))
        web_srv.route("/tiny.jpg", Resp(body=jpeg(photo("rocket").resize((50, 50))), content_type="image/jpeg"))
        tools = FakeImageSearch({"Space Shuttle Columbia launch": [web_srv.url("/columbia.jpg"), web_srv.url("/tiny.jpg")]})
        with FakeLLMServer(handler=handler) as srv:
            (line,) = run_stage("entities", [rec], tmp_path, roles={"vision": client(srv)}, entity_tools=tools,
                                fetcher=LoopFetcher(allow_hosts=["127.0.0.1"], retries=0))
            kinds = [kind_of(r["json"]) for r in srv.requests]
    assert line["status"] == "ok", line["reason"]
    assert tools.queries == ["Space Shuttle Columbia launch", "STS-93 patch"]  # only the entities no candidate shows
    assert kinds == ["entities", "candidate"], line["entities"]  # the one new picture is scored like any candidate
    ents = {e["name"]: e for e in line["entities"]["entities"]}
    assert "search" not in ents["Eileen Collins"]
    assert ents["Space Shuttle Columbia"]["search"] == {"status": "ok", "results": 2, "backend": "fake", "kept": 1}
    assert ents["STS-93 mission patch"]["search"]["status"] == "empty"
    (added,) = line["entities"]["added"]
    assert added["pool"] == "entity_search" and added["entity"] == "Space Shuttle Columbia" and added["overall"] == 4
    f = line["funnel"]["entities"]
    assert f["unshown"] == 2 and f["searched"] == 2 and f["added"] == 1 and f["dropped"] == {"too_small": 1}
    assert f["search_status"] == {"ok": 1, "empty": 1}
    # the synthesis is shown the addition after the scored top-k
    from kbvqa.pipelines.reference.common import synthesis_pool

    assert [x["pool"] for x in synthesis_pool({**line, "entities": line["entities"]}, "after_synthesis")[0]] == [
        "best_link", "entity_search"]
    # a listing that cites a candidate that does not exist is invalid; offline the item stops
    entity_reply = ok_json({"entities": [{"name": "X", "shown_in": [3], "query": "x"}]})
    with FakeLLMServer(handler=handler) as srv:
        (bad,) = run_stage("entities", [rec], tmp_path, roles={"vision": client(srv)}, entity_tools=tools,
                           journal="bad.jsonl")
    assert bad["status"] == "invalid" and "candidate(s) [3]" in bad["reason"]
    (off,) = run_stage("entities", [rec], tmp_path, entity_tools=tools, journal="off.jsonl")
    assert off["status"] == "needs_model" and off["reason"].startswith("NeedsModel:")


# ------------------------------------------------------------------ the consistency check


def test_consistency_check_flags_an_inconsistent_draft_and_never_defaults(tmp_path, qimg):
    store = ImageStore(tmp_path / "images")
    cands = [store_image(store, photo(n).resize((300, 200))) for n in ("rocket", "chelsea")]
    text = f"Eileen Collins.\n{tag_line(1)}\nHer cat.\n{tag_line(2)}"
    recs = [draft_record(rid, cands, text, qimg) for rid in ("c-ok", "c-bad", "c-junk")]
    replies = {"c-ok": ok_json({"consistent": True, "issues": []}),
               "c-bad": ok_json({"consistent": False, "issues": [
                   {"kind": "answer_conflict", "tag": None, "detail": "names Sally Ride"}]}),
               "c-junk": ok_json({"consistent": False, "issues": []})}
    seen = []

    def handler(req):
        t = text_of(req)
        assert kind_of(req) == "consistency" and len(images_of(req)) == 3 and tag_line(2) in t
        rid = "c-ok" if not seen else ("c-bad" if len(seen) == 1 else "c-junk")
        seen.append(rid)
        return replies[rid]

    with FakeLLMServer(handler=handler) as srv:
        lines = []
        for r in recs:  # one at a time, so the scripted order is the records' order
            lines += run_stage("consistency", [r], tmp_path, roles={"vision": client(srv)})
    by = {ln["id"]: ln for ln in lines}
    assert by["c-ok"]["consistency"]["passed"] is True and by["c-ok"]["funnel"]["consistency"]["passed"] == 1
    assert by["c-bad"]["status"] == "ok" and by["c-bad"]["consistency"]["passed"] is False  # kept, flagged
    assert by["c-bad"]["funnel"]["consistency"] == {"checked": 1, "passed": 0, "failed": 1,
                                                    "issues": {"answer_conflict": 1}}
    assert by["c-junk"]["status"] == "invalid" and "no issue is named" in by["c-junk"]["reason"]


# ------------------------------------------------------------------------ the five-rule filter

BEFORE = ReferenceConfig(filter_placement="before_synthesis").settled()


def filter_reply(remove: bool, rule: str | None = None) -> Reply:
    return ok_json({"remove": remove, "rule": rule, "reason": "r"})


def test_filter_before_synthesis_keeps_an_image_whose_call_failed(tmp_path, qimg):
    store = ImageStore(tmp_path / "images")
    cands = [store_image(store, photo(n).resize((w, 200)), rank=i)
             for i, (n, w) in enumerate((("rocket", 300), ("coffee", 310), ("chelsea", 320), ("camera", 330)), 1)]
    rec = {"id": "f1", "question": Q, "answer": A, "query_image": qimg[0], "query_sha256": qimg[1],
           "candidates": {"kept": cands}}
    replies = {300: filter_reply(False), 310: filter_reply(True, "composite"),
               320: Reply(content="keep it, looks fine"), 330: Reply(status=400, error="model crashed")}

    def handler(req):
        assert "Text around image 2" in text_of(req) and "a photo" in text_of(req)  # the page context
        return replies[images_of(req)[1].size[0]]

    with FakeLLMServer(handler=handler) as srv:
        (line,) = run_stage("filter", [rec], tmp_path, roles={"vision": client(srv)}, config=BEFORE)
        strict = BEFORE.model_copy(update={"filter": BEFORE.filter.model_copy(update={"on_call_failure": "error"})})
        (hard,) = run_stage("filter", [rec], tmp_path, roles={"vision": client(srv)}, config=strict,
                            journal="strict.jsonl")
    assert line["status"] == "ok", line["reason"]
    f = line["filter"]
    assert f["placement"] == "before_synthesis"
    assert [k["width"] for k in f["kept"]] == [300, 320, 330]  # the failed calls keep their image (App. C.2)
    assert [(u["status"], u["sha256"]) for u in f["unchecked"]] == [("invalid", cands[2]["sha256"]),
                                                                    ("error", cands[3]["sha256"])]
    assert line["funnel"]["filter"]["dropped"] == {"composite": 1}
    assert line["funnel"]["filter"]["kept_without_verdict"] == {"kept_call_failed": 1, "kept_invalid_reply": 1}
    assert hard["status"] == "error" and "model call failed" in hard["reason"] and "filter" not in hard


def draft_record(rid: str, cands: list[dict], text: str, qimg) -> dict:
    images = [{"index": i, **{k: c[k] for k in ("sha256", "path", "source_url", "page_url", "pool")}}
              for i, c in enumerate(cands, 1)]
    return {"id": rid, "question": Q, "answer": A, "query_image": qimg[0], "query_sha256": qimg[1],
            "sample": {"id": rid, "question": Q, "answers": [{"text": A}], "images": ["query.jpg"]},
            "query_images": [qimg[0]], "draft": {"text": text, "images": images, "unused": [], "raw": text}}


def test_filter_after_synthesis_judges_each_tag_in_its_context(tmp_path, qimg):
    store = ImageStore(tmp_path / "images")
    cands = [store_image(store, photo(n).resize((w, 200))) for n, w in (("rocket", 300), ("coffee", 310),
                                                                         ("chelsea", 320))]
    gone = {**cands[0], "sha256": "f" * 64, "path": "ff/gone.jpg"}
    lead = "Filler words to push the window. " * 12
    text = (f"{lead}Collins flew on the shuttle Columbia in 1999.\n{tag_line(1)}\nShe drank a coffee after landing."
            f"\n{tag_line(2)}\nA cat greeted her at home.\n{tag_line(3)}\nThe end.\n{tag_line(4)}")
    rec = draft_record("t1", [*cands, gone], text, qimg)
    contexts = {}

    def handler(req):
        t = text_of(req)
        ctx = re.search(r"is placed, or on the page it came from\): \"(.*)\"\n", t).group(1)
        w = images_of(req)[1].size[0]
        contexts[w] = ctx
        return {300: filter_reply(False), 310: filter_reply(True, "off_topic"),
                320: Reply(status=500, error="down")}[w]

    with FakeLLMServer(handler=handler) as srv:
        srv_client = OpenAIChatClient(srv.base_url, "vlm-x", max_retries=0, concurrency=4)
        (line,) = run_stage("filter", [rec], tmp_path, roles={"vision": srv_client})
        assert srv.count == 3  # the unloadable image is removed without a call
    assert line["status"] == "ok", line["reason"]
    # the ±200 characters around each tag, the text before it first, truncated to 300
    assert all(len(c) <= 300 for c in contexts.values())
    assert "Columbia in 1999. [this image]" in contexts[300] and len(contexts[300]) == 300
    assert "coffee after landing. [this image]" in contexts[310] and "[another image]" in contexts[310]
    assert "A cat greeted her at home. [this image] The end." in contexts[320]
    f = line["filter"]
    assert f["placement"] == "after_synthesis"
    assert [r["index"] for r in f["removed"]] == [2] and f["removed"][0]["rule"] == "off_topic"
    assert [(u["index"], u["status"]) for u in f["unchecked"]] == [(3, "error")]  # kept: the call failed
    assert line["funnel"]["filter"]["dropped"] == {"off_topic": 1, "unloadable": 1}
    assert line["funnel"]["filter"]["kept_without_verdict"] == {"kept_call_failed": 1}
    d = line["draft"]
    assert [im["sha256"] for im in d["images"]] == [cands[0]["sha256"], cands[2]["sha256"]]
    assert d["text"].endswith(f"in 1999.\n{tag_line(1)}\nShe drank a coffee after landing.\nA cat greeted her at "
                              f"home.\n{tag_line(2)}\nThe end.")
    assert check_tags(d["text"], 2) == ([1, 2], [])


# ------------------------------------------------------------------------- de-duplication


def test_dedup_probes_a_crop_pair_and_lets_the_hash_settle_only_certain_ones(tmp_path, qimg):
    store = ImageStore(tmp_path / "images")
    a = photo("astronaut").resize((400, 400))
    resized = Image.open(io.BytesIO(jpeg(a.resize((200, 200)), 40)))  # resized and re-encoded: the hash is sure
    cropped = crop(a, 0.05).resize((400, 400))  # a 5% crop: the probe decides
    other = photo("coffee").resize((400, 300))
    cands = [store_image(store, img) for img in (a, resized, cropped, other)]
    hashes = [phash(tmp_path / "images" / c["path"]) for c in cands]
    assert distance(hashes[0], hashes[1]) <= CERTAIN_BITS < distance(hashes[0], hashes[2])
    recs = [{"id": f"d{i}", "question": Q, "answer": A, "query_image": qimg[0], "filter": {"kept": cands}}
            for i in (1, 2)]
    same = {cands[2]["sha256"]}

    def handler(req):
        a_img, b_img = images_of(req)
        assert kind_of(req) == "probe"
        return ok_json({"similar": b_img.size == (400, 400) and a_img.size == (400, 400)})

    with FakeLLMServer(handler=handler) as srv:
        lines = run_stage("dedup", recs[:1], tmp_path, roles={"vision": client(srv)}, config=BEFORE)
        lines += run_stage("dedup", recs[1:], tmp_path, roles={"vision": client(srv)}, config=BEFORE,
                           journal="dedup2.jsonl")
        # the crop is probed against the original; the other photo against the original (never "distinct" by hash)
        assert srv.count == 2
    for line in lines:
        d = line["dedup"]
        assert [k["sha256"] for k in d["kept"]] == [cands[0]["sha256"], cands[3]["sha256"]]
        assert [(x["by"], x["sha256"] in same) for x in d["dropped"]] == [("phash", False), ("probe", True)]
        assert line["funnel"]["dedup"]["dropped"] == {"hash_certain": 1, "probe_similar": 1}
        assert line["funnel"]["dedup"]["pairs"] == {"hash_certain": 1, "to_probe": 2}
    assert [p["cached"] for ln in lines for p in ln["dedup"]["probes"]] == [False, False, True, True]
    # without a model, the pairs the hash cannot settle are undecided and counted; the item stops
    (off,) = run_stage("dedup", recs[:1], tmp_path, config=BEFORE, journal="off.jsonl")
    assert off["status"] == "needs_model" and off["reason"].startswith("NeedsModel:")
    assert "3 image pair(s) the hash cannot settle" in off["reason"] and "dedup" not in off


def test_dedup_after_synthesis_removes_the_duplicate_tag(tmp_path, qimg):
    store = ImageStore(tmp_path / "images")
    a = photo("rocket").resize((300, 400))
    cands = [store_image(store, img) for img in (a, crop(a, 0.06).resize((300, 400)), photo("coffee").resize((300, 200)))]
    text = f"Rocket.\n{tag_line(1)}\nThe same rocket closer.\n{tag_line(2)}\nCoffee.\n{tag_line(3)}"
    rec = draft_record("dd", cands, text, qimg)
    with FakeLLMServer(handler=lambda req: ok_json({"similar": images_of(req)[1].size == (300, 400)})) as srv:
        (line,) = run_stage("dedup", [rec], tmp_path, roles={"vision": client(srv)})
    assert line["status"] == "ok", line["reason"]
    assert line["draft"]["text"] == f"Rocket.\n{tag_line(1)}\nThe same rocket closer.\nCoffee.\n{tag_line(2)}"
    assert [im["sha256"] for im in line["draft"]["images"]] == [cands[0]["sha256"], cands[2]["sha256"]]


# ---------------------------------------------------------------------- stage 5: synthesis


def test_check_tags_and_renumber():
    t = 'A.\n<image>{"candidate_images": 3}</image>\nB.\n<image>{ "candidate_images" : 1 }</image>'
    assert check_tags(t, 3) == ([3, 1], [])
    assert renumber(t, [3, 1]) == f"A.\n{tag_line(1)}\nB.\n{tag_line(2)}"
    kinds = lambda text, n=3: [v["kind"] for v in check_tags(text, n)[1]]  # noqa: E731
    assert kinds('<image>{"candidate_images": 4}</image>') == ["idx_out_of_range"]
    assert kinds('<image>{"candidate_images": 0}</image>') == ["idx_out_of_range"]
    assert kinds('<image>2</image>') == ["malformed_tag"]
    assert kinds('<image>{"candidate_images": "2"}</image>') == ["malformed_tag"]
    assert kinds('<image>{"candidate_images": 2, "idx": 1}</image>') == ["malformed_tag"]
    assert kinds('<image>{"candidate_images": 2}</image> <image>{"candidate_images": 2}</image>') == ["duplicate_image"]
    assert kinds('x <image>{"candidate_images": 1}') == ["malformed_tag"]
    assert kinds("text only", 0) == []


def synthesis_record(rid: str, cands: list[dict], qimg, question: str = Q) -> dict:
    scored = [{**c, "overall": 5 - i, "scores": dims(4), "rank": i + 1} for i, c in enumerate(cands)]
    return {"id": rid, "question": question, "answer": A, "query_image": qimg[0], "query_sha256": qimg[1],
            "sample": {"id": rid, "question": question, "answers": [{"text": A}], "images": ["query.jpg"]},
            "query_images": [qimg[0]],
            "steps": [{"turn": 1, "tool": "visit", "status": "ok", "arguments": {"url": ["u"]},
                       "observation": "x" * 5000}], "candidates": {"kept": scored}}


GOOD = 'Eileen Collins.\n<image>{"candidate_images": 3}</image>\nShe flew.\n<image>{"candidate_images": 1}</image>'


def test_synthesis_keeps_the_tags_it_can_resolve_and_counts_the_rest(tmp_path, qimg):
    store = ImageStore(tmp_path / "images")
    cands = [store_image(store, photo(n).resize((300, 200))) for n in ("rocket", "coffee", "chelsea")]
    answers = {"good": GOOD, "range": 'X.\n<image>{"candidate_images": 4}</image>',
               "bad": GOOD + "\n<image>Image 2</image>", "twice": GOOD + '\n<image>{"candidate_images": 3}</image>',
               "stray": "Lead </image> text.\n" + tag_line(2), "nothing": '\n<image>{"candidate_images": 9}</image>\n'}

    def handler(req):
        t = text_of(req)
        assert "x" * 3000 in t and "x" * 3001 not in t  # each observation capped at 3,000 characters
        assert len(images_of(req)) == 4 and "Image 3: overall 3/5" in t
        return Reply(content=answers[next(k for k in answers if f"[{k}]" in t)])

    recs = [synthesis_record(k, cands, qimg, question=f"{Q} [{k}]") for k in answers]
    with FakeLLMServer(handler=handler) as srv:
        lines = {ln["id"]: ln for ln in run_stage("synthesis", recs, tmp_path, roles={"vision": client(srv)},
                                                  journal="synthesis.jsonl")}
    good = lines["good"]
    assert good["status"] == "ok", good["reason"]
    assert good["draft"]["text"] == renumber(GOOD, [3, 1]) and "dropped_tags" not in good["draft"]
    assert [im["sha256"] for im in good["draft"]["images"]] == [cands[2]["sha256"], cands[0]["sha256"]]
    assert good["draft"]["unused"] == [cands[1]["sha256"]] and good["funnel"]["draft"]["dropped"] == {"unused": 1}
    for k, kind in (("bad", "malformed_tag"), ("twice", "duplicate_image")):  # one bad tag: the others stay
        ln = lines[k]
        assert ln["status"] == "ok", ln["reason"]
        assert ln["draft"]["text"] == renumber(GOOD, [3, 1])  # the bad tag (and its line) left the text
        assert [im["sha256"] for im in ln["draft"]["images"]] == [cands[2]["sha256"], cands[0]["sha256"]]
        assert ln["funnel"]["draft"]["dropped_tags"] == {kind: 1} and ln["funnel"]["draft"]["used"] == 2
        assert [v["kind"] for v in ln["draft"]["dropped_tags"]] == [kind]
    from kbvqa.pipelines.reference.audit import review_flags

    assert review_flags(lines["bad"]) == ["1 image tag(s) of the synthesis could not be resolved and were removed "
                                          "(malformed_tag 1); first: <image>Image 2</image>"]
    assert review_flags(good) == []
    rng = lines["range"]
    assert rng["status"] == "ok" and rng["draft"]["text"] == "X." and rng["draft"]["images"] == []
    assert rng["funnel"]["draft"]["dropped_tags"] == {"idx_out_of_range": 1}
    assert rng["funnel"]["draft"]["drafts_all_tags_dropped"] == 1
    stray = lines["stray"]
    assert stray["draft"]["text"] == f"Lead  text.\n{tag_line(1)}" and stray["draft"]["images"][0]["sha256"] == \
        cands[1]["sha256"] and stray["funnel"]["draft"]["dropped_tags"] == {"malformed_tag": 1}
    assert lines["nothing"]["status"] == "invalid" and "nothing usable remains" in lines["nothing"]["reason"]
    assert "idx_out_of_range" in lines["nothing"]["reason"]


def test_synthesis_shows_at_most_ten_candidates_entity_images_included(tmp_path, qimg):
    store = ImageStore(tmp_path / "images")
    base = photo("rocket").resize((400, 300))
    imgs = [store_image(store, base.rotate(7 * i, expand=False)) for i in range(13)]
    rec = synthesis_record("ten", imgs[:10], qimg)
    rec["entities"] = {"added": [{**x, "pool": "entity_search", "entity": f"E{i}", "overall": 3, "scores": dims(3)}
                                 for i, x in enumerate(imgs[10:])]}
    with FakeLLMServer(handler=lambda req: Reply(content="Text.\n" + tag_line(len(images_of(req)) - 1))) as srv:
        (line,) = run_stage("synthesis", [rec], tmp_path, roles={"vision": client(srv)})
        shown = len(images_of(srv.requests[0]["json"])) - 1
    assert line["status"] == "ok", line["reason"]
    assert shown == 10  # the three entity-search images fill the ten: the 8th-10th scored make room
    units = line["funnel"]["draft"]
    assert units["candidates_shown"] == 10 and units["shown_by_pool"] == {"best_link": 7, "entity_search": 3}
    assert units["not_shown_over_cap"] == {"best_link": 3}
    assert [x["sha256"] for x in line["draft"]["not_shown"]] == [x["sha256"] for x in imgs[7:10]]
    assert line["draft"]["images"][0]["sha256"] == imgs[12]["sha256"]  # Image 10 is the last entity image
    before = {**rec, "dedup": {"kept": [*rec["candidates"]["kept"], *rec["entities"]["added"]]}}  # §3.2's order
    with FakeLLMServer(handler=lambda req: Reply(content="Text.\n" + tag_line(len(images_of(req)) - 1))) as srv:
        (early,) = run_stage("synthesis", [before], tmp_path, roles={"vision": client(srv)}, journal="before.jsonl",
                             config=ReferenceConfig(filter_placement="before_synthesis"))
    assert early["funnel"]["draft"]["candidates_shown"] == 10 and early["draft"]["images"] == line["draft"]["images"]


def test_a_refused_draft_recovers_on_resume_with_the_default_cache_and_replays_exactly(tmp_path, qimg, monkeypatch):
    from kbvqa.models.config import ModelsConfig, RoleConfig, build_roles, cache_path

    monkeypatch.delenv("KBVQA_CACHE", raising=False)  # the cache a user gets without any flag or file
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_path(ModelsConfig()) == tmp_path / "xdg" / "kbvqa" / "responses.sqlite"
    store = ImageStore(tmp_path / "images")
    cands = [store_image(store, photo(n).resize((300, 200))) for n in ("rocket", "coffee", "chelsea")]
    recs = [synthesis_record("r1", cands, qimg)]
    cassette = tmp_path / "vision.jsonl"

    def roles(srv=None, mode="record"):
        rc = RoleConfig(backend="replay", cassette=str(cassette if mode == "record" else srv), replay_mode=mode,
                        **({"base_url": srv.base_url, "model": "vlm-x", "max_retries": 0} if mode == "record" else {}))
        return build_roles(ModelsConfig(roles={"vision": rc}))

    with FakeLLMServer() as srv:  # an imperfect model: nothing usable first, a good draft when asked again
        srv.push(Reply(content='<image>{"candidate_images": 7}</image>'), Reply(content=GOOD))
        (first,) = run_stage("synthesis", recs, tmp_path, roles=roles(srv), journal="synthesis.jsonl")
        assert first["status"] == "invalid" and "nothing usable remains" in first["reason"]
        from kbvqa.models.cache import ResponseCache

        user_cache = ResponseCache(cache_path(ModelsConfig()))
        assert user_cache.store.labels() == {"rejected": 1}  # the refused reply was cached, then forgotten
        seen = tmp_path / "seen.jsonl"
        seen.write_bytes(cassette.read_bytes())  # the cassette of the run that saw the refused reply
        (again,) = run_stage("synthesis", recs, tmp_path, roles=roles(srv), journal="synthesis.jsonl")  # --resume
        assert srv.count == 2  # asked anew: neither the response cache nor the cassette served the refusal
    assert again["status"] == "ok" and again["attempts"] == 2 and again["draft"]["text"] == renumber(GOOD, [3, 1])
    assert user_cache.store.labels() == {"openai:vlm-x": 1}  # the accepted reply took the refused one's place
    replay_old = run_stage("synthesis", recs, tmp_path, roles=roles(seen, "replay"), journal="replay-old.jsonl")
    replay_new = run_stage("synthesis", recs, tmp_path, roles=roles(cassette, "replay"), journal="replay-new.jsonl")
    assert (replay_old[0]["status"], replay_old[0]["reason"]) == (first["status"], first["reason"])
    assert replay_new[0]["draft"]["text"] == again["draft"]["text"] and replay_new[0]["draft"]["images"] == \
        again["draft"]["images"]


# -------------------------------------------------------------------------- stage 6: the audit


def test_audit_export_import_counts(tmp_path, qimg):
    store = ImageStore(tmp_path / "images")
    cands = [store_image(store, photo(n).resize((300, 200))) for n in ("rocket", "coffee", "chelsea")]
    recs = [synthesis_record(f"a{i}", cands, qimg) for i in range(5)]
    with FakeLLMServer(default=Reply(content=GOOD)) as srv:
        drafts = run_stage("synthesis", recs, tmp_path, roles={"vision": client(srv)}, journal="synthesis.jsonl")
    with FakeLLMServer(default=ok_json({"consistent": True, "issues": []})) as srv:
        srv.push(ok_json({"consistent": False, "issues": [
            {"kind": "image_mismatch", "tag": 2, "detail": "image 2 shows a cat, not the shuttle"}]}))
        run_stage("consistency", drafts[:1], tmp_path, roles={"vision": client(srv)}, journal="consistency.jsonl")
        run_stage("consistency", drafts[1:], tmp_path, roles={"vision": client(srv)}, journal="consistency.jsonl")
    res = runner.invoke(app, ["reference", "audit-export", str(tmp_path)])
    assert res.exit_code == 0, res.output
    exported = json.loads(res.stdout)
    assert exported["rows"] == 5 and exported["flagged_consistency_failed"] == 1
    sheet = tmp_path / "audit.csv"
    with open(sheet, encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert rows[0]["images"].startswith("1: images/") and "<image>" in rows[0]["draft"]
    flags = {r["id"]: r["flags"] for r in rows}
    assert flags.pop("a0") == "CONSISTENCY CHECK FAILED — image_mismatch (tag 2): image 2 shows a cat, not the shuttle"
    assert set(flags.values()) == {""}
    assert runner.invoke(app, ["reference", "audit-export", str(tmp_path)]).exit_code == 2  # never overwrites
    decisions = {"a0": ("accept", ""), "a1": ("Minor fix", 'Fixed.\n<image>{"candidate_images": 2}</image>'),
                 "a2": ("reject", ""), "a3": ("", "")}  # a3 pending, a4 left out of the sheet
    for r in rows:
        r["decision"], r["corrected_text"] = decisions.get(r["id"], ("", ""))
    rows = [r for r in rows if r["id"] != "a4"]

    def write(rs):
        with open(sheet, "w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rs[0]))
            w.writeheader()
            w.writerows(rs)

    write(rows)
    out = tmp_path / "refs" / "references.jsonl"
    res = runner.invoke(app, ["reference", "audit-import", str(tmp_path), "--out", str(out)])
    assert res.exit_code == 0, res.output
    counts = json.loads(res.stdout)
    assert {k: counts[k] for k in ("drafts", "rows", "accept", "minor_fix", "reject", "pending", "not_in_sheet",
                                   "references", "images_dropped_by_fix", "reference_images")} == {
        "drafts": 5, "rows": 4, "accept": 1, "minor_fix": 1, "reject": 1, "pending": 1, "not_in_sheet": 1,
        "references": 2, "images_dropped_by_fix": 1, "reference_images": 3}
    refs = {s.id: s for s in read_samples(out)}
    assert set(refs) == {"a0", "a1"}
    fixed = refs["a1"].meta["reference"]
    assert fixed["text"] == 'Fixed.\n<image>{"candidate_images": 1}</image>'
    assert fixed["images"][0]["sha256"] == cands[0]["sha256"]  # the draft's image 2 was candidate 1
    for s in refs.values():
        for im in s.meta["reference"]["images"]:
            assert (out.parent / im["path"]).is_file()
        assert (out.parent / s.images[0]).is_file()
        assert s.meta["extra"]["reference_audit"]["decision"] in ("accept", "minor fix")
    # bad sheets: the error names the file, the row and the column; no traceback
    for bad, field in (({"decision": "maybe"}, "decision"), ({"decision": "accept", "corrected_text": "x"},
                                                              "corrected_text"),
                       ({"decision": "minor fix", "corrected_text": '<image>{"candidate_images": 9}</image>'},
                        "corrected_text"), ({"id": "nope"}, "id")):
        write([{**rows[0], **bad}, *rows[1:]])
        res = runner.invoke(app, ["reference", "audit-import", str(tmp_path), "--out", str(out)])
        assert res.exit_code == 2 and "row 2" in res.output and f"field '{field}'" in res.output, res.output
        assert "Traceback" not in res.output


# --------------------------------------------------------------------- the demo, end to end


@pytest.fixture(scope="module")
def demo(bench_copy, tmp_path_factory):
    root = tmp_path_factory.mktemp("refdemo")
    b = bench_copy(root / "bench")
    community = build_community(b)
    kb = KBStore(b.kb)
    enc = HistogramEncoder()
    index, _ = build_image_index(kb, b.root, enc)
    samples = [s.dump() for s in read_samples(community)]
    job = build_answer_job("agent", kb=kb, index=index, encoder=enc, image_root=b.root, kb_images=b.root)
    job.run(samples, out=root / "agent.jsonl", progress=False)
    kb.close()
    return {"root": root, "bench": b, "community": community, "agent": root / "agent.jsonl"}


def build_args(demo, out: Path) -> list[str]:
    return ["reference", "build", "--samples", str(demo["community"]), "--trajectories", str(demo["agent"]),
            "--out", str(out), "--kb", str(demo["bench"].kb), "--kb-images", str(demo["bench"].root), "--json"]


def test_offline_build_over_the_demo_stops_at_the_first_vlm_stage(demo, tmp_path):
    out = tmp_path / "build"
    res = runner.invoke(app, build_args(demo, out))
    assert res.exit_code == 3, res.output  # no item got a draft: the per-record jobs' "nothing ended ok"
    assert "15 item(s) did not end ok: needs_model 15" in res.stderr
    funnel = json.loads(res.stdout)
    assert funnel["intake"]["items"] == 15 and funnel["intake"]["tools"] == "local"
    by = {s["stage"]: s for s in funnel["stages"]}
    assert by["urls"]["ok"] == 15 and by["urls"]["units"]["selected"] == 75
    h = by["harvest"]
    assert h["ok"] == 15 and h["units"]["kept"] >= 15 and set(h["units"]["kept_by_pool"]) == {
        "best_link", "image_search_pool"}
    assert by["candidates"] == {**by["candidates"], "in": 15, "ok": 0, "stopped": {"needs_model": 15}}
    assert all(by[k]["in"] == 0 for k in ("entities", "synthesis", "filter", "dedup", "consistency"))
    assert [s["stage"] for s in funnel["stages"]] == ["urls", "harvest", "candidates", "entities", "synthesis", "filter",
                                                      "dedup", "consistency"]
    assert funnel["intake"]["filter_placement"] == "after_synthesis"
    assert json.loads((out / "funnel.json").read_text()) == funnel
    for line in read_results(out / "harvest.jsonl"):
        for c in line["harvest"]["candidates"]:
            img = Image.open(out / "images" / c["path"])
            assert min(img.size) >= 100  # the paper's floor (kbvqa's aspect filter is off by default)
    assert (out / "candidates.manifest.json").is_file()
    # resume: nothing is redone but the stopped items, which stop again for the same reason
    res = runner.invoke(app, build_args(demo, out))
    again = json.loads(res.stdout)
    assert [s["stopped"] for s in again["stages"]] == [s["stopped"] for s in funnel["stages"]]
    lines = list(read_results(out / "candidates.jsonl"))
    assert len(lines) == 15 and all(ln["attempts"] == 2 for ln in lines)


def test_build_with_a_scripted_vlm_then_audit(demo, tmp_path):
    def handler(req):
        k = kind_of(req)
        t = text_of(req)
        if k == "urls":
            ids = re.findall(r"\[ID (P\d+)\]", t)
            return url_reply({i: 5 - n % 3 for n, i in enumerate(ids[:6])})
        if k == "candidate":
            return ok_json({**dims(4), "overall": 4})
        if k == "filter":
            return ok_json({"remove": False, "rule": None, "reason": "on topic"})
        if k == "probe":
            return ok_json({"similar": False})
        if k == "entities":  # the answer's entity, said to be unshown: the KB's forward image search runs
            answer = json.loads(re.search(r"Known answer: (\".*\")", t).group(1))
            return ok_json({"entities": [{"name": answer, "shown_in": [], "query": answer}]})
        if k == "consistency":
            return ok_json({"consistent": True, "issues": []})
        n = len(images_of(req)) - 1
        return Reply(content="The answer.\n" + (tag_line(1) if n else "") + "\nMore detail.")

    out = tmp_path / "build"
    with FakeLLMServer(handler=handler) as srv:
        res = runner.invoke(app, build_args(demo, out) + ["--llm", srv.base_url, "--model", "vlm-x", "--limit", "3",
                                                          "--no-resume"])
        kinds = [kind_of(r["json"]) for r in srv.requests]
    assert res.exit_code == 0, res.output
    funnel = json.loads(res.stdout)
    assert [(s["stage"], s["in"], s["ok"]) for s in funnel["stages"]] == [
        (k, 3, 3) for k in ("urls", "harvest", "candidates", "entities", "synthesis", "filter", "dedup", "consistency")]
    assert kinds.count("urls") == 3 and kinds.count("synthesis") == 3 and kinds.count("consistency") == 3
    ents = next(s for s in funnel["stages"] if s["stage"] == "entities")["units"]
    assert ents["searched"] == 3 and ents["search_status"] == {"ok": 3}
    assert ents["added"] + ents["dropped"].get("already_in_pool", 0) + ents["dropped"].get("same_as_query", 0) >= 3
    assert funnel["stages"][2]["units"]["kept"] <= 30
    drafts = list(read_results(out / "consistency.jsonl"))
    assert all(d["draft"]["text"].count("<image>") == len(d["draft"]["images"]) == 1 for d in drafts)
    assert all(d["filter"]["placement"] == "after_synthesis" for d in drafts)
    manifest = json.loads((out / "filter.manifest.json").read_text())
    assert "after_synthesis" in json.dumps(manifest)
    assert runner.invoke(app, ["reference", "audit-export", str(out)]).exit_code == 0
    with open(out / "audit.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        r["decision"] = "accept"
    with open(out / "audit.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    res = runner.invoke(app, ["reference", "audit-import", str(out)])
    assert res.exit_code == 0 and json.loads(res.stdout)["references"] == 3
    assert json.loads((out / "funnel.json").read_text())["audit"]["accept"] == 3
    refs = list(read_samples(out / "references.jsonl"))
    assert all((out / r.meta["reference"]["images"][0]["path"]).is_file() for r in refs)


def tag_line(n: int) -> str:
    return f'<image>{{"candidate_images": {n}}}</image>'


def test_bad_input_and_config_are_one_line_errors(demo, tmp_path):
    cfg = tmp_path / "kbvqa.toml"
    cfg.write_text("[reference.harvest]\nmin_sid = 3\n", encoding="utf-8")
    res = runner.invoke(app, build_args(demo, tmp_path / "b") + ["--config", str(cfg)])
    assert res.exit_code == 2 and "reference.harvest.min_sid" in res.output and "Traceback" not in res.output
    cfg.write_text("[reference.candidates]\ntop_k = 0\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"reference\.candidates\.top_k"):
        load_reference_config(cfg)
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"id": "community_000", "trajectory": {"not": "a list"}}\n', encoding="utf-8")
    res = runner.invoke(app, ["reference", "build", "--samples", str(demo["community"]), "--trajectories", str(bad),
                              "--out", str(tmp_path / "b"), "--kb", str(demo["bench"].kb), "--kb-images",
                              str(demo["bench"].root)])
    assert res.exit_code == 2 and "row 1" in res.output and "'trajectory'" in res.output
    res = runner.invoke(app, ["reference", "build", "--samples", str(demo["community"]), "--trajectories",
                              str(demo["agent"]), "--out", str(tmp_path / "b")])
    assert res.exit_code == 2 and "--kb-images" in res.output


def test_context_pickles_for_the_ray_executor(tmp_path, demo):
    ctx = reference_context(tmp_path, ReferenceConfig(), kb=KBStore(demo["bench"].kb), kb_images=demo["bench"].root)
    copy = pickle.loads(pickle.dumps(ctx))
    assert copy.resources["image_store"].root == ctx.resources["image_store"].root
    assert copy.resources["kb_image_file"]("images/kb_rocket.jpg") is not None
    web = reference_context(tmp_path, ReferenceConfig(harvest=HarvestConfig(backend="web")),
                            web_tools={"api_key_env": "K"})
    again = pickle.loads(pickle.dumps(web))
    assert again.resources["fetcher"].settings["timeout"] == 10.0
    assert again.resources["page_scraper"].settings == {"api_key_env": "K"}
