"""The run viewer (`kbvqa view`): discovery by manifests, lazy paging, escaping, image containment,
every kind's record page on the demo's run, filters, search, permalinks and the static export."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the viewer needs the `view` extra (starlette, uvicorn, jinja2)")

from starlette.testclient import TestClient

from kbvqa.cli.view import build_site
from kbvqa.report.viewer import discover, export_site
from kbvqa.report.viewer.app import create_app
from kbvqa.report.viewer.images import ImageLinks, ImageRefused
from kbvqa.report.viewer.index import RecordIndex
from kbvqa.report.viewer.site import LiveLinks, rid_slug
from kbvqa.report.viewer.views import audit_facets

SCRIPT = "<script>document.title='pwned'</script>"


def write_output(folder: Path, name: str, records: list[dict], stages: list[str], run_config: dict | None = None) -> Path:
    """A runner-shaped output: NAME.jsonl and NAME.manifest.json naming its stages."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{name}.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (folder / f"{name}.manifest.json").write_text(json.dumps({
        "description": name, "state": "finished", "stages": [{"name": s} for s in stages],
        "run_config": run_config or {}, "roles": {"verifier": {"backend": "openai", "model": "m-1"}}}))
    return out


def audit_record(i: int, question: str = "Which city?", action: str = "keep", tags: tuple = ()) -> dict:
    return {"id": f"s{i:05d}", "question": question, "answers": ["Paris"], "question_type": "String",
            "dataset": "synthetic", "images": [], "entity": {"url": "https://en.wikipedia.org/wiki/Paris"},
            "audit": {"question_before": question, "answers_before": ["paris"], "action": action, "tags": list(tags),
                      "answer_support": "supported",
                      "stages": {"verify": {"label": "entailed", "rationale": "states 'Paris'", "backend": "openai",
                                            "model": "m-1", "verifiers": []}}},
            "status": "ok", "reason": "", "attempts": 1}


def client_for(*dirs: Path, **kw) -> TestClient:
    return TestClient(create_app(build_site(list(dirs), **kw), warm=False), follow_redirects=False)


@pytest.fixture(scope="module")
def demo(tmp_path_factory, demo_copy) -> Path:
    return demo_copy(tmp_path_factory.mktemp("view") / "demo")[0]


@pytest.fixture(scope="module")
def demo_client(demo) -> TestClient:
    return client_for(demo)


# ------------------------------------------------------------------------------------------ discovery

def test_discovery_finds_every_demo_output_by_its_manifest(demo):
    cat = discover([demo])
    kinds = {o.rel: o.kind for o in cat.outputs}
    assert kinds["audit/audited.jsonl"] == "audit"
    assert kinds["agent/predictions.jsonl"] == "agent"
    assert kinds["answers/predictions_original.jsonl"] == "predictions"
    assert kinds["augment/manifest.jsonl"] == "augmentation"
    assert kinds["augment/retrieval.run.jsonl"] == "retrieval"
    assert kinds["interleaved/agent.ivr12.jsonl"] == "ivr12"
    audit = next(o for o in cat.outputs if o.rel == "audit/audited.jsonl")
    assert audit.summary["action"]["drop"] > 0 and audit.manifest["description"] == "audit"
    agent = next(o for o in cat.outputs if o.kind == "agent")
    assert agent.related["samples"].name == "community.jsonl"  # from the IVR-12 run that names the predictions
    aug = next(o for o in cat.outputs if o.kind == "augmentation")
    assert aug.summary is not None and {"samples", "records"} <= set(aug.related)
    # nothing dropped: every JSONL file in the run is listed, except the augmentation manifest's sidecar
    listed = {o.path.resolve() for o in cat.outputs}
    every = {p.resolve() for p in demo.rglob("*.jsonl") if ".cassette" not in str(p) and ".artifacts" not in str(p)}
    assert every <= listed
    assert cat.problems == []


def test_discovery_reports_problems_and_kinds_without_manifests(tmp_path):
    write_output(tmp_path, "judged", [{"id": "a", "question": "q", "target": "t", "prediction": "p",
                                       "verdict": {"label": "correct", "rationale": "same"}, "status": "ok"}],
                 ["simpleqa-judge"])
    (tmp_path / "orphan.manifest.json").write_text("{}")
    (tmp_path / "broken.manifest.json").write_text("{not json")
    (tmp_path / "broken.jsonl").write_text('{"id": "x"}\n')
    (tmp_path / "preds.jsonl").write_text(json.dumps({"id": "a", "sample_id": "a", "answer": "p"}) + "\n")
    (tmp_path / "preds.strict.jsonl").write_text(json.dumps({"data_id": "a", "correct": True}) + "\n")
    cat = discover([tmp_path, tmp_path / "missing"])
    kinds = {o.rel: o.kind for o in cat.outputs}
    assert kinds == {"judged.jsonl": "judge", "broken.jsonl": "records", "preds.jsonl": "predictions",
                     "preds.strict.jsonl": "scores"}
    preds = next(o for o in cat.outputs if o.rel == "preds.jsonl")
    assert [p.name for p in preds.scores] == ["preds.strict.jsonl"]
    problems = "\n".join(cat.problems)
    assert "orphan.manifest.json: manifest without its output" in problems
    assert "broken.manifest.json: unreadable" in problems
    assert "missing: no such folder" in problems


# ------------------------------------------------------------------------------------------ the index

def test_index_keeps_the_last_line_per_id_lists_corrupt_lines_and_skips_a_truncated_tail(tmp_path):
    p = tmp_path / "out.jsonl"
    p.write_bytes(b'{"id": "a", "v": 1}\n{"id": "b", "v": 1}\nnot json\n\n{"id": "a", "v": 2}\n["list"]\n{"id": "c", "v"')
    idx = RecordIndex(p).start()
    assert idx.wait(None, timeout=10) and idx.complete
    entries = idx.entries()
    assert [e.rid for e in entries] == ["a", "b", "#3", "#6"]
    assert idx.read(entries[0])["v"] == 2  # last line wins, first-seen position
    assert entries[2].status == "corrupt" and "not valid JSON" in idx.read(entries[2])["reason"]
    assert idx.truncated_tail > 0 and idx.find("c") is None


def test_index_pages_lazily_and_filters_by_facets(tmp_path):
    recs = [audit_record(i, action="drop" if i % 10 == 0 else "keep", tags=("t1",) if i % 2 else ()) for i in range(5000)]
    p = write_output(tmp_path, "audited", recs, ["verify"])
    idx = RecordIndex(p, audit_facets).start()
    page = idx.page(50, 50)
    assert [e.rid for e in page] == [f"s{i:05d}" for i in range(50, 100)]
    assert len(idx.filtered({"action": "drop"})) == 500
    assert len(idx.filtered({"action": "keep", "tag": "t1"})) == 2500
    assert idx.facet_counts()["action"] == {"keep": 4500, "drop": 500}
    idx.recheck_s = 0  # (a live page looks at the file again at most once a second)
    with open(p, "a") as f:  # a run still writing: the index is rebuilt from the changed file
        f.write(json.dumps(audit_record(5000)) + "\n")
    assert idx.find("s05000") is not None and len(idx) == 5001


def test_a_single_jsonl_file_can_be_viewed_and_corrupt_lines_are_listed(tmp_path):
    write_output(tmp_path, "audited", [audit_record(1), audit_record(2)], ["verify"])
    with open(tmp_path / "audited.jsonl", "a") as f:
        f.write("{broken\n")
    write_output(tmp_path, "other", [audit_record(3)], ["verify"])
    cat = discover([tmp_path / "audited.jsonl"])
    assert [o.rel for o in cat.outputs] == ["audited.jsonl"]
    c = client_for(tmp_path / "audited.jsonl")
    listing = c.get("/o/audited/").text
    assert "s00001" in listing and "#3" in listing and "not valid JSON" in listing
    assert "not valid JSON" in c.get("/o/audited/r/%233").text


def test_list_page_paginates_and_counts(tmp_path):
    write_output(tmp_path, "audited", [audit_record(i) for i in range(120)], ["verify"])
    c = client_for(tmp_path)
    r = c.get("/o/audited/?page=3")
    assert r.status_code == 200
    assert "s00100" in r.text and "s00119" in r.text and "s00099" not in r.text
    assert "page 3 of 3" in r.text
    assert c.get("/o/audited/").text.count('class="rid"') == 50


# ------------------------------------------------------------------------------------------ escaping

def test_injected_script_in_a_question_and_a_model_answer_is_shown_as_text(tmp_path):
    write_output(tmp_path / "audit", "audited", [audit_record(1, question=f"Which city? {SCRIPT}")], ["verify"])
    agent = {"id": "e1", "sample_id": "e1", "answer": f"It is {SCRIPT} <img src=x onerror=alert(1)>",
             "short_answer": SCRIPT, "trajectory": [{"turn": 1, "thought": SCRIPT, "tool": "search",
                                                     "arguments": {"query": SCRIPT}, "status": "ok",
                                                     "observation": SCRIPT}],
             "meta": {"termination": "answer", "question": SCRIPT, "provenance": {"tags": 0, "valid": 0,
                                                                                 "violations": []}},
             "status": "ok"}
    write_output(tmp_path / "agent", "predictions", [agent], ["agent"])
    c = client_for(tmp_path)
    for url in ("/o/audit-audited/", "/o/audit-audited/r/s00001", "/o/agent-predictions/", "/o/agent-predictions/r/e1"):
        body = c.get(url).text
        assert "<script>document" not in body and "<img src=x" not in body, url
        assert "&lt;script&gt;document.title=" in body or "&lt;script&gt;document.title=&#39;" in body, url
    r = c.get("/o/agent-predictions/r/e1")
    assert "script-src 'self'" in r.headers["content-security-policy"]
    out = tmp_path / "site"
    export_site(build_site([tmp_path]), out)
    for page in out.rglob("*.html"):
        assert "<script>document" not in page.read_text(encoding="utf-8"), page


# ------------------------------------------------------------------------------------------ images

def test_image_route_serves_only_images_inside_the_allowed_roots(tmp_path):
    from PIL import Image

    run = tmp_path / "run"
    (run / "images").mkdir(parents=True)
    Image.new("RGB", (8, 8), "red").save(run / "images" / "a.jpg")
    (run / "notes.txt").write_text("not an image")
    secret = tmp_path / "secret.jpg"
    Image.new("RGB", (8, 8), "blue").save(secret)
    os.symlink(secret, run / "images" / "link.jpg")
    write_output(run, "audited", [{**audit_record(1), "images": ["images/a.jpg", str(secret), "../secret.jpg"]}],
                 ["verify"])
    c = client_for(run)
    ok = c.get("/img/0/images/a.jpg")
    assert ok.status_code == 200 and ok.headers["content-type"] == "image/jpeg"
    refused = ["/img/0/%2e%2e/secret.jpg", "/img/0/..%2Fsecret.jpg", "/img/0/%252e%252e/secret.jpg",
               "/img/0//" + str(secret).lstrip("/"), "/img/0/%2F" + str(secret).lstrip("/"),
               "/img/0/images/link.jpg", "/img/0/notes.txt", "/img/0/images/%2e%2e/%2e%2e/secret.jpg"]
    for url in refused:
        assert c.get(url).status_code == 403, url
    assert c.get("/img/7/images/a.jpg").status_code == 403
    assert c.get("/img/0/images/none.jpg").status_code == 404
    links = ImageLinks([run])
    for rel in ("../secret.jpg", str(secret), "/etc/passwd", "images/../../secret.jpg", "%2e%2e/secret.jpg"):
        with pytest.raises(ImageRefused):
            links.serve(0, rel)
    # a record naming files outside the roots gets no link, with the reason shown on its page
    assert links.link(str(secret)).url is None and "outside" in links.link(str(secret)).problem
    assert links.link("../secret.jpg", (run,)).url is None
    page = c.get("/o/audited/r/s00001").text
    assert "/img/0/images/a.jpg" in page and "image not shown" in page and "secret.jpg" in page
    # an extra --images root makes the outside file servable, through its own root number
    c2 = client_for(run, images=[tmp_path])
    assert 'src="/img/1/secret.jpg"' in c2.get("/o/audited/r/s00001").text
    assert c2.get("/img/1/secret.jpg").status_code == 200


# ------------------------------------------------------------------------------------------ the demo's views

def test_every_record_page_of_the_demo_renders_in_its_view(demo, demo_client):
    site = build_site([demo])
    for o in site.catalog.outputs:
        r = demo_client.get(f"/o/{o.oid}/")
        assert r.status_code == 200, o.rel
        if o.kind == "summary":
            continue
        for e in site.index(o).entries()[:3]:
            page = demo_client.get(LiveLinks().record(o.oid, e.rid))
            assert page.status_code == 200 and "could not be shown" not in page.text, (o.rel, e.rid)


def test_curation_stage_images_are_found_from_the_recorded_posts_root(demo, demo_client):
    """A curation stage's records name the posts' images relative to the posts folder, recorded in its
    manifest (`run_config.image_root`): the viewer finds them (they were "image not found")."""
    page = demo_client.get("/o/curate-stages-03-images/r/p01").text
    assert "image not found" not in page and page.count("<img") >= 1


def audited(demo: Path) -> list[dict]:
    return [json.loads(line) for line in (demo / "audit" / "audited.jsonl").read_text().splitlines()]


def test_audit_view_diffs_before_after_highlights_evidence_and_charts_the_summary(demo, demo_client):
    page = demo_client.get("/o/audit-audited/r/demo_013").text
    assert '<mark class="del">45</mark>' in page and '<mark class="ins">41</mark>' in page
    assert '<mark class="hit">41 metres</mark>' in page  # the matched span in the KB section
    assert "states &#39;41 metres&#39; for the same quantity" in page and "backend rules" in page
    listing = demo_client.get("/o/audit-audited/").text
    recs = audited(demo)
    keep = sum(r["audit"]["action"] == "keep" for r in recs)
    drops = [r["id"] for r in recs if r["audit"]["action"] == "drop"]
    assert "<svg" in listing and "answer support" in listing and f">{keep}</text>" in listing
    dropped = demo_client.get("/o/audit-audited/?action=drop").text
    assert f"{len(drops)} matching record(s)" in dropped and all(f">{d}</a>" in dropped for d in drops)
    assert not any(f">{r['id']}</a>" in dropped for r in recs if r["id"] not in drops)
    leaks = sum("answer_leak" in r["audit"]["tags"] and r["question_type"] == "String" for r in recs)
    assert f"{leaks} matching" in demo_client.get("/o/audit-audited/?tag=answer_leak&qtype=String").text


def test_agent_episode_shows_interleaved_answer_provenance_reference_and_trajectory(demo_client):
    page = demo_client.get("/o/agent-predictions/r/community_000").text
    assert "<figure><img src='/img/0/" in page and "unresolved image tag" not in page  # the tag's image in place
    assert "1 valid of 1" in page and "This is Eileen Collins" in page  # the reference beside it
    assert "turn 1" in page and "image_search" in page and "<details class=\"observation\">" in page
    assert "termination <span class=\"badge termination\">answer</span>" in page


def test_predictions_ivr12_and_augmentation_views(demo, demo_client):
    pred = demo_client.get("/o/answers-predictions-original/r/demo_000").text
    assert 'class="gold"' in pred and "gold at rank 1" in pred and "Elmira" in pred
    aug = demo_client.get("/o/augment-manifest/").text
    assert "Recall@K per augmentation variant" in aug and "intra <tspan class=\"n\">(n=" in aug
    rec = demo_client.get("/o/augment-manifest/r/demo_032").text
    assert "distractor <b>Falcon 9</b>" in rec and "anchor side" in rec and "/img/0/augment/composites/" in rec


def test_ivr12_shows_scores_rationales_and_n_a_as_n_a(tmp_path):
    dims = {"accuracy": {"group": "content", "label": "judge", "score": 4, "gated": 4, "rationale": "one date is off"},
            "clarity": {"group": "presentation", "label": "n/a", "score": None, "na": "needs_judge", "gated": None}}
    rec = {"id": "q1", "question": "Who?", "text": "She is X.\n[Image 1]", "embedded": [{"n": 1, "image": "none.jpg"}],
           "ivr12": {"mode": "judge", "dimensions": dims, "gates": {"tags_resolve": {"label": "rules", "pass": None,
                                                                                      "reason": "n/a"}},
                     "mean": 4.0, "gated_mean": None}, "status": "ok"}
    write_output(tmp_path, "agent.ivr12", [rec], ["ivr12"])
    (tmp_path / "agent.ivr12.summary.json").write_text(json.dumps({"kind": "ivr12", "scorer": "ivr12 (judge)", "dimensions": {
        "clarity": {"group": "presentation", "title": "Clarity", "label": "n/a", "mean": None, "n": 0, "gated_mean": None,
                    "n_na": {"needs_judge": 1}}}}))
    c = client_for(tmp_path)
    page = c.get("/o/agent-ivr12/r/q1").text
    assert "one date is off" in page and "n/a: needs_judge" in page and ">n/a</td>" in page
    assert "gated mean <b>n/a</b>" in page and "image not shown" in page
    listing = c.get("/o/agent-ivr12/").text
    assert "Clarity" in listing and "<td>n/a</td>" in listing


def test_scorer_verdicts_and_judge_runs_attach_to_predictions(tmp_path):
    write_output(tmp_path, "preds", [{"id": "a", "sample_id": "a", "answer": "Paris", "status": "ok"}],
                 ["answer-extractive"], {"samples": str(tmp_path / "samples.jsonl")})
    (tmp_path / "samples.jsonl").write_text(json.dumps({"id": "a", "question": "Capital?", "answers": ["Paris"]}) + "\n")
    (tmp_path / "preds.strict.jsonl").write_text(json.dumps({"data_id": "a", "correct": True}) + "\n")
    write_output(tmp_path, "preds.judge", [{"id": "a", "question": "Capital?", "target": "Paris", "prediction": "Paris",
                                            "verdict": {"sample_id": "a", "metric": "simpleqa", "label": "correct",
                                                        "rationale": "same city", "judge": {"backend": "openai",
                                                                                            "model": "judge-1"}},
                                            "status": "ok"}],
                 ["simpleqa-judge"], {"predictions": str(tmp_path / "preds.jsonl")})
    c = client_for(tmp_path)
    page = c.get("/o/preds/r/a").text
    assert "preds.strict.jsonl" in page and "same city" in page and "judge-1" in page
    judge = c.get("/o/preds-judge/r/a").text
    assert "same city" in judge and 'href="/o/preds/r/a"' in judge
    assert "correct" in c.get("/o/preds-judge/").text


def test_search_by_id_and_permalinks(demo_client):
    r = demo_client.get("/search?id=community_003")
    assert r.status_code == 200 and "agent/predictions.jsonl" in r.text  # several outputs hold it
    r = demo_client.get("/o/agent-predictions/?q=community_003")
    assert r.status_code == 303 and r.headers["location"] == "/o/agent-predictions/r/community_003"
    r = demo_client.get("/o/agent-predictions/?q=_01")
    assert "community_010" in r.text and "community_001" not in r.text
    assert demo_client.get("/o/agent-predictions/r/nope").status_code == 404
    assert demo_client.get("/o/nope/").status_code == 404


def test_export_writes_the_same_views_as_a_static_site(demo, tmp_path):
    from typer.testing import CliRunner

    from kbvqa.cli.app import app

    out = tmp_path / "site"
    res = CliRunner().invoke(app, ["view", str(demo), "--export", str(out)])
    assert res.exit_code == 0, res.output
    rec = out / "o" / "audit-audited" / "r" / f"{rid_slug('demo_013')}.html"
    text = rec.read_text(encoding="utf-8")
    assert '<mark class="hit">41 metres</mark>' in text and 'href="../../../static/viewer.css"' in text
    assert (out / "static" / "viewer.js").is_file() and (out / "index.html").is_file()
    assert list((out / "img").rglob("*.jpg")), "the images the pages show are copied"
    assert 'src="/img' not in text and "http://" not in (out / "index.html").read_text().replace("http://www.w3", "")
    drop = next((out / "o" / "audit-audited" / "f").glob("action-*/drop-*/page-1.html"))
    n_drop = sum(r["audit"]["action"] == "drop" for r in audited(demo))
    assert f"{n_drop} matching record(s)" in drop.read_text(encoding="utf-8")
    agent = (out / "o" / "agent-predictions" / "r" / f"{rid_slug('community_000')}.html").read_text(encoding="utf-8")
    img = agent.split("<figure><img src='", 1)[1].split("'", 1)[0]
    assert (rec.parent / img).resolve().is_file()
    # the front page of a static export shows every output's real record count, never "(indexing)"
    home = (out / "index.html").read_text(encoding="utf-8")
    assert "indexing" not in home
    n_audited = len(audited(demo))
    assert re.search(rf'audit/audited\.jsonl.*?<td class="num">{n_audited}</td>', home, re.DOTALL), home[:2000]


def _images_named(obj, key=""):
    """Every image path a record names (fields called image/images/*_image*), as stored."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _images_named(v, k)
    elif isinstance(obj, list):
        for v in obj:
            yield from _images_named(v, key)
    elif isinstance(obj, str) and "image" in key.lower() and obj and "://" not in obj and "\n" not in obj:
        yield obj


def agent_run_elsewhere(bench_copy, tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """The agent as a user runs it: relative paths typed in one folder (cache on), the KB's images in a
    folder outside the run folder; returns (the run folder, another working directory)."""
    from typer.testing import CliRunner

    from kbvqa.cli.app import app
    from kbvqa.demo.bench import build_community

    b = bench_copy(tmp_path / "bench")
    build_community(b)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    cli = CliRunner()
    res = cli.invoke(app, ["index", "images", "--kb", "bench/kb.sqlite", "--images", "bench", "--out", "idx/images"])
    assert res.exit_code == 0, res.output
    res = cli.invoke(app, ["answer", "--pipeline", "agent", "--samples", "bench/community.jsonl", "--kb",
                           "bench/kb.sqlite", "--index", "idx/images", "--kb-images", "bench", "--today", "2026-12-01",
                           "--out", "runs/agent.jsonl", "--limit", "3"])
    assert res.exit_code == 0, res.output
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return tmp_path / "runs", elsewhere


def test_every_image_an_agent_run_names_is_found_from_another_folder(bench_copy, tmp_path, monkeypatch):
    """Outputs that move with their folder (issue 25 item 1): each image the agent's records name is
    relative to the output's folder, or absolute under the KB image root its manifest records; the
    viewer, started elsewhere on the run folder alone, links every one of them."""
    runs, _ = agent_run_elsewhere(bench_copy, tmp_path, monkeypatch)
    manifest = json.loads((runs / "agent.manifest.json").read_text())
    root = Path(manifest["run_config"]["kb_images"])
    assert root.is_absolute() and root == (tmp_path / "bench").resolve()
    assert Path(manifest["run_config"]["samples"]).is_absolute()  # the episode's reference, from anywhere
    site = build_site([Path("../runs")])
    assert root in site.catalog.image_roots  # recorded in the manifest, so served; listed on the front page
    named = 0
    for line in (runs / "agent.jsonl").read_text().splitlines():
        rec = json.loads(line)
        for ref in _images_named(rec):
            p = Path(ref)
            assert (p.is_absolute() and p.resolve().is_relative_to(root)) or (runs / p).is_file(), ref
            link = site.images.link(ref, (runs,))
            assert link.url, (ref, link.problem)
            named += 1
        traj = [i["image"] for t in rec["trajectory"] for i in t.get("items") or [] if i.get("image")]
        assert traj and all(site.images.link(x, (runs,)).url for x in traj)
    assert named > 10
