"""Curation from community posts (seed 001 §3.1): the posts reader and its bad-input policy, the offline
language detector, the corpus selections (near-duplicates, top-K, balancing), the demo posts offline,
the whole funnel against a scripted OpenAI-compatible server on 127.0.0.1 (then resumed, and resumed
after an offline run), the proofreading sheet, the configuration and the command line."""

from __future__ import annotations

import csv
import json
import os
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.errors import DataError, ErrorPolicy, SkipReport
from kbvqa.data.formats import read_samples
from kbvqa.data.posts import read_posts
from kbvqa.demo.bench import build_community, build_posts, load_content
from kbvqa.models.client import OpenAIChatClient
from kbvqa.pipelines.curate import (CurateConfig, CurateSetupError, curate_posts, export_review,
                                    load_curate_config, review_import)
from kbvqa.pipelines.curate.corpus import balance, cell_quotas, duplicate_owners, near_pairs, popcount64, top_k_by_group
from kbvqa.pipelines.curate.language import detect_language
from kbvqa.pipelines.curate.refine import reveals
from kbvqa.runner import read_results

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply  # noqa: E402

runner = CliRunner()
ALL_ROLES = ("vision", "answerer", "checker", "repairer", "judge")


# ----------------------------------------------------------------------------------------- helpers


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def text_of(req: dict) -> str:
    out = []
    for m in req["messages"]:
        c = m["content"]
        out.extend([c] if isinstance(c, str) else [p.get("text", "") for p in c if p.get("type") == "text"])
    return "\n".join(out)


def n_images(req: dict) -> int:
    return sum(1 for m in req["messages"] if isinstance(m["content"], list)
               for p in m["content"] if p.get("type") == "image_url")


#: the short answer of each demo post, found by a phrase of its text
ANSWERS = {"space exhibit": "Eileen Collins", "launch from the beach": "Falcon 9", "颐和园": "佛香阁",
           "history of computing": "Grace Hopper", "cat keeps sitting": "tabby domestic shorthair",
           "baristas": "latte art", "science book": "Hubble eXtreme Deep Field", "eye doctor": "retina",
           "grandfather": "ancient Greek coins", "neighbour says": "dahlia"}


def answer_for(text: str) -> str:
    return next(a for k, a in ANSWERS.items() if k in text)


def scripted(req: dict) -> Reply:
    """The scripted VLM/LLM: which check is asked is read from the prompt, which post from its text."""
    t = text_of(req)

    def js(obj: dict) -> Reply:
        return Reply(content=json.dumps(obj, ensure_ascii=False))

    if "Is this post a visual question" in t:
        assert n_images(req) >= 1
        return js({"candidate": "Selling my late father" not in t, "reason": "asks about the pictured thing"})
    if "You cannot see any image" in t:
        assert n_images(req) == 0  # the vision-necessity gate never sees the picture
        if "Merlin engines" in t:
            return js({"answerable": True, "answer": "nine"})
        return js({"answerable": False, "answer": None})
    if "Do the images show what the text talks about" in t:
        return js({"consistent": True, "reason": "same subject"})
    if "Rate the images after this text" in t:
        return js({"score": 4, "reason": "sharp and well framed"})
    if "List the distinct substantive aspects" in t:
        return js({"aspects": ["what it is", "how to recognise it", "background facts"], "reason": "rich"})
    if "Score the item on five axes" in t:
        return js({"question_clarity": 4, "image_quality": 4, "image_text_alignment": 5, "interleaved_fit": 4,
                   "answer_objectivity": 5, "reason": "clear"})
    if "Does any comment give a plausible" in t:
        return js({"plausible": True, "comment": 1, "reason": "the top comment answers"})
    if "Turn this community post into one benchmark question" in t:
        post = t.split("Post text:", 1)[1].split("\n", 1)[0].strip().strip('"')
        key = answer_for(t)
        return js({"question": post, "answer": key, "reference": expert_paragraph(key)})
    if "Rewrite the question so that it no longer contains" in t:
        q = json.loads(t.split("Question: ", 1)[1].split("\n", 1)[0])
        return js({"question": q, "removed_terms": []})  # the dahlia post keeps its give-away
    if "was rewritten to stop it from giving away" in t:
        rewritten = t.split("Rewritten question: ", 1)[1].split("\n", 1)[0]
        return js({"same_intent": True, "reveals_answer": "dahlia" in rewritten.lower(), "reason": "checked"})
    if "Answer the question about the image" in t:
        if "baristas" in t:
            return js({"answer": "latte art"})
        PROBE_RUNS[t] += 1  # the other items get a different guess on every run: they stay hard
        return js({"answer": f"guess {PROBE_RUNS[t]}"})
    if "answered the same visual question" in t:
        answers = re.findall(r"^(\d+)\. (.*)$", t, re.M)
        groups: dict[str, list[int]] = {}
        for n, a in answers:
            groups.setdefault(a.strip(), []).append(int(n))
        agree = [int(n) for n, a in answers if a.strip() == "latte art" and "latte art" in t.split("Answers:")[0]]
        return js({"groups": list(groups.values()), "agree_with_reference": agree})
    if "You sort community visual questions" in t:
        return js({"category": "Science & Space", "intent": "Explanation"})
    if "Translate this benchmark item from" in t:
        return js({"question": "What is this tower at the Summer Palace called, how tall is it, and when was it "
                               "built?", "answer": "Tower of Buddhist Incense"})
    if "Check an English translation" in t:
        return js({"faithful": True, "issues": []})
    raise AssertionError(f"unexpected request: {t[:300]}")


PROBE_RUNS: Counter = Counter()


def expert_paragraph(key: str) -> str:
    """A reference of the paper's shape (about 100 words, the answer first) around a key fact."""
    return (f"{key}. " + "Experienced members point to the distinguishing features visible in the photo, explain "
            "how to tell it apart from similar cases, and give the background that makes the identification "
            "certain. " * 3).strip()


def roles_for(srv: FakeLLMServer) -> dict:
    client = OpenAIChatClient(srv.base_url, "vlm-x", max_retries=0, concurrency=4)
    return {r: client for r in ALL_ROLES}


def small_config(**overrides) -> object:
    cfg = {"difficulty": {"runs": 3}, **overrides}
    return CurateConfig.model_validate(cfg)


@pytest.fixture(scope="module")
def demo_bench(bench_copy, tmp_path_factory):
    return bench_copy(tmp_path_factory.mktemp("bench"))


@pytest.fixture(scope="module")
def demo(demo_bench) -> Path:
    return build_posts(demo_bench)


def expected(reason: str) -> set[str]:
    return {p["id"] for p in load_content("posts.json")["posts"] if p["expect"] == reason}


# ------------------------------------------------------------------------------ language detection


@pytest.mark.parametrize("text,lang", [
    ("What is this tower, and how tall is it? Does anyone know when it was built?", "en"),
    ("Quelle est cette tour et qui l'a construite ? Je ne sais pas.", "fr"),
    ("Was ist das für ein Turm und wer hat ihn gebaut? Ich weiß es nicht.", "de"),
    ("¿Qué es esta torre y quién la construyó? No lo sé, alguien sabe?", "es"),
    ("Che cos'è questa torre e chi l'ha costruita? Qualcuno sa dove si trova?", "it"),
    ("Wat is dit voor een toren en wie heeft hem gebouwd? Weet iemand het?", "nl"),
    ("在颐和园拍到的这座塔叫什么名字？", "zh"),
    ("この塔の名前は何ですか？", "ja"),
    ("이 탑의 이름은 무엇입니까?", "ko"),
    ("Что это за башня и кто её построил?", "ru"),
    ("Що це за вежа і хто її збудував?", "uk"),
    ("12345 !!! ???", "und"),
    ("Falcon Nine", "und"),
])
def test_language_detector(text, lang):
    guess = detect_language(text)
    assert guess.language == lang, guess
    assert guess.evidence


# ---------------------------------------------------------------------------------- corpus selections


def test_near_pairs_equal_brute_force():
    rng = np.random.default_rng(7)
    h = rng.integers(0, 2 ** 63, size=1500, dtype=np.uint64) | (rng.integers(0, 2, size=1500, dtype=np.uint64) << 63)
    for _ in range(40):  # plant near-duplicates at every distance up to 12
        a, b = rng.integers(0, len(h), size=2)
        v = int(h[a])
        for bit in rng.choice(64, size=int(rng.integers(0, 13)), replace=False):
            v ^= 1 << int(bit)
        h[b] = np.uint64(v)
    for near in (0, 4, 10):
        got = {(i, j) for i, j, _ in near_pairs(h, near)}
        d = popcount64((h[:, None] ^ h[None, :]).ravel()).reshape(len(h), len(h))
        ii, jj = np.nonzero(np.tril(d <= near, -1))
        assert got == set(zip(ii.tolist(), jj.tolist()))


def test_duplicate_owners_first_post_wins():
    a, b = 0x0F0F_0F0F_0F0F_0F0F, 0xFFFF_0000_FFFF_0000
    images = [("p1", a), ("p2", b), ("p2", a ^ 0b111), ("p3", b ^ 1), ("p4", a ^ 1)]
    dups = duplicate_owners(images, 10)
    assert dups["p2"][:2] == ("p1", 3)  # p2's second picture repeats p1's
    assert "p3" not in dups  # p3 repeats p2, which was dropped: the first kept post wins
    assert dups["p4"][0] == "p1"


def test_top_k_and_balance():
    ranks = top_k_by_group([("a", "x", 3), ("b", "x", 5), ("c", "y", 1), ("d", "x", 5)], 2)
    assert ranks == {"b": (1, 3), "d": (2, 3), "a": (3, 3), "c": (1, 1)}
    assert cell_quotas({"a": 10, "b": 2, "c": 5}, 12) == {"a": 5, "b": 2, "c": 5}
    assert sum(cell_quotas({"a": 3, "b": 3, "c": 3}, 7).values()) == 7
    kept, quotas = balance([(f"i{k}", "big", float(k)) for k in range(6)] + [("s", "small", 0.0)], 4)
    assert quotas == {"big": 3, "small": 1} and set(kept) == {"i5", "i4", "i3", "s"}


def test_reveals_rule():
    assert reveals("Is this flower a dahlia?", "Dahlia")
    assert not reveals("Is this the dahlias' cousin?", "dahlia")  # word-bounded
    assert reveals("这座佛香阁有多高？", "佛香阁")


# ------------------------------------------------------------------------------------ posts reader


def test_posts_jsonl_csv_parquet(tmp_path):
    rows = [{"id": 7, "title": "T", "text": "What is it?", "images": ["a.jpg", {"path": "b.jpg", "url": "https://x/b"}],
             "comments": [{"text": "A thing", "likes": 3}, "plain"], "tags": ["x"], "extra": 1}]
    (tmp_path / "p.jsonl").write_text(json.dumps(rows[0]) + "\n", encoding="utf-8")
    p = next(read_posts(tmp_path / "p.jsonl"))
    assert p.id == "7" and p.images[1].url == "https://x/b" and p.comments[1].likes == 0 and p.meta == {"extra": 1}
    with open(tmp_path / "p.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["note_id", "body", "pics", "comments", "tags"])
        w.writerow(["n1", "What is this?", "a.jpg|b.jpg", json.dumps([{"text": "yes", "likes": 2}]), "t1|t2"])
    p = next(read_posts(tmp_path / "p.csv", mapping={"id": "note_id", "text": "body", "images": "pics"}))
    assert (p.id, p.text, [i.path for i in p.images], p.comments[0].likes, p.tags) == \
        ("n1", "What is this?", ["a.jpg", "b.jpg"], 2, ["t1", "t2"])
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"id": "q1", "text": "Which?", "images": ["x.jpg"], "tags": ["a"]}]),
                   tmp_path / "p.parquet")
    p = next(read_posts(tmp_path / "p.parquet"))
    assert p.images[0].path == "x.jpg" and p.tags == ["a"]


def test_posts_bad_rows_named_or_counted(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_bytes(b'{"id": "a", "text": "ok?"}\n'
                  b'{"id": "b", "text": "caf\xe9?"}\n'  # latin-1 byte: not UTF-8
                  b'{"id": "c", "comments": [{"text": "x", "likes": -1}]}\n'
                  b'{"id": "d", "images": [3]}\n'
                  b'{"text": "no id"}\n')
    with pytest.raises(DataError) as e:
        list(read_posts(f))
    assert "row 2" in str(e.value) and "not UTF-8" in str(e.value)
    report = SkipReport()
    got = list(read_posts(f, policy=ErrorPolicy(skip_invalid=True, report=report)))
    assert [p.id for p in got] == ["a"]
    assert [r for r, _ in report.skipped] == [2, 3, 4, 5]
    assert "field 'comments'" in report.skipped[1][1] and "field 'images'" in report.skipped[2][1]
    assert "field 'id'" in report.skipped[3][1]
    latin = tmp_path / "latin.csv"
    latin.write_bytes("id,text\n1,caf\xe9?\n".encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8"):
        list(read_posts(latin))


# ------------------------------------------------------------------------------------ demo, offline


def test_demo_posts_offline_funnel(demo, tmp_path):
    """Offline: the deterministic stages drop what each filter should; everything else stops at the
    first model stage with a NeedsModel reason; every post is accounted for."""
    res = curate_posts(demo, tmp_path / "run")
    rows = {s["stage"]: s for s in res.stages}
    assert res.intake == {"read": 21, "posts": 20, "skipped_rows": 0, "duplicate_id": 1}
    assert rows["text"]["dropped"] == {"too_short": 1, "blocked_keyword": 1, "no_question": 1}
    assert rows["images"]["dropped"] == {"no_readable_image": 3, "no_image": 1}
    assert rows["dedup"]["dropped"] == {"duplicate_image": 1}
    assert rows["candidate"]["stopped"] == {"needs_model": 12} and rows["candidate"]["kept"] == 0
    assert res.output["items"] == 0 and res.accounted
    drops = {d["id"]: d for d in lines(tmp_path / "run" / "dropped.jsonl") if d["stage"] != "intake"}
    for reason in ("too_short", "blocked_keyword", "no_question", "no_image", "duplicate_image"):
        assert {i for i, d in drops.items() if d["reason"] == reason} == expected(reason)
    assert {i for i, d in drops.items() if d["reason"] == "no_readable_image"} == expected("no_readable_image")
    details = " ".join(d["detail"] for d in drops.values())
    assert "missing" in details and "unreadable" in details and "too_small" in details
    stops = lines(tmp_path / "run" / "stopped.jsonl")
    assert all(s["reason"].startswith("NeedsModel") and "'vision' role" in s["reason"] for s in stops)
    assert any("no model for role 'vision'" in w for w in res.warnings)
    assert json.loads((tmp_path / "run" / "funnel.json").read_text())["accounted"] is True


# ------------------------------------------------------------------------------ the whole funnel


def test_whole_funnel_against_scripted_server(demo, demo_bench, tmp_path, monkeypatch):
    out = tmp_path / "run"
    with FakeLLMServer(handler=scripted) as srv:
        res = curate_posts(demo, out, config=small_config(), roles=roles_for(srv))
        requests = srv.count
        manifest = json.loads((out / "stages" / "05_candidate.manifest.json").read_text())
        assert manifest["usage"]["calls"] == 12 and "curate.vqa_candidate@1" in json.dumps(manifest["stages"])
        again = curate_posts(demo, out, config=small_config(), roles=roles_for(srv))  # resume: nothing to ask
        assert srv.count == requests
    assert again.output == res.output
    rows = {s["stage"]: s for s in res.stages}
    assert rows["candidate"]["dropped"] == {"not_vqa_candidate": 1}
    assert rows["text_only"]["dropped"] == {"text_only_answerable": 1}
    assert rows["rewrite"]["dropped"] == {"answer_revealing": 1}
    assert rows["difficulty"]["dropped"] == {"too_easy": 1}
    assert all(not s["stopped"] for s in res.stages)
    assert res.output == {"items": 8, "dropped": 13, "stopped": 0, "drops": {}} and res.accounted
    drops = {d["id"]: d for d in lines(out / "dropped.jsonl")}
    for reason in ("not_vqa_candidate", "text_only_answerable", "answer_revealing"):
        assert {i for i, d in drops.items() if d["reason"] == reason} == expected(reason)
    assert "nine" in drops["p12"]["detail"] and "dahlia" in drops["p10"]["detail"].lower()
    items = {s.id: s for s in read_samples(out / "items.jsonl", "notevqa")}
    assert set(items) == expected("item") - {"p06"}
    tower = items["p03"]
    assert tower.meta["language"] == "en" and tower.answers[0].text == "Tower of Buddhist Incense"
    assert tower.meta["extra"]["curation"]["source_language"] == "zh"
    assert tower.meta["extra"]["curation"]["source_answer"].startswith("佛香阁. Experienced members")
    assert tower.meta["extra"]["curation"]["key_answer"] == "佛香阁"
    # the short reference has the paper's shape: an expert paragraph, the key fact beside it
    latte = [s for s in items.values() if s.meta["extra"]["curation"].get("key_answer") == "latte art"]
    assert not latte  # the item every run answered alike was dropped as too easy (consistency rule)
    hopper = next(s for s in items.values() if s.meta["extra"]["curation"].get("key_answer") == "Grace Hopper")
    assert hopper.answers[0].text.startswith("Grace Hopper. ") and len(hopper.answers[0].text.split()) > 80
    # `kbvqa data compare`, as a user runs it (relative paths, cache on): the curated items' short references
    # beside the demo community set's interleaved references and their embedded images
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    community = build_community(demo_bench)
    monkeypatch.chdir(tmp_path)
    rel = Path(os.path.relpath(community, tmp_path))
    r = runner.invoke(app, ["data", "compare", "run/items.jsonl", str(rel), "--name", "curated", "--name",
                                 "community", "--json"])
    assert r.exit_code == 0, r.output
    cmp = {b["name"]: b for b in json.loads(r.stdout)["benchmarks"]}
    assert cmp["curated"]["answer_words"]["median"] > 80 and cmp["curated"]["reference_images"] is None
    assert cmp["community"]["reference_words"]["n"] == 15 and cmp["community"]["reference_images"]["per_item"] > 0
    assert items["p01"].meta["category"] == "Science & Space" and items["p01"].meta["intent"] == "Explanation"
    for s in items.values():
        assert (out / s.images[0]).is_file() and Image.open(out / s.images[0]).size[0] >= 200
        assert s.meta["extra"]["curation"]["scores"]["rubric"]["image_text_alignment"] == 5


def test_offline_run_then_resume_with_a_model(demo, tmp_path):
    out = tmp_path / "run"
    first = curate_posts(demo, out, config=small_config())
    assert first.output["stopped"] == 12
    with FakeLLMServer(handler=scripted) as srv:
        res = curate_posts(demo, out, config=small_config(), roles=roles_for(srv))
    assert res.output == {"items": 8, "dropped": 13, "stopped": 0, "drops": {}}
    attempts = {ln["id"]: ln["attempts"] for ln in read_results(out / "stages" / "05_candidate.jsonl")}
    assert attempts["p01"] == 2


def test_failed_and_unusable_replies_stop_posts_not_decide(demo, tmp_path):
    def broken(req):
        if "Is this post a visual question" in text_of(req):
            if "颐和园" in text_of(req):
                return Reply(status=500, error="boom")
            return Reply(content='{"candidate": "yes", "reason": "r"}')  # a string is not a boolean
        return scripted(req)

    with FakeLLMServer(handler=broken) as srv:
        res = curate_posts(demo, tmp_path / "run", config=small_config(), roles=roles_for(srv))
    rows = {s["stage"]: s for s in res.stages}
    assert rows["candidate"]["stopped"] == {"invalid": 11, "error": 1}
    assert rows["candidate"]["dropped"] == {} and res.output["items"] == 0 and res.accounted


def test_proofreading_export_and_import(demo, tmp_path):
    out = tmp_path / "run"
    with FakeLLMServer(handler=scripted) as srv:
        curate_posts(demo, out, config=small_config(), roles=roles_for(srv))
    sheet = tmp_path / "review.csv"
    info = export_review(out / "items.jsonl", sheet)
    assert info["items"] == 8
    with pytest.raises(FileExistsError):
        export_review(out / "items.jsonl", sheet)
    rows = list(csv.DictReader(open(sheet, encoding="utf-8")))
    flagged = [bool(r["flags"]) for r in rows]
    assert flagged == sorted(flagged, reverse=True)  # flagged items first
    assert "cross-checked by the translating model itself" in next(r["flags"] for r in rows if r["id"] == "p03")
    decisions = {"p01": ("accept", "", ""), "p02": ("fix", "", "Falcon 9 (Block 5)"), "p04": ("reject", "", ""),
                 "p05": ("", "", "")}
    for r in rows:
        d, q, a = decisions.get(r["id"], ("accept", "", ""))
        r.update(decision=d, fixed_question=q, fixed_answer=a, notes="dup of a famous photo" if d == "reject" else "")
    with open(sheet, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    res = review_import(out, sheet)
    assert (res["accept"], res["fix"], res["reject"], res["pending"], res["written"]) == (5, 1, 1, 1, 6)
    reviewed = {s.id: s for s in read_samples(out / "reviewed.jsonl", "notevqa")}
    assert reviewed["p02"].answers[0].text == "Falcon 9 (Block 5)"
    assert reviewed["p02"].meta["extra"]["curation"]["review"]["before"] == {"answer": expert_paragraph("Falcon 9")}
    rejected = [d for d in lines(out / "dropped.jsonl") if d["stage"] == "proofread"]
    assert [d["id"] for d in rejected] == ["p04"]
    review_import(out, sheet)  # importing again replaces, never duplicates, the proofreading drops
    assert len([d for d in lines(out / "dropped.jsonl") if d["stage"] == "proofread"]) == 1
    rows[1]["decision"] = "maybe"
    with open(sheet, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(DataError, match="row 3, field 'decision'"):
        review_import(out, sheet)


# --------------------------------------------------------------- configuration, balancing offline


def write_posts(folder: Path, posts: list[dict]) -> Path:
    (folder / "img").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    for i, p in enumerate(posts):
        if p.pop("_image", True):
            arr = (rng.random((8, 8, 3)) * 255).astype(np.uint8)
            Image.fromarray(arr).resize((256, 256), Image.Resampling.NEAREST).save(folder / "img" / f"{i}.png")
            p.setdefault("images", [f"img/{i}.png"])
    f = folder / "posts.jsonl"
    f.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in posts), encoding="utf-8")
    return f


MODEL_STAGES_OFF = {k: {"enabled": False} for k in ("candidate", "text_only", "consistency", "aesthetic", "interleaved",
                                                     "rubric", "plausibility", "standardize", "rewrite", "difficulty",
                                                     "classify", "translate", "assign")}


def test_model_stages_off_balances_offline(tmp_path):
    cells = [("Food & Drink", "How-to")] * 5 + [("Animals & Pets", "Advice")] * 2 + [("Collectibles", "Verification")]
    posts = [{"id": f"x{i}", "text": f"What should I do with this thing number {i}, please?", "answer": f"answer {i}",
              "category": c, "intent": t, "language": "en"} for i, (c, t) in enumerate(cells)]
    posts.append({"id": "noans", "text": "What is this strange object on my table?", "category": "Collectibles",
                  "intent": "Verification"})
    f = write_posts(tmp_path, posts)
    cfg = CurateConfig.model_validate({**MODEL_STAGES_OFF, "balance": {"target": 6}})
    assert cfg.roles() == ()
    res = curate_posts(f, tmp_path / "run", config=cfg)
    bal = {s["stage"]: s for s in res.stages}["balance"]
    assert bal["in"] == 9 and bal["kept"] == 6 and bal["dropped"] == {"over_cell_quota": 3}
    assert {s["stage"]: s.get("disabled") for s in res.stages}["candidate"] is True
    assert res.output["items"] == 5 and res.output["drops"] == {"no_short_answer": 1} and res.accounted
    items = lines(tmp_path / "run" / "items.jsonl")
    assert sorted(i["category"] for i in items) == ["Animals & Pets"] * 2 + ["Collectibles"] + ["Food & Drink"] * 2
    assert all(i["curation"]["answer_source"] == "post" for i in items)
    assert "candidate" in items[0]["curation"]["disabled_stages"]


def test_config_errors_and_changed_settings(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text("[curate.text]\nmin_charz = 3\n")
    with pytest.raises(CurateSetupError, match=r"c.toml: curate.text.min_charz"):
        load_curate_config(bad)
    good = tmp_path / "ok.toml"
    good.write_text('[curate.classify]\ncategories = ["A", "B"]\n[curate.balance]\ntarget = 10\n')
    cfg = load_curate_config(good)
    assert cfg.assign.categories == ["A", "B"] and cfg.balance.target == 10
    f = write_posts(tmp_path, [{"id": "a", "text": "What is this object, does anyone know?"}])
    curate_posts(f, tmp_path / "run")
    with pytest.raises(CurateSetupError, match=r"\[curate.text\] changed .*min_words"):
        curate_posts(f, tmp_path / "run", config=CurateConfig.model_validate({"text": {"min_words": 1}}))
    curate_posts(f, tmp_path / "run", config=CurateConfig.model_validate({"text": {"min_words": 1}}), resume=False)


# ------------------------------------------------------------------------------------ command line


def test_cli_run_bad_input_and_json(tmp_path):
    f = write_posts(tmp_path, [
        {"id": "ok", "text": "What is this thing on my desk, any idea?"},
        {"id": "gone", "text": "What is this building, anyone recognise it?", "images": ["img/nope.jpg"], "_image": False},
        {"id": "ok", "text": "What is this again, any idea at all?", "images": ["img/0.png"], "_image": False},
    ])
    (tmp_path / "img" / "broken.jpg").write_bytes(b"not an image")
    with open(f, "ab") as fh:
        fh.write(b'{"id": "latin", "text": "Qu\'est-ce que c\'est, caf\xe9 ?"}\n')
        fh.write(b'{"id": "brk", "text": "What kind of rock is this, please?", "images": ["img/broken.jpg"]}\n')
    r = runner.invoke(app, ["curate", "run", str(f), "--out", str(tmp_path / "a")])
    assert r.exit_code == 2 and "row 4" in r.output and "not UTF-8" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["curate", "run", str(f), "--out", str(tmp_path / "b"), "--skip-invalid", "--json"])
    assert r.exit_code == 3, r.output  # offline: posts stopped at the first model stage, none became an item
    funnel = json.loads(r.stdout.strip().splitlines()[-1])
    assert funnel["intake"] == {"read": 5, "posts": 3, "skipped_rows": 1, "duplicate_id": 1}
    assert funnel["accounted"] is True
    drops = {(d["id"], d["reason"]) for d in lines(tmp_path / "b" / "dropped.jsonl")}
    assert {("ok", "duplicate_id"), (None, "bad_row"), ("gone", "no_readable_image"),
            ("brk", "no_readable_image")} <= drops
    r = runner.invoke(app, ["curate", "run", str(f), "--out", str(tmp_path / "c"), "--skip-invalid"])
    assert "curation funnel" in r.output and "needs_model 1" in r.output
    (tmp_path / "empty.jsonl").write_text("\n")
    r = runner.invoke(app, ["curate", "run", str(tmp_path / "empty.jsonl"), "--out", str(tmp_path / "e")])
    assert r.exit_code == 2 and "no posts in the input" in r.output
    r = runner.invoke(app, ["curate", "run", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "e")])
    assert r.exit_code == 2 and "posts file not found" in r.output


def test_cli_whole_funnel_with_llm_flag(demo, tmp_path):
    cfg = tmp_path / "curate.toml"
    cfg.write_text("[curate.difficulty]\nruns = 2\n")
    with FakeLLMServer(handler=scripted) as srv:
        r = runner.invoke(app, ["curate", "run", str(demo), "--out", str(tmp_path / "run"), "--config", str(cfg),
                                "--llm", srv.base_url, "--model", "vlm-x", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout.strip().splitlines()[-1])["output"]["items"] == 8
    r = runner.invoke(app, ["curate", "review-export", str(tmp_path / "run")])
    assert r.exit_code == 0 and json.loads(r.stdout)["items"] == 8
    r = runner.invoke(app, ["curate", "review-import", str(tmp_path / "run")])
    assert r.exit_code == 0 and json.loads(r.stdout)["pending"] == 8
