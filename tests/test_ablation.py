"""Image ablation of interleaved references (seed 001 §4.3): the three renderings, the cluster
bootstrap on hand-checkable data, and the whole study through the CLI against a scripted
OpenAI-compatible server on 127.0.0.1 (generator, reader and judge), with resume."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.data.errors import DataError
from kbvqa.evaluate import studies as st
from kbvqa.evaluate.ablation import (GENERATE_PROBES, READ_PASSAGE, PassageReader, interleaved_messages,
                                     reference_tags, render_passage)
from kbvqa.models.images import image_part
from kbvqa.pipelines.ablation import load_ablation_references
from kbvqa.report.summaries import image_ablation_tables, study_table
from kbvqa.runner import Context

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply  # noqa: E402

runner = CliRunner()

TAG = '<image>{{"candidate_images": {}}}</image>'


# ------------------------------------------------------------------------------------------ renderings


def _image(path: Path, colour: tuple[int, int, int]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 24), colour).save(path)
    return f"images/{path.name}"


def test_prompts_are_pinned():
    assert (GENERATE_PROBES.id, GENERATE_PROBES.sha256[:12]) == ("ablation.generate_probes@1", "225e7feaaf1f")
    assert (READ_PASSAGE.id, READ_PASSAGE.sha256[:12]) == ("ablation.read_passage@1", "16a6d206e67a")


def test_three_renderings_of_one_reference(tmp_path):
    red, blue = _image(tmp_path / "images/red.png", (255, 0, 0)), _image(tmp_path / "images/blue.png", (0, 0, 255))
    text = f"Intro.\n{TAG.format(2)}\nMiddle {TAG.format(1)} end. Again {TAG.format(2)}"
    assert render_passage(text, "text") == ("Intro.\n\nMiddle end. Again", [])
    # placeholders number the distinct images in order of first appearance (candidate 2 comes first)
    assert render_passage(text, "placeholder") == ("Intro.\n[image 1]\nMiddle [image 2] end. Again [image 1]", [])
    full, shown = render_passage(text, "full")
    assert shown == [2, 1, 2] and "<image>" not in full

    record = {"id": "r", "condition": "full", "question": "Which colour?", "reference": {"text": text,
                                                                                        "images": [red, blue]}}
    ctx = Context(resources={"image_root": tmp_path})
    msgs = {c: PassageReader().messages({**record, "condition": c}, ctx) for c in ("text", "placeholder", "full")}
    sys_msg = msgs["text"][0]
    assert all(m[0] == sys_msg for m in msgs.values())  # same instructions in every condition
    assert msgs["text"][1]["content"] == 'Passage:\nIntro.\n\nMiddle end. Again\n\nQuestion: "Which colour?"'
    assert "[image 2]" in msgs["placeholder"][1]["content"] and isinstance(msgs["placeholder"][1]["content"], str)
    parts = msgs["full"][1]["content"]
    b, r = image_part(tmp_path / "images/blue.png"), image_part(tmp_path / "images/red.png")
    assert parts == [{"type": "text", "text": "Passage:\nIntro.\n"}, b, {"type": "text", "text": "\nMiddle "}, r,
                     {"type": "text", "text": " end. Again "}, b,
                     {"type": "text", "text": '\n\nQuestion: "Which colour?"'}]


def test_tags_are_checked():
    assert [t.index for t in reference_tags(f"a {TAG.format(1)} b {TAG.format(3)}", 3)] == [1, 3]
    for bad in ('<image>{"candidate_images": 0}</image>', '<image>{"idx": 1}</image>', "<image>1</image>",
                '<image>{"candidate_images": 1}', '<image>{"candidate_images": true}</image>'):
        with pytest.raises(ValueError):
            reference_tags(bad, 3)
    with pytest.raises(ValueError, match="cites image 2 but the reference has 1"):
        reference_tags(TAG.format(2), 1)
    with pytest.raises(ValueError, match="2 image slots"):
        interleaved_messages(READ_PASSAGE, ["x.png"], passage_raw=render_passage(TAG.format(1) * 2, "full")[0],
                             question="q")


# ------------------------------------------------------------------------------------------ statistics


def test_cluster_bootstrap_hand_checkable():
    # identical clusters: every resample is the same mixture, the interval has zero width
    ci = st.cluster_bootstrap_ci([1, 0] * 6, [c for c in "abcdef" for _ in range(2)], seed=0)
    assert (ci.estimate, ci.low, ci.high) == (0.5, 0.5, 0.5)
    # two clusters, A = 3 correct probes, B = 1 wrong: resamples AA 1.0 (p 1/4), AB 0.75 (1/2), BB 0.0 (1/4)
    ci = st.cluster_bootstrap_ci([1, 1, 1, 0], ["A", "A", "A", "B"], seed=0)
    assert (ci.estimate, ci.low, ci.high) == (0.75, 0.0, 1.0)
    # a plain bootstrap over the 4 probes never reaches 0 that often: it treats them as independent
    assert st.bootstrap_ci([1, 1, 1, 0], seed=0).low == 0.25
    # six reference items, 20 probes: 12/20 = 0.6; seed 0 gives [0.300, 0.889] (0.889 = 16/18, e.g. r0 r0
    # r3 r3 r5 r1 drawn); 200,000 index resamples put the 2.5% / 97.5% points at 0.292 and 0.889
    items = {"r0": [1, 1, 1, 1], "r1": [1, 1, 0, 0], "r2": [0, 0, 0, 0], "r3": [1, 1, 1, 0], "r4": [1, 0],
             "r5": [1, 1]}
    vals = [v for k in items for v in items[k]]
    cl = [k for k in items for _ in items[k]]
    a = st.cluster_bootstrap_ci(vals, cl, seed=0)
    assert (round(a.estimate, 3), round(a.low, 3), round(a.high, 3)) == (0.6, 0.3, 0.889)
    assert a == st.cluster_bootstrap_ci(vals, cl, seed=0) and a != st.cluster_bootstrap_ci(vals, cl, seed=1)
    # the plain bootstrap over the 20 probes is narrower: it takes nested probes as independent
    plain = st.bootstrap_ci(vals, seed=0)
    assert (plain.low, plain.high) == (0.4, 0.8)
    # paired: the per-probe differences full - text, still resampled by item; with full always right
    # the difference is 1 - accuracy, so its interval mirrors the one above
    d = st.cluster_bootstrap_ci(np.ones(20) - np.array(vals), cl, seed=0)
    assert round(d.estimate, 3) == 0.4 and abs(d.low - (1 - a.high)) < 0.02 and abs(d.high - (1 - a.low)) < 0.02


def test_cluster_bootstrap_matches_index_resampling_and_is_wider_than_plain():
    rng = np.random.default_rng(3)
    # 30 items of 4 probes each, probes within an item strongly correlated (all right or all wrong, mostly)
    item_p = rng.random(30) < 0.6
    vals = np.repeat(item_p, 4).astype(float)
    flip = rng.random(120) < 0.1
    vals[flip] = 1 - vals[flip]
    clusters = np.repeat([f"i{k}" for k in range(30)], 4)
    fast = st.cluster_bootstrap_ci(vals, list(clusters), seed=0, n_resamples=4000)
    # naive: draw 30 item indices with replacement, pool their probes
    r = np.random.default_rng(99)
    sums, sizes = vals.reshape(30, 4).sum(1), np.full(30, 4.0)
    idx = r.integers(0, 30, size=(4000, 30))
    naive = np.quantile(sums[idx].sum(1) / sizes[idx].sum(1), [0.025, 0.975])
    assert abs(fast.low - naive[0]) < 0.03 and abs(fast.high - naive[1]) < 0.03
    plain = st.bootstrap_ci(vals, seed=0, n_resamples=4000)
    assert (fast.high - fast.low) > 1.4 * (plain.high - plain.low)
    with pytest.raises(ValueError, match="3 values but 2 cluster labels"):
        st.cluster_bootstrap_ci([1, 0, 1], ["a", "b"])
    assert np.isnan(st.cluster_bootstrap_ci([], []).estimate)


# ------------------------------------------------------------------------------------------ the study


INTENTS = {"r1": "Identification", "r2": "Identification", "r3": "Explanation", "r6": "Explanation",
           "r7": "Advice", "r8": "Advice"}


@pytest.fixture
def refs(tmp_path):
    """Eight NoteVQA-style lines: six with images (r2 with two), one without a reference, one whose
    reference has no tag."""
    d = tmp_path / "data"
    imgs = [_image(d / f"images/{i}.png", (40 * i, 255 - 30 * i, 90)) for i in range(4)]
    rows = []
    for rid, intent in INTENTS.items():
        text = f"Passage of {rid}. It says something.\n{TAG.format(1)}\nMore about {rid}."
        images = [{"path": imgs[int(rid[1]) % 4], "source_url": "https://example.org/x", "sha256": ""}]
        if rid == "r2":
            text += f" And another picture {TAG.format(2)} here."
            images.append({"path": imgs[3]})
        rows.append({"id": rid, "images": [], "question": f"question {rid}", "answer": "a", "intent": intent,
                     "category": "C", "reference": {"text": text, "images": images}})
    rows.append({"id": "r4", "images": [], "question": "q", "answer": "a", "intent": "Advice"})
    rows.append({"id": "r5", "images": [], "question": "q", "answer": "a", "intent": "Advice",
                 "reference": {"text": "Only text here.", "images": []}})
    path = d / "refs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _text(msg: dict) -> str:
    c = msg["content"]
    return c if isinstance(c, str) else "".join(p.get("text", "") for p in c)


def _has_image(msg: dict) -> bool:
    return isinstance(msg["content"], list) and any(p["type"] == "image_url" for p in msg["content"])


class Script:
    """The scripted generator, reader and judge. The reader answers image-critical probes only when
    it sees the images (and r2's first one from its placeholder too), text-answerable ones always,
    except r3's second text probe, which it gets wrong even with the full reference (the positive
    control drops it). `broken` makes the first run's failures."""

    def __init__(self, broken: bool):
        self.broken = broken
        self.calls: list[str] = []

    def probes(self, rid: str) -> str:
        kinds = (("image_critical", "ic"), ("text_answerable", "ta"))
        return json.dumps({"probes": [{"kind": kind, "question": f"Q {rid} {k} {i}?", "answer": f"A-{rid}-{k}-{i}"}
                                      for kind, k in kinds for i in (1, 2)]})

    def __call__(self, req: dict) -> Reply:
        system, user = _text(req["messages"][0]), req["messages"][-1]
        if system.startswith("You write probe questions"):
            rid = re.search(r"Passage of (r\d)", _text(user)).group(1)
            self.calls.append(f"generate {rid}")
            if self.broken and rid == "r6":
                return Reply(content="Here are the probes: " + self.probes(rid))  # prose around JSON
            if self.broken and rid == "r7":
                return Reply(content=self.probes(rid).replace('"text_answerable"', '"visual"'))  # not a kind
            if self.broken and rid == "r8":
                return Reply(status=400, error="context too long")
            return Reply(content=self.probes(rid))
        if system.startswith("You answer one question about a passage"):
            q = re.search(r'Question: "(Q (r\d) (ic|ta) (\d)\?)"', _text(user))
            rid, kind, i = q.group(2), q.group(3), q.group(4)
            cond = "full" if _has_image(user) else "placeholder" if "[image " in _text(user) else "text"
            self.calls.append(f"read {rid} {kind} {i} {cond}")
            if self.broken and (rid, kind, i, cond) == ("r1", "ic", "1", "text"):
                return Reply(status=400, error="bad request")
            if (rid, kind, i) == ("r3", "ta", "2"):
                return Reply(content="Something else")
            if kind == "ta" or cond == "full" or (rid, kind, i, cond) == ("r2", "ic", "1", "placeholder"):
                return Reply(content=f"A-{rid}-{kind}-{i}")
            return Reply(content="I cannot tell from the passage.")
        # the judge: text only
        assert not _has_image(user)
        text = _text(user)
        gold = re.search(r"Gold answer: (.*)", text).group(1)
        pred = re.search(r"Answer to grade: (.*)", text).group(1)
        self.calls.append(f"judge {gold} {pred}")
        if self.broken and gold == "A-r2-ta-1":
            return Reply(content="correct")  # not the JSON contract: invalid
        label = "correct" if pred == gold else "not_attempted" if "cannot tell" in pred else "incorrect"
        return Reply(content=json.dumps({"label": label, "rationale": "scripted"}))


@pytest.fixture
def srv():
    """One scripted server for a test's runs (handlers swapped per run)."""
    with FakeLLMServer() as server:
        yield server


def _study(refs: Path, out: Path, script: Script, *extra: str, srv: FakeLLMServer | None = None):
    """One study run against `script`, on `srv` when given (a resumed run talks to the same server: its URL
    is part of the run's settings), else on a server of its own."""
    if srv is None:
        with FakeLLMServer(handler=script) as own:
            return _study(refs, out, script, *extra, srv=own)
    srv.handler = script
    res = runner.invoke(app, ["study", "image-ablation", "-r", str(refs), "--out", str(out), "--llm",
                              srv.base_url, "--model", "m", "--json", "--resamples", "500", *extra])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _acc(res: dict, kind: str, cond: str) -> float | None:
    ci = res["by_kind"][kind][cond]["ci"]
    return None if ci is None else ci["estimate"]


def test_whole_study_counts_accuracy_and_resume(refs, tmp_path, srv):
    out = tmp_path / "study"
    first = Script(broken=True)
    res = _study(refs, out, first, srv=srv)
    c = res["counts"]
    assert c["references"] == {"rows": 8, "with_reference": 7, "with_images": 6, "without_images": 1}
    assert c["generation"] == {"ok": 3, "invalid": 2, "error": 1}
    reasons = {f["id"]: (f["status"], f["reason"]) for f in res["generation_failures"]}
    assert reasons["r6"][0] == "invalid" and "not exactly one JSON value" in reasons["r6"][1]
    assert reasons["r7"][0] == "invalid" and "probes.2.kind" in reasons["r7"][1]
    assert reasons["r8"][0] == "error" and "HTTP 400" in reasons["r8"][1]
    ic, ta = c["probes"]["image_critical"], c["probes"]["text_answerable"]
    assert ic == {"planned": 12, "generated": 6, "not_generated": 6, "failed_control": 0, "control_not_graded": 0,
                  "control_ungraded_by_outcome": {}, "kept": 6, "complete": 5, "incomplete": 1}
    # r3 ta 2 fails the control; r2 ta 1's control verdict was invalid: counted apart, not as a failure
    assert ta == {"planned": 12, "generated": 6, "not_generated": 6, "failed_control": 1, "control_not_graded": 1,
                  "control_ungraded_by_outcome": {"judge_invalid": 1}, "kept": 4, "complete": 4, "incomplete": 0}
    assert res["ungraded_by_condition"] == {"text": {"reader_error": 1}, "placeholder": {}, "full": {}}
    # image-critical: 5 complete probes (r1 ic 1 errored in the text condition, so it is out of all three)
    assert (_acc(res, "image_critical", "text"), _acc(res, "image_critical", "placeholder"),
            _acc(res, "image_critical", "full")) == (0.0, 20.0, 100.0)
    assert all(_acc(res, "text_answerable", c) == 100.0 for c in ("text", "placeholder", "full"))
    d = res["by_kind"]["image_critical"]["full-text"]
    assert d["ci"] == {"estimate": 100.0, "low": 100.0, "high": 100.0} and (d["gained"], d["lost"]) == (5, 0)
    assert res["by_kind"]["image_critical"]["placeholder-text"]["ci"]["estimate"] == 20.0
    assert res["by_kind"]["text_answerable"]["full-text"]["ci"] == {"estimate": 0.0, "low": 0.0, "high": 0.0}
    assert res["by_kind"]["image_critical"]["n_references"] == 3
    intents = {(r["intent"], r["kind"]): r for r in res["by_intent"]}
    assert set(intents) == {("Identification", "image_critical"), ("Identification", "text_answerable"),
                            ("Explanation", "image_critical"), ("Explanation", "text_answerable")}
    assert intents[("Identification", "image_critical")]["n"] == 3  # r1 ic 2, r2 ic 1, r2 ic 2
    assert intents[("Identification", "image_critical")]["placeholder"]["ci"]["estimate"] == pytest.approx(33.3333)
    assert res["warnings"][0].startswith("the judge is the reader model")
    # the missing-information analysis (§4.3): text-only replies that say the passage does not give the answer
    mi = res["missing_information"]
    assert mi["measured_by"].startswith("rule (kbvqa's)")
    ic_mi = mi["by_kind"]["image_critical"]
    assert [(ic_mi[c]["n"], ic_mi[c]["reports"]) for c in ("text", "placeholder", "full")] == [(5, 5), (5, 4), (5, 0)]
    assert ic_mi["text"]["ci"] == {"estimate": 100.0, "low": 100.0, "high": 100.0}
    assert all(mi["by_kind"]["text_answerable"][c]["reports"] == 0 for c in ("text", "placeholder", "full"))
    assert mi["corrected_by_full"]["probes"] == 5 and mi["corrected_by_full"]["text_reply_reports_missing"]["reports"] == 5
    mi_intents = {(r["intent"], r["kind"]): r for r in mi["by_intent"]}
    assert mi_intents[("Identification", "image_critical")]["placeholder"]["reports"] == 2  # r2 ic 1 answered
    # one journal and one manifest per step; every generated probe is in probes.jsonl
    for name in ("generate", "control.read", "control.judge", "read", "judge"):
        assert (out / f"{name}.jsonl").is_file() and (out / f"{name}.manifest.json").is_file()
    lines = [json.loads(x) for x in (out / "probes.jsonl").read_text().splitlines()]
    assert len(lines) == 12 and sum(x["kept"] for x in lines) == 10
    assert (out / "image-ablation.study.json").is_file()
    assert sum(x.startswith("generate") for x in first.calls) == 6

    # resume: only what failed (and what it unblocks) is sent again
    second = Script(broken=False)
    res = _study(refs, out, second, srv=srv)
    gen = [x for x in second.calls if x.startswith("generate")]
    assert sorted(gen) == ["generate r6", "generate r7", "generate r8"]
    control_reads = [x for x in second.calls if x.startswith("read") and x.endswith("full")
                     and x.split()[1] in ("r6", "r7", "r8")]
    assert len(control_reads) == 12 * 2  # control + full condition of each new probe
    assert "read r1 ic 1 text" in second.calls and "read r1 ic 1 placeholder" not in second.calls
    assert len(second.calls) == 3 + 12 + 13 + 40 + 40
    c = res["counts"]
    assert c["generation"] == {"ok": 6, "invalid": 0, "error": 0}
    assert c["probes"]["image_critical"]["complete"] == 12 and c["probes"]["text_answerable"]["kept"] == 11
    assert _acc(res, "image_critical", "placeholder") == pytest.approx(100 / 12, abs=1e-3)
    assert [w for w in res["warnings"] if "resume" in w] == []
    # a third run has nothing to do
    third = Script(broken=False)
    _study(refs, out, third, srv=srv)
    assert third.calls == []


def test_tables_and_offline_and_bad_references(refs, tmp_path):
    res = _study(refs, tmp_path / "s", Script(broken=False))
    main, diffs, intents, funnel = image_ablation_tables(res)
    assert study_table(res).as_dicts() == main.as_dicts()
    assert [r[0] for r in main.rows] == ["image_critical", "text_answerable"] and main.rows[0][1:3] == [12, 6]
    assert main.rows[0][3:9] == [0.0, "[0.00, 0.00]", 8.3333, main.rows[0][6], 100.0, "[100.00, 100.00]"]
    assert any("denominators" in n for n in main.notes)
    assert [r[1] for r in diffs.rows[:3]] == ["full - text", "placeholder - text", "full - placeholder"]
    assert {r[0] for r in intents.rows} == {"Identification", "Explanation", "Advice"}
    assert funnel.rows[0] == ["planned", 12, 12] and funnel.rows[-1] == ["complete", 12, 11]

    # no model: a clear message and a non-zero exit, no traceback
    res = runner.invoke(app, ["study", "image-ablation", "-r", str(refs), "--out", str(tmp_path / "o")],
                        env={"KBVQA_MODEL": "", "KBVQA_BASE_URL": ""})
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit)
    assert "needs a generator, a reader and a judge model" in res.output and "--llm URL --model NAME" in res.output

    # a tag past the image list: file, row and field, before any model call
    bad = refs.with_name("bad.jsonl")
    rows = refs.read_text().splitlines()
    obj = json.loads(rows[1])
    obj["reference"]["text"] += " " + TAG.format(5)
    bad.write_text(rows[0] + "\n" + json.dumps(obj) + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.jsonl, row 2, field 'reference.text': .*cites image 5"):
        load_ablation_references(bad)
    script = Script(broken=False)
    with FakeLLMServer(handler=script) as srv:
        res = runner.invoke(app, ["study", "image-ablation", "-r", str(bad), "--out", str(tmp_path / "b"),
                                  "--llm", srv.base_url, "--model", "m"])
    assert res.exit_code == 2 and "row 2" in res.output and script.calls == []


def test_demo_community_set(bench_copy, tmp_path):
    """The demo's 15 NoteVQA-style references (real photographs, one image each) go through the whole
    study; the scripted reader needs the picture for image-critical probes."""
    from kbvqa.demo.bench import build_community

    community = build_community(bench_copy(tmp_path / "bench"))

    def handler(req: dict) -> Reply:
        system, user = _text(req["messages"][0]), req["messages"][-1]
        if system.startswith("You write probe questions"):
            assert _has_image(user)  # the generator reads the reference with its image inline
            n = re.search(r"Passage:\n(.{12})", _text(user)).group(1).replace(" ", "_")
            return Reply(content=Script(False).probes(n))
        if system.startswith("You answer one question"):
            q = re.search(r'Question: "Q (\S+) (ic|ta) (\d)\?"', _text(user))
            ok = q.group(2) == "ta" or _has_image(user)
            return Reply(content=f"A-{q.group(1)}-{q.group(2)}-{q.group(3)}" if ok else "I cannot tell.")
        gold = re.search(r"Gold answer: (.*)", _text(user)).group(1)
        pred = re.search(r"Answer to grade: (.*)", _text(user)).group(1)
        return Reply(content=json.dumps({"label": "correct" if gold == pred else "not_attempted", "rationale": ""}))

    with FakeLLMServer(handler=handler) as srv:
        res = runner.invoke(app, ["study", "image-ablation", "-r", str(community), "--out", str(tmp_path / "abl"),
                                  "--llm", srv.base_url, "--model", "m", "--json"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "abl" / "index.html").is_file()  # report build renders the study
    res = json.loads(res.stdout)
    assert res["counts"]["references"]["with_images"] == 15 and res["counts"]["generation"]["ok"] == 15
    assert {k: v["complete"] for k, v in res["counts"]["probes"].items()} == {"image_critical": 30,
                                                                               "text_answerable": 30}
    assert _acc(res, "image_critical", "text") == 0.0 and _acc(res, "image_critical", "full") == 100.0
    assert len({r["intent"] for r in res["by_intent"]}) == 7


# ------------------------------------------------------------------------------- the full condition


def test_reading_seeds_differ_between_control_and_conditions():
    from kbvqa.evaluate.ablation import reading_seed

    c, k = reading_seed(1, "r1::image_critical::1", "control"), reading_seed(1, "r1::image_critical::1", "conditions")
    assert c != k and k == c + 1 and 0 <= c < 2 ** 31 and 0 <= k < 2 ** 31
    assert c == reading_seed(1, "r1::image_critical::1", "control")  # stable: resume and replay send it again
    assert c != reading_seed(1, "r1::image_critical::2", "control") != reading_seed(2, "r1::image_critical::1",
                                                                                    "control")
    assert reading_seed(None, "p", "control") is None
    with pytest.raises(ValueError, match="unknown reading"):
        reading_seed(1, "p", "full")


class SecondReading:
    """A sampling reader whose second reading of a passage may differ from its first: it answers every
    image-critical probe right with the images the first time (the positive control keeps them all) and,
    reading the same full passage and question again, only probe 1 of each reference but r7. It logs each reader
    request's condition, temperature and seed per question."""

    def __init__(self):
        self.full_reads: dict[str, int] = {}
        self.reads: dict[str, list[tuple[str, float, int | None]]] = {}
        self.calls = 0

    def __call__(self, req: dict) -> Reply:
        self.calls += 1
        system, user = _text(req["messages"][0]), req["messages"][-1]
        if system.startswith("You write probe questions"):
            return Reply(content=Script(False).probes(re.search(r"Passage of (r\d)", _text(user)).group(1)))
        if system.startswith("You answer one question about a passage"):
            q = re.search(r'Question: "(Q (r\d) (ic|ta) (\d)\?)"', _text(user))
            question, rid, kind, i = q.groups()
            cond = "full" if _has_image(user) else "placeholder" if "[image " in _text(user) else "text"
            self.reads.setdefault(question, []).append((cond, req.get("temperature"), req.get("seed")))
            if kind == "ta":
                return Reply(content=f"A-{rid}-{kind}-{i}")
            if cond != "full":
                return Reply(content="I cannot tell from the passage.")
            n = self.full_reads[question] = self.full_reads.get(question, 0) + 1
            right = n == 1 or (i == "1" and rid != "r7")
            return Reply(content=f"A-{rid}-{kind}-{i}" if right else "A different colour")
        gold = re.search(r"Gold answer: (.*)", _text(user)).group(1)
        pred = re.search(r"Answer to grade: (.*)", _text(user)).group(1)
        label = "correct" if pred == gold else "not_attempted" if "cannot tell" in pred else "incorrect"
        return Reply(content=json.dumps({"label": label, "rationale": "scripted"}))


def _journal(path: Path) -> dict[str, dict]:
    return {x["id"]: x for x in map(json.loads, path.read_text().splitlines())}


def test_full_condition_is_a_reading_of_its_own(refs, tmp_path, monkeypatch):
    """With the response cache on (the default), y_full is the second reading's accuracy, not the
    control's again: the control and the full read of a probe send different seeds, so they are two
    requests and two cache keys; a cached re-run and a replayed cassette give the same figures."""
    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    script, again = SecondReading(), SecondReading()

    def study(out: str, *extra: str) -> dict:
        res = runner.invoke(app, ["study", "image-ablation", "-r", str(refs), "--out", str(tmp_path / out), "--llm",
                                  srv.base_url, "--model", "m", "--json", "--resamples", "500", *extra])
        assert res.exit_code == 0, res.output
        return json.loads(res.stdout)

    with FakeLLMServer(handler=script) as srv:  # one server: the cache key holds its URL
        res = study("s")
        srv.handler = again  # the same study into a new folder: every call is answered by the cache
        res2 = study("s2", "--no-resume")
    assert again.calls == 0 and res2["by_kind"] == res["by_kind"]
    assert res["full_condition"]["independent"] is True and "not_independent" not in res["full_condition"]
    assert res["counts"]["probes"]["image_critical"]["kept"] == 12  # every first full reading was right
    full = res["by_kind"]["image_critical"]["full"]
    assert full["correct"] == 5 and full["ci"]["low"] < full["ci"]["estimate"] < full["ci"]["high"]
    assert full["ci"]["estimate"] == pytest.approx(500 / 12, abs=1e-3)  # 5 of 12 second readings
    assert res["by_kind"]["image_critical"]["full-text"]["ci"]["estimate"] == pytest.approx(500 / 12, abs=1e-3)
    assert _acc(res, "text_answerable", "full") == 100.0
    # every image-critical question was read in full twice, with two seeds; the three conditions share one
    for question, reads in script.reads.items():
        fulls = [seed for cond, _, seed in reads if cond == "full"]
        assert len(fulls) == 2 and fulls[0] != fulls[1], question
        assert {seed for cond, _, seed in reads if cond != "full"} == {fulls[1]}
        assert {t for _, t, _ in reads} == {0.7}
    control, read = _journal(tmp_path / "s/control.read.jsonl"), _journal(tmp_path / "s/read.jsonl")
    pid = "r1::image_critical::2"
    assert control[pid]["seed"] == read[f"{pid}@full"]["seed"] - 1 and control[pid]["reading"] == "control"
    assert read[f"{pid}@full"]["sampling"] == {"temperature": 0.7, "seed": read[f"{pid}@full"]["seed"]}
    assert control[pid]["response"] != read[f"{pid}@full"]["response"]

    # a recorded cassette replays the study exactly, the full reads included (the seeds are in the key)
    monkeypatch.setenv("KBVQA_CACHE", "off")

    def config(mode: str, base_url: str = "") -> Path:
        path = tmp_path / f"{mode}.toml"
        path.write_text("".join(f'[models.{role}]\nbackend = "replay"\nreplay_mode = "{mode}"\nmodel = "m"\n'
                                f'cassette = "{role}.cassette.jsonl"\n' + (f'base_url = "{base_url}"\n' if base_url else "")
                                for role in ("vision", "answerer", "judge")), encoding="utf-8")
        return path

    recorder = SecondReading()
    with FakeLLMServer(handler=recorder) as srv:
        rec = runner.invoke(app, ["study", "image-ablation", "-r", str(refs), "--out", str(tmp_path / "rec"),
                                  "--config", str(config("record", srv.base_url)), "--json", "--resamples", "500"])
    assert rec.exit_code == 0, rec.output
    rep = runner.invoke(app, ["study", "image-ablation", "-r", str(refs), "--out", str(tmp_path / "rep"),
                              "--config", str(config("replay")), "--json", "--resamples", "500"])
    assert rep.exit_code == 0, rep.output
    recorded, replayed = json.loads(rec.stdout), json.loads(rep.stdout)
    assert recorded["by_kind"] == replayed["by_kind"] == res["by_kind"]
    assert _journal(tmp_path / "rep/read.jsonl")[f"{pid}@full"]["response"] == "A different colour"


def test_a_deterministic_reader_is_said_to_repeat_the_control(refs, tmp_path):
    """--reader-temperature 0: the study runs, y_full and the differences with it carry the label and
    no CI; the tables show the value with "repeats the control" where the CI would be."""
    res = _study(refs, tmp_path / "s", Script(broken=False), "--reader-temperature", "0")
    label = "repeats the control (deterministic reader): not an independent measurement"
    fc = res["full_condition"]
    assert fc["independent"] is False and fc["not_independent"] == label and fc["temperature"] == 0.0
    for kind in ("image_critical", "text_answerable"):
        cells = res["by_kind"][kind]
        assert cells["full"]["ci"] is None and cells["full"]["not_independent"] == label
        assert cells["full-text"]["ci"] is None and cells["full-placeholder"]["ci"] is None
        assert cells["placeholder-text"]["ci"] is not None and cells["text"]["ci"] is not None
    assert res["by_kind"]["image_critical"]["full"]["value"] == 100.0
    assert res["by_kind"]["image_critical"]["full-text"]["value"] == 100.0  # the gain, labelled, no CI
    assert all(r["full"]["ci"] is None and r["full-text"]["ci"] is None for r in res["by_intent"])
    assert res["missing_information"]["corrected_by_full"]["not_independent"] == label
    assert any(w.startswith(f"y_full {label}") for w in res["warnings"])
    main, diffs, intents, _ = image_ablation_tables(res)
    assert main.rows[0][7:9] == [100.0, "none: repeats the control"]
    assert diffs.rows[0][1:4] == ["full - text", 100.0, "none: repeats the control"]
    assert intents.rows[0][-1] == "none: repeats the control"
    assert any(n.startswith("warning: y_full repeats the control") for n in main.notes)
