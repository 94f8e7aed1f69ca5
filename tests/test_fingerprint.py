"""One output, one setting (issue 34 item 1): every manifest records the fingerprint of what shaped its
records, and `--resume` under another one is refused, exit 2, naming what changed — the judge, the
agent and the audit as a user runs them, against scripted servers on 127.0.0.1 that fail some calls.
Run settings (concurrency, timeouts) do not refuse; a journal from before fingerprints resumes with a
warning."""

from __future__ import annotations

import json
import logging
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.models.prompts import clear_prompt_files
from kbvqa.runner.fingerprint import changes, fingerprint

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply, ok, scripted_auditor, server_error  # noqa: E402

runner = CliRunner()


def _manifest(**over):
    base = {"roles": {"judge": {"backend": "openai", "model": "judgeA", "base_url": "http://127.0.0.1:1/v1",
                                "limits": {"concurrency": 4, "read_timeout": 60, "max_retries": 4,
                                           "temperature": 0.0}}},
            "stages": [{"name": "agent", "version": "1", "prompt_hashes": {"agent.system@2": "ab" * 32},
                        "config": {"max_turns": 30, "today": "2026-12-01"}}],
            "run_config": {"options": {"samples": "a/b.jsonl", "concurrency": 4, "resume": True,
                                       "run": {"limit": 3}, "models": {"model": "judgeA", "timeout": 5},
                                       "agent": {"episode": {"max_turns": 30}, "web": {"timeout": 3}}}}}
    base.update(over)
    return base


def test_what_is_in_the_fingerprint_and_what_is_not():
    fp = fingerprint(_manifest())
    assert fp["items"]["roles"] == {"judge": {"backend": "openai", "model": "judgeA",
                                              "base URL": "http://127.0.0.1:1/v1", "temperature": 0.0}}
    assert fp["items"]["prompts"] == {"prompt agent.system": "agent.system@2 sha256:" + "ab" * 8}
    assert fp["items"]["options"] == {"agent.episode.max_turns": 30}  # no paths, run settings or call limits
    # a run setting (concurrency, timeouts, retries, limit, a moved input) leaves the digest as it was
    moved = _manifest(run_config={"options": {"samples": "elsewhere/b.jsonl", "concurrency": 64, "resume": False,
                                              "run": {"limit": None}, "models": {"model": "judgeA", "timeout": 99},
                                              "agent": {"episode": {"max_turns": 30}, "web": {"timeout": 1}}}})
    moved["roles"]["judge"]["limits"].update(concurrency=1, read_timeout=5, max_retries=0)
    assert fingerprint(moved)["sha256"] == fp["sha256"]
    # a changed budget is named once (the stage config and the option that set it are one change)
    fewer = _manifest()
    fewer["stages"][0]["config"]["max_turns"] = 2
    fewer["run_config"]["options"]["agent"]["episode"]["max_turns"] = 2
    assert changes(fp, fingerprint(fewer)) == ["agent max_turns: 30 → 2"]
    # a setting only one kbvqa version has is not compared, nor a role only one run has (it made none
    # of the records); a role both have is compared field by field
    newer = _manifest()
    newer["stages"][0]["config"]["new_knob"] = 1
    assert changes(fp, fingerprint(newer)) == [] and changes(fingerprint(_manifest(roles={})), fp) == []
    seeded = _manifest()
    seeded["roles"]["judge"]["params"] = {"seed": 1}
    assert changes(fp, fingerprint(seeded)) == ['judge request params: (none) → {"seed": 1}']


def test_a_role_left_out_for_a_while_still_guards_its_records(tmp_path):
    """Run 1 judges with judgeA; run 2 resumes with no judge (nothing it makes needs one); run 3 brings
    judgeB: refused, because judgeA's verdicts are still in the journal."""
    from kbvqa.runner.fingerprint import SettingChanged, check_resume

    path, out = tmp_path / "j.manifest.json", tmp_path / "j.jsonl"
    first = _manifest()
    first["fingerprint"] = fingerprint(first)
    path.write_text(json.dumps(first))
    second = _manifest(roles={})
    second["fingerprint"] = fingerprint(second)
    check_resume(json.loads(path.read_text()), second, ok_records=2, out=out)
    assert second["fingerprint"]["items"]["roles"] == first["fingerprint"]["items"]["roles"]
    path.write_text(json.dumps(second))
    third = _manifest()
    third["roles"]["judge"]["model"] = "judgeB"
    third["fingerprint"] = fingerprint(third)
    with pytest.raises(SettingChanged, match="judge model: judgeA → judgeB"):
        check_resume(json.loads(path.read_text()), third, ok_records=2, out=out)
    check_resume(json.loads(path.read_text()), third, ok_records=0, out=out)  # nothing kept: nothing to mix


# ------------------------------------------------------------------------------------------- the judge


class Judge:
    """Grades "correct" when shown Paris; fails q2's first call (HTTP 500) and answers q3's first call
    with no JSON (invalid), so the first run leaves records to resume."""

    def __init__(self) -> None:
        self.asked: dict[str, int] = {}
        self.models: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, req: dict) -> Reply:
        text = req["messages"][-1]["content"]
        qid = next(q for q in ("q1", "q2", "q3") if f"Where is {q}" in text)
        with self.lock:
            self.asked[qid] = self.asked.get(qid, 0) + 1
            self.models.append(req["model"])
            first = self.asked[qid] == 1
        if qid == "q2" and first:
            return server_error()
        if qid == "q3" and first:
            return ok("I think it is correct.")
        return ok(json.dumps({"label": "correct" if "Paris" in text else "incorrect", "rationale": "scripted"}))


def _judge_files(folder: Path) -> tuple[Path, Path]:
    preds, refs = folder / "preds.jsonl", folder / "refs.jsonl"
    # one-sentence answers: the short answer is the whole answer, so only the fingerprint tells them apart
    preds.write_text("".join(json.dumps({"id": q, "sample_id": q, "answer": a, "status": "ok"}) + "\n"
                             for q, a in (("q1", "Paris."), ("q2", "Lyon."), ("q3", "Paris."))), encoding="utf-8")
    refs.write_text("".join(json.dumps({"id": q, "question": f"Where is {q}?", "answers": ["Paris"]}) + "\n"
                            for q in ("q1", "q2", "q3")), encoding="utf-8")
    return preds, refs


def test_a_resumed_judge_refuses_another_setting_and_names_it(tmp_path, caplog):
    preds, refs = _judge_files(tmp_path)
    out = tmp_path / "j.jsonl"
    manifest = tmp_path / "j.manifest.json"
    prompt = tmp_path / "judge.txt"
    prompt.write_text("Grade it: {question_raw} / {target_raw} / {predicted_raw}", encoding="utf-8")
    judge = Judge()
    with FakeLLMServer(handler=judge) as srv:
        base = ["score", "judge", "-p", str(preds), "-r", str(refs), "--judge-base-url", srv.base_url,
                "--max-retries", "0", "--out", str(out), "--json"]
        first = runner.invoke(app, [*base, "--judge-model", "judgeA"])
        assert first.exit_code == 0, first.output
        assert json.loads(first.stdout)["run"] == {**json.loads(first.stdout)["run"], "ok": 1, "error": 1, "invalid": 1}
        kept_journal, kept_manifest = out.read_bytes(), manifest.read_bytes()
        try:
            refused = {
                "judge model: judgeA → judgeB": runner.invoke(app, [*base, "--judge-model", "judgeB"]),
                "prompt judge.simpleqa: judge.simpleqa@1": runner.invoke(
                    app, ["--prompt-file", f"judge.simpleqa={prompt}", *base, "--judge-model", "judgeA"]),
                "graded_text: full → short": runner.invoke(app, [*base, "--judge-model", "judgeA",
                                                                 "--graded-text", "short"]),
            }
        finally:
            clear_prompt_files()
        for named, res in refused.items():
            assert res.exit_code == 2, (named, res.output)
            line = res.stderr.strip()
            assert named in line and "--no-resume" in line and "another --out" in line, (named, line)
            assert len(line.splitlines()) == 1 and "Traceback" not in res.output
        # nothing was asked and nothing written: the journal and its fingerprint are the first run's
        assert judge.models == ["judgeA"] * 3
        assert out.read_bytes() == kept_journal and manifest.read_bytes() == kept_manifest
        # the same setting, other run settings: resumed, only the two unfinished verdicts asked again
        again = runner.invoke(app, [*base, "--judge-model", "judgeA", "--concurrency", "2", "--timeout", "30"])
        assert again.exit_code == 0, again.output
        assert json.loads(again.stdout)["run"]["skipped"] == 1 and judge.models == ["judgeA"] * 5
        # a manifest written before fingerprints: resumed, with a warning that its setting is unknown
        old = json.loads(manifest.read_text())
        del old["fingerprint"]
        manifest.write_text(json.dumps(old))
        with caplog.at_level(logging.WARNING, logger="kbvqa"):
            legacy = runner.invoke(app, [*base, "--judge-model", "judgeB"])
        assert legacy.exit_code == 0, legacy.output
        assert "written before fingerprints" in caplog.text and "3 ok records" in caplog.text
        assert json.loads(manifest.read_text())["fingerprint"]["unverified_records"] == 3


# ------------------------------------------------------------------------------------------- the agent


@pytest.fixture(scope="module")
def bench(bench_copy, tmp_path_factory):

    return bench_copy(tmp_path_factory.mktemp("fingerprint") / "bench")


def _agent(req: dict) -> Reply:
    """Answers at once; every third conversation's first reply has no tags (a format error)."""
    turn = sum(1 for m in req["messages"] if m["role"] == "assistant")
    if turn == 0 and len(json.dumps(req["messages"])) % 3 == 0:
        return ok("I am not sure what to do.")
    return ok("<think>done</think><answer>Elmira.</answer>")


def test_a_resumed_agent_refuses_another_model_or_budget(bench, tmp_path):
    out = tmp_path / "p.jsonl"
    with FakeLLMServer(handler=_agent) as srv:
        base = ["answer", "--pipeline", "agent", "--samples", str(bench.samples), "--kb", str(bench.kb),
                "--kb-images", str(bench.root), "--today", "2026-12-01", "--llm", srv.base_url,
                "--max-retries", "0", "--out", str(out)]
        first = runner.invoke(app, [*base, "--model", "agentA", "--limit", "2"])
        assert first.exit_code == 0, first.output
        asked = srv.count
        for args, named in ((["--model", "agentB"], "agent model: agentA → agentB"),
                            (["--model", "agentA", "--max-turns", "2"], "agent max_turns: 30 → 2")):
            res = runner.invoke(app, [*base, *args, "--limit", "3"])
            assert res.exit_code == 2 and named in res.stderr and "--no-resume" in res.stderr, res.output
        assert srv.count == asked
        more = runner.invoke(app, [*base, "--model", "agentA", "--limit", "3", "--concurrency", "1"])
        assert more.exit_code == 0, more.output
        lines = [json.loads(x) for x in out.read_text().splitlines()]
        assert len(lines) == 3 and {r["json"]["model"] for r in srv.requests} == {"agentA"}
        fresh = runner.invoke(app, [*base, "--model", "agentB", "--limit", "1", "--no-resume"])
        assert fresh.exit_code == 0, fresh.output


# ------------------------------------------------------------------------------------------- the audit


def _auditor(req: dict) -> Reply:
    """The audit's four kinds of request, each answered in the shape it asks for."""
    return scripted_auditor(req)


def test_a_resumed_audit_refuses_another_model(bench, tmp_path):
    out = tmp_path / "a.jsonl"
    with FakeLLMServer(handler=_auditor) as srv:
        base = ["audit", "run", str(bench.samples), "--kb", str(bench.kb), "--llm", srv.base_url,
                "--max-retries", "0", "--out", str(out), "--json"]
        first = runner.invoke(app, [*base, "--model", "auditA", "--limit", "2"])
        assert first.exit_code == 0, first.output
        res = runner.invoke(app, [*base, "--model", "auditB", "--limit", "3"])
        assert res.exit_code == 2 and "verifier model: auditA → auditB" in res.stderr, res.output
        same = runner.invoke(app, [*base, "--model", "auditA", "--limit", "3", "--concurrency", "1"])
        assert same.exit_code == 0, same.output


# ------------------------------------------------------------------------------------------- every job


def test_every_job_of_the_demo_records_the_fingerprint_of_its_manifest(demo_source):
    """One rule in the runner: every manifest the demo writes (answers, agent, audit, augment, curate,
    reference build, IVR-12) carries the fingerprint derived from its own roles, stages and options."""
    base, res = demo_source
    manifests = sorted((base / res.out).rglob("*.manifest.json"))
    assert len(manifests) >= 10
    for path in manifests:
        m = json.loads(path.read_text(encoding="utf-8"))
        if "stages" not in m:  # the demo's own summary manifest, not a job's
            continue
        assert m["fingerprint"] == fingerprint(m), path
        assert m["fingerprint"]["items"]["stages"]["stages"], path


def test_a_resumed_agent_failure_study_refuses_another_judge(tmp_path):
    """The issue's case: categories of one judge kept, the rest asked of another, the caption naming
    the first. Now refused; the same judge finishes the one that failed."""
    from test_agent_failures import _files as failure_files

    refs, preds, ver = failure_files(tmp_path)
    asked: list[str] = []

    def categoriser(req: dict) -> Reply:
        asked.append(req["model"])
        if len(asked) == 1:
            return server_error()
        return ok('{"category": "T2", "rationale": "kept searching"}')

    with FakeLLMServer(handler=categoriser) as srv:
        base = ["study", "agent-failures", "-p", str(preds), "-r", str(refs), "--verdicts", str(ver), "--journal",
                str(tmp_path / "failures.jsonl"), "--judge-base-url", srv.base_url, "--max-retries", "0", "--json"]
        first = runner.invoke(app, [*base, "--judge-model", "judge-x"])
        assert first.exit_code == 0 and len(asked) == 3, first.output
        other = runner.invoke(app, [*base, "--judge-model", "judge-y"])
        assert other.exit_code == 2 and "judge model: judge-x → judge-y" in other.stderr, other.output
        same = runner.invoke(app, [*base, "--judge-model", "judge-x", "--concurrency", "1"])
        assert same.exit_code == 0, same.output
    assert asked == ["judge-x"] * 4 and json.loads(same.stdout)["categorised"] == 3


OPTION_MODULES = ("kbvqa.pipelines.ablation", "kbvqa.pipelines.score_options", "kbvqa.pipelines.answer.options",
                  "kbvqa.pipelines.audit", "kbvqa.pipelines.augment.options", "kbvqa.pipelines.curate.hops",
                  "kbvqa.pipelines.curate", "kbvqa.pipelines.evaluation", "kbvqa.pipelines.reference",
                  "kbvqa.pipelines.retrieve")


def test_the_name_lists_cover_every_path_and_run_group_of_every_job():
    """A new option holding a path, or a new group of run settings, must be named in the fingerprint's
    lists (kbvqa.runner.fingerprint), or a moved file would refuse a resume."""
    import importlib
    import typing

    from pydantic import BaseModel

    from kbvqa.runner.fingerprint import PATH_KEYS, RUN_GROUPS, RUN_SETTINGS
    from kbvqa.runner.options import CallLimits, JobOptions, RunOptions

    for name in OPTION_MODULES:
        importlib.import_module(name)

    def every(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from every(sub)

    def kinds(annotation):
        return {a for a in (annotation, *typing.get_args(annotation)) if isinstance(a, type)}

    missing: set[str] = set()

    def walk(model, where):
        for field, info in model.model_fields.items():
            types = kinds(info.annotation)
            sub = next((t for t in types if issubclass(t, BaseModel)), None)
            if sub is not None and issubclass(sub, (RunOptions, CallLimits)):
                if field not in RUN_GROUPS:
                    missing.add(f"{where}.{field} (a {sub.__name__} group)")
            elif sub is not None:
                walk(sub, f"{where}.{field}")
            elif Path in types and field not in PATH_KEYS:
                missing.add(f"{where}.{field} (a path)")
    for cls in set(every(JobOptions)):
        walk(cls, cls.__name__)
    assert not missing, sorted(missing)
    assert set(RunOptions.model_fields) <= RUN_SETTINGS  # a run group written at a table's top is still one
