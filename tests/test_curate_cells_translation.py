"""Curation's balancing and translation check as seed 001 §3.1 describes them: balancing is on by
default over the 12 × 7 category × intent grid (each name says whether the paper or kbvqa gives it),
and every configured checker model cross-checks a translation, with their agreement reported per
item, on the proofreading sheet and over the run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.models.client import OpenAIChatClient
from kbvqa.pipelines.curate import CurateConfig
from kbvqa.pipelines.curate.audit import TranslateConfig, Translate, review_flags, translation_agreement
from kbvqa.pipelines.curate.common import ITEM
from kbvqa.pipelines.curate.refine import (CATEGORY_ORIGINS, DEFAULT_CATEGORIES, DEFAULT_INTENTS, INTENT_ORIGINS,
                                           PAPER_ITEMS, Balance, BalanceConfig)
from kbvqa.runner import read_results
from kbvqa.runner.job import Job
from kbvqa.runner.stage import Context

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply  # noqa: E402

runner = CliRunner()
OFF = ("candidate", "text_only", "consistency", "aesthetic", "interleaved", "rubric", "plausibility", "standardize",
       "rewrite", "difficulty", "classify", "assign")


def text_of(req: dict) -> str:
    parts = []
    for m in req["messages"]:
        c = m["content"]
        parts.append(c if isinstance(c, str) else " ".join(p.get("text", "") for p in c if p.get("type") == "text"))
    return "\n".join(parts)


# ------------------------------------------------------------------------------ the cells


def test_the_vocabulary_is_twelve_by_seven_and_says_where_each_name_comes_from():
    assert len(DEFAULT_CATEGORIES) == 12 and len(DEFAULT_INTENTS) == 7
    # our copy of the paper names no category: every one is kbvqa's reconstruction, said so
    assert all(origin.startswith("kbvqa") for origin in CATEGORY_ORIGINS.values())
    # the seven intents are the seven needs §1 lists; the labels are kbvqa's spelling of them
    assert all(origin.startswith("§1: ") for origin in INTENT_ORIGINS.values())
    cfg = CurateConfig()
    assert cfg.classify.categories == list(DEFAULT_CATEGORIES) and cfg.assign.intents == list(DEFAULT_INTENTS)


def test_balancing_is_on_by_default_towards_the_papers_size():
    assert BalanceConfig().target == PAPER_ITEMS == 252
    # 360 items over 3 cells, one of them small: water-filling keeps all 40 of the small cell and
    # splits the rest evenly; within a cell the least consistent (hardest) items stay
    cells = [("Food & Drink", "Guidance")] * 200 + [("Animals & Pets", "Identification")] * 120 + \
            [("Collectibles", "Authenticity check")] * 40
    recs = [{"id": f"i{k}", ITEM: {"category": c, "intent": t},
             "curate": {"difficulty": {"rule": "consistency", "consistency": (k % 10) / 10}}}
            for k, (c, t) in enumerate(cells)]
    decided = Balance(BalanceConfig()).decide(recs)
    kept = [r for r in recs if decided[r["id"]].drop is None]
    assert len(kept) == 252
    by_cell: dict[str, int] = {}
    for r in kept:
        by_cell[r[ITEM]["category"]] = by_cell.get(r[ITEM]["category"], 0) + 1
    assert by_cell == {"Food & Drink": 106, "Animals & Pets": 106, "Collectibles": 40}
    dropped = [decided[r["id"]] for r in recs if decided[r["id"]].drop]
    assert {d.drop for d in dropped} == {"over_cell_quota"} and "target 252" in dropped[0].detail
    assert max(r["curate"]["difficulty"]["consistency"] for r in kept if r[ITEM]["category"] == "Food & Drink") <= 0.6
    # a set smaller than the target keeps every item; target = none switches balancing off
    small = Balance(BalanceConfig()).decide(recs[:30])
    assert all(v.drop is None for v in small.values()) and small["i0"].payload["target"] == 252
    assert CurateConfig.model_validate({"balance": {"target": None}}).balance.target is None


# ------------------------------------------------------------------------------ the translation check


SOURCE = {"id": "zh1", ITEM: {"question": "在颐和园拍到的这座塔叫什么名字？", "answer": "佛香阁", "language": "zh"}}


def translator(req: dict) -> Reply:
    t = text_of(req)
    if "Translate this benchmark item" in t:
        return Reply(content=json.dumps({"question": "What is this tower at the Summer Palace called?",
                                         "answer": "Tower of Buddhist Incense"}))
    assert "Check an English translation" in t
    return Reply(content=json.dumps({"faithful": True, "issues": []}))


def strict_checker(req: dict) -> Reply:
    assert "Check an English translation" in text_of(req) and "Tower of Buddhist Incense" in text_of(req)
    return Reply(content=json.dumps({"faithful": False, "issues": ["the tower's name is a gloss, not its name"]}))


def run_translate(cfg: TranslateConfig, roles: dict, tmp: Path, name: str = "t.jsonl") -> dict:
    Job([Translate(cfg)], Context(roles=roles)).run([SOURCE], out=tmp / name, progress=False)
    (line,) = read_results(tmp / name)
    return line


def test_every_checker_checks_and_their_split_is_reported(tmp_path):
    with FakeLLMServer(handler=translator) as a, FakeLLMServer(handler=strict_checker) as b:
        ca = OpenAIChatClient(a.base_url, "model-a", max_retries=0)
        cb = OpenAIChatClient(b.base_url, "model-b", max_retries=0)
        cfg = TranslateConfig(check_roles=["checker", "judge"])
        line = run_translate(cfg, {"repairer": ca, "checker": ca, "judge": cb}, tmp_path)
        assert b.count == 1 and a.count == 2  # the translation, and one check on each server
        # a checker role missing: no call is spent, the item waits for the model
        before = a.count
        off = run_translate(cfg, {"repairer": ca, "checker": ca}, tmp_path, "off.jsonl")
        assert a.count == before
    assert off["status"] == "needs_model" and "'judge'" in off["reason"]
    assert line["status"] == "ok", line.get("reason")
    tr = line["curate"]["translate"]
    assert [(c["role"], c["model"], c["faithful"]) for c in tr["checks"]] == [("checker", "model-a", True),
                                                                              ("judge", "model-b", False)]
    assert tr["faithful"] is False  # faithful only when every checker says so
    assert tr["agreement"] == {"checkers": 2, "faithful": 1, "unanimous": False, "distinct_models": 2}
    assert tr["issues"] == ["judge: the tower's name is a gloss, not its name"]
    assert tr["same_model"] is True  # model-a translated and also checked
    flags = review_flags(line)
    assert any(f.startswith("translation (1 of 2 checkers found problems): judge:") for f in flags)
    assert line[ITEM]["question"].startswith("What is this tower")  # flagged, not dropped (drop_unfaithful off)
    summary = translation_agreement([tr, {**tr, "checks": [{**c, "faithful": True} for c in tr["checks"]]},
                                     {"translated": False}])
    assert (summary["items"], summary["unanimous_faithful"], summary["split"]) == (2, 1, 1)
    assert summary["pairwise_agreement"] == {"checker~judge": {"same": 1, "items": 2, "share": 0.5}}
    assert summary["faithful_share"] == {"checker": 1.0, "judge": 0.5}


def test_old_single_check_role_key_still_reads():
    assert TranslateConfig.model_validate({"check_role": "verifier"}).check_roles == ["verifier"]
    only_translate = {k: {"enabled": False} for k in OFF} | {"translate": {"check_roles": ["checker", "judge"]}}
    assert CurateConfig.model_validate(only_translate).roles() == ("repairer", "checker", "judge")


def test_cli_curate_reports_the_checkers_agreement(tmp_path, monkeypatch):
    """As a user runs it: relative paths from the project folder, the response cache on, two checker
    models from kbvqa.toml; the funnel's translate row carries their agreement, the sheet flags the split."""
    project = tmp_path / "project"
    (project / "img").mkdir(parents=True)
    arr = (np.random.default_rng(1).random((8, 8, 3)) * 255).astype(np.uint8)
    Image.fromarray(arr).resize((256, 256), Image.Resampling.NEAREST).save(project / "img" / "tower.png")
    (project / "posts.jsonl").write_text(json.dumps({
        "id": "zh1", "text": "在颐和园拍到的这座塔叫什么名字？有人知道它有多高吗？", "answer": "佛香阁",
        "images": ["img/tower.png"]}, ensure_ascii=False) + "\n", encoding="utf-8")
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    monkeypatch.chdir(project)
    with FakeLLMServer(handler=translator) as a, FakeLLMServer(handler=strict_checker) as b:
        toml = "".join(f"[curate.{k}]\nenabled = false\n" for k in OFF)
        toml += ('[curate.translate]\ncheck_roles = ["checker", "judge"]\n'
                 f'[models.repairer]\nmodel = "model-a"\nbase_url = "{a.base_url}"\nmax_retries = 0\n'
                 f'[models.checker]\nmodel = "model-a"\nbase_url = "{a.base_url}"\nmax_retries = 0\n'
                 f'[models.judge]\nmodel = "model-b"\nbase_url = "{b.base_url}"\nmax_retries = 0\n')
        Path("kbvqa.toml").write_text(toml, encoding="utf-8")
        r = runner.invoke(app, ["curate", "run", "posts.jsonl", "--out", "run", "--config", "kbvqa.toml", "--json"])
        assert r.exit_code == 0, r.output
        calls = (a.count, b.count)
        again = runner.invoke(app, ["curate", "run", "posts.jsonl", "--out", "run2", "--config", "kbvqa.toml", "--json"])
        assert again.exit_code == 0 and (a.count, b.count) == calls  # the second run is served by the cache
    funnel = json.loads(r.stdout.strip().splitlines()[-1])
    row = next(s for s in funnel["stages"] if s["stage"] == "translate")
    assert row["kept"] == 1 and row["agreement"]["split"] == 1
    assert row["agreement"]["pairwise_agreement"]["checker~judge"]["share"] == 0.0
    r = runner.invoke(app, ["curate", "review-export", "run"])
    assert r.exit_code == 0, r.output
    sheet = Path("run/review.csv").read_text(encoding="utf-8")
    assert "1 of 2 checkers found problems" in sheet


def test_a_role_with_two_models_is_two_checkers_and_one_checker_is_a_funnel_warning(tmp_path):
    from kbvqa.pipelines.curate import curate_posts

    with FakeLLMServer(handler=translator) as a, FakeLLMServer(handler=strict_checker) as b:
        ca = OpenAIChatClient(a.base_url, "model-a", max_retries=0)
        cb = OpenAIChatClient(b.base_url, "model-b", max_retries=0)
        line = run_translate(TranslateConfig(), {"repairer": ca, "checker": [ca, cb]}, tmp_path)  # the default roles
        assert (a.count, b.count) == (2, 1)  # the translation, then one check by each of the two models
        posts = tmp_path / "posts.jsonl"
        post = {"id": "zh1", "text": "在颐和园拍到的这座塔叫什么名字？有人知道它有多高吗？", "answer": "佛香阁"}
        posts.write_text(json.dumps(post, ensure_ascii=False) + "\n", encoding="utf-8")
        config = CurateConfig.model_validate({k: {"enabled": False} for k in (*OFF, "images")})
        runs = {n: curate_posts(posts, tmp_path / n, config=config, roles=roles)
                for n, roles in (("one", {"repairer": ca, "checker": ca}),
                                 ("two", {"repairer": ca, "checker": [ca, cb]}))}
    tr = line["curate"]["translate"]
    assert [(c["role"], c["model"]) for c in tr["checks"]] == [("checker#1", "model-a"), ("checker#2", "model-b")]
    assert tr["agreement"]["checkers"] == 2 and tr["agreement"]["distinct_models"] == 2
    rows = {n: next(s for s in r.stages if s["stage"] == "translate") for n, r in runs.items()}
    assert rows["one"]["kept"] == 1 and rows["one"]["checkers"]["models"] == 1
    assert "one model" in rows["one"]["checkers"]["warning"]
    assert any("cross-checked by one model" in w for w in runs["one"].warnings)
    assert rows["two"]["checkers"] == {"roles": ["checker"], "models": 2}
    assert not any("one model" in w for w in runs["two"].warnings)
    assert json.loads((tmp_path / "one" / "funnel.json").read_text())["warnings"] == runs["one"].warnings
