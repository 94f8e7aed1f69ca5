"""The model side of the audit: prompts, consensus of several verifiers, strict replies, correction
validation, question repair, leak rollback, resume after invalid replies, the --llm CLI shortcut."""

import asyncio
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbvqa.data.schema import Article, Provenance, Sample, Section
from kbvqa.kb.base import InMemoryKB
from kbvqa.models.client import OpenAIChatClient
from kbvqa.models.result import ChatResult
from kbvqa.pipelines.audit import AuditConfig, audit_file, audit_records, load_audit_roles
from kbvqa.models import prompts
from kbvqa.models.prompts import audit as audit_prompt
from kbvqa.runner.stage import Context, Invalid
from kbvqa.stages.audit.llm import ModelCallError, minimal_edit, validate_correction
from kbvqa.stages.audit.evidence import EvidenceUnit
from kbvqa.stages.audit.verify import VerifyConfig, VerifyStage

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, ok, scripted_auditor, server_error  # noqa: E402

URL = "https://en.wikipedia.org/wiki/McLaren_F1"
KB = InMemoryKB([Article(url=URL, title="McLaren F1", sections=[
    Section(index=0, title="McLaren F1", text="The McLaren F1 is a sports car designed by Gordon Murray."),
    Section(index=1, title="Ownership", text="The car is owned by the McLaren Group, based in Woking."),
    Section(index=2, title="Specifications", text="It weighs 1,301 kg. Production began in 1992."),
])])


def rec(question, answers, **kw):
    return Sample(id=kw.pop("id", "s1"), question=question, answers=answers, entity={"url": URL}, **kw).dump()


class FakeClient:
    """A ModelClient answering per prompt name: replies[name] is a dict (ok), 'INVALID', 'ERROR'
    or a callable(messages) -> one of those. Counts calls per prompt."""

    def __init__(self, model="fake-1", **replies):
        self.provenance = Provenance(backend="fake", model=model)
        self.replies = {"posedness": {"tags": [], "suggested_question": None},
                        "final_check": {"leak": False, "answerable": True, "unique": True}, **replies}
        self.calls: dict[str, int] = {}

    async def chat(self, messages, *, schema=None, prompt_version="", **params):
        name = prompt_version.split("@")[0].split(".")[-1]
        self.calls[name] = self.calls.get(name, 0) + 1
        r = self.replies.get(name)
        if callable(r):
            r = r(messages)
        prov = self.provenance.model_copy(update={"prompt_version": prompt_version})
        if r is None or r == "ERROR":
            return ChatResult(status="error", reason="HTTP 500", provenance=prov)
        if r == "INVALID":
            return ChatResult(status="invalid", reason="unparseable JSON", provenance=prov)
        return ChatResult(status="ok", data=r, text=json.dumps(r), provenance=prov)


def verdict(label):
    return {"label": label, "rationale": f"says {label}"}


def run(record, roles, config=None, kb=KB):
    return asyncio.run(audit_records([record], kb, config, roles=roles))[0]


# ------------------------------------------------------------------------------------------ prompts

def test_prompt_registry_is_versioned_and_pinned():
    pinned = {  # a wording change must bump the version and update this table
        "audit.verify_section@2": "098dd43ea7d4a489f09f5c5368648a42b6967839f3e5d2e044ad5f1ecfa52482",
        "audit.correct_answer@2": "4de7046c0c89579bc001d363c684594435084a9ef2ecb127df34c667a517ac1d",
        "audit.posedness@2": "b533995c71947beb411852b45c17323fb85a2007e58dc625c1a8d339606e3ae9",
        "audit.final_check@1": "cede14d400eb385d60a9c701491f85ac2b67a1e254cf7f2abf9af59e0d29bacc",
    }
    audit_prompts = {p.id: p.sha256 for p in prompts.all_prompts().values() if p.name.startswith("audit.")}
    assert audit_prompts == pinned
    msgs = audit_prompt.VERIFY_SECTION.messages(question='Is it "red" {x}?', answers=["a"], title="t", text="b")
    assert '"Is it \\"red\\" {x}?"' in msgs[1]["content"]  # data is JSON-quoted, braces survive
    with pytest.raises(KeyError):
        audit_prompt.VERIFY_SECTION.messages(question="q")
    from kbvqa.pipelines.audit import build_audit_stages
    assert set().union(*(s.prompt_versions() for s in build_audit_stages())) == set(pinned)


# ---------------------------------------------------------------------------------------- consensus

@pytest.mark.parametrize("labels,policy,expected", [
    (["entailed", "not_supported", "not_supported"], "all", "entailed"),
    (["entailed", "not_supported", "not_supported"], "any", "not_supported"),
    (["entailed", "not_supported", "not_supported"], "majority", "not_supported"),
    (["entailed", "entailed", "contradicted"], "majority", "entailed"),
    (["entailed", "entailed", "contradicted"], "any", "contradicted"),
    (["not_supported", "contradicted"], "all", "contradicted"),
])
def test_consensus_of_disagreeing_model_verifiers(labels, policy, expected):
    clients = [FakeClient(model=f"m{i}", verify_section=verdict(lab)) for i, lab in enumerate(labels)]
    cfg = AuditConfig(verify=VerifyConfig(verifiers=[], llm="on", consensus=policy), stages=["verify", "derive"])
    out = run(rec("Who owns this car?", ["Ron Dennis"]), {"verifier": clients}, cfg)
    v = out["audit"]["stages"]["verify"]
    assert v["label"] == expected and v["settled_by"] == "consensus"
    assert [r["verifier"] for r in v["verifiers"]] == [f"verifier#{i + 1}" for i in range(len(labels))]
    assert [r["model"] for r in v["verifiers"]] == [f"m{i}" for i in range(len(labels))]
    assert all(r["prompt"] == "audit.verify_section@2" and r["prompt_sha256"] for r in v["verifiers"])
    support = out["audit"]["answer_support"]
    assert (support == "supported") == (expected == "entailed")  # never supported without consensus


def test_verifier_stops_at_first_entailed_section_and_ranks_sections():
    seen = []

    def reply(messages):
        seen.append(messages[1]["content"])
        return verdict("entailed" if "McLaren Group" in messages[1]["content"] else "not_supported")

    c = FakeClient(verify_section=reply)
    st = VerifyStage(VerifyConfig(verifiers=["verifier"]))
    out = asyncio.run(st.run(rec("Which group owns this car?", ["McLaren Group"]), Context(kb=KB, roles={"verifier": c})))
    v = out["audit"]["stages"]["verify"]
    assert v["label"] == "entailed" and c.calls["verify_section"] == 1  # ownership section ranked first
    assert v["verifiers"][0]["sections"][0]["section_id"] == "1" and v["verifiers"][0]["sections_total"] == 3


def test_rules_match_settles_without_model_calls_but_not_when_disabled():
    c = FakeClient(verify_section=verdict("not_supported"))
    out = run(rec("Who designed this car?", ["Gordon Murray"]), {"verifier": c})
    v = out["audit"]["stages"]["verify"]
    assert v["settled_by"] == "rules" and v["label"] == "entailed" and c.calls == {}
    cfg = AuditConfig(verify=VerifyConfig(verifiers=["rules"], consensus="any", rules_settle=False))
    out = run(rec("Who designed this car?", ["Gordon Murray"]), {"verifier": c}, cfg)
    assert out["audit"]["stages"]["verify"]["label"] == "not_supported" and c.calls["verify_section"] == 3
    missing = run(rec("Who?", ["X"]) | {"entity": {"url": "https://x/none"}}, {"verifier": c})
    assert missing["audit"]["stages"]["derive"]["reason"] == "missing_kb" and c.calls["verify_section"] == 3


def test_yes_no_answers_are_judged_by_model_verifiers():
    c = FakeClient(verify_section=verdict("not_supported"), correct_answer={"status": "not_answerable"})
    out = run(rec("Is this car still produced?", ["No"]), {"verifier": c, "repairer": c})
    assert out["audit"]["answer_support"] == "unsupported" and out["audit"]["action"] == "drop"
    c2 = FakeClient(verify_section=verdict("entailed"))
    assert run(rec("Is this car still produced?", ["No"]), {"verifier": c2})["audit"]["answer_support"] == "supported"


def test_invalid_reply_raises_invalid_and_api_error_raises_error():
    st = VerifyStage(VerifyConfig(verifiers=["verifier"]))
    r = rec("Who owns this car?", ["Ron Dennis"])
    with pytest.raises(Invalid):
        asyncio.run(st.run(r, Context(kb=KB, roles={"verifier": FakeClient(verify_section="INVALID")})))
    with pytest.raises(Invalid):  # ok status but the wrong shape is just as unusable
        asyncio.run(st.run(r, Context(kb=KB, roles={"verifier": FakeClient(verify_section={"label": "maybe"})})))
    with pytest.raises(ModelCallError):
        asyncio.run(st.run(r, Context(kb=KB, roles={"verifier": FakeClient(verify_section="ERROR")})))
    with pytest.raises(KeyError, match="verifier"):  # llm="on" and no role: loud, not skipped
        asyncio.run(VerifyStage(VerifyConfig(llm="on")).run(r, Context(kb=KB)))


# --------------------------------------------------------------------------------------- correction

def test_correction_accepted_only_when_the_evidence_states_it():
    units = [EvidenceUnit("It weighs 1,301 kg and is owned by the McLaren Group.", "0", "t", "kb")]
    assert validate_correction("1301", units)[0] == "1,301"  # numbers as the evidence writes them
    assert validate_correction("McLaren Group", units)[0] == "McLaren Group"
    assert validate_correction("Ron Dennis", units) is None and validate_correction("", units) is None

    # unsupported (no verifier found support): removed, the repairer is not asked to rescue it
    good = FakeClient(verify_section=verdict("not_supported"),
                      correct_answer={"status": "mismatched", "answer": "McLaren Group", "rationale": "owner"})
    out = run(rec("Who owns this car?", ["Ron Dennis"]), {"verifier": good, "repairer": good})
    assert out["answers"] == ["Ron Dennis"] and out["audit"]["action"] == "drop"
    assert out["audit"]["answer_support"] == "unsupported" and "correct_answer" not in good.calls
    # mismatched (a verifier reads a different value in every section): corrected to the evidence's span
    good = FakeClient(verify_section=verdict("contradicted"),
                      correct_answer={"status": "mismatched", "answer": "McLaren Group", "rationale": "owner"})
    out = run(rec("Who owns this car?", ["Ron Dennis"]), {"verifier": good, "repairer": good})
    a = out["audit"]
    assert out["answers"] == ["McLaren Group"] and a["answer_support"] == "mismatched" and a["action"] == "repair"
    d = a["stages"]["derive"]
    assert d["settled_by"] == "llm" and d["backend"] == "fake" and d["version"] == "audit.correct_answer@2"
    assert d["llm"]["accepted"] is True and any(h["stage"] == "derive" for h in out["history"])

    bad = FakeClient(verify_section=verdict("contradicted"),
                     correct_answer={"status": "mismatched", "answer": "Bruce McLaren", "rationale": "guess"})
    out = run(rec("Who owns this car?", ["Ron Dennis"]), {"verifier": bad, "repairer": bad})
    a = out["audit"]
    assert out["answers"] == ["Ron Dennis"] and a["action"] == "drop"
    assert "correction_rejected" in a["tags"] and "correction_not_in_evidence" in a["reasons"]
    assert a["stages"]["derive"]["llm"]["accepted"] is False


def test_rules_correction_settles_before_the_repairer():
    c = FakeClient(correct_answer="ERROR")  # would fail the record if it were called
    out = run(rec("How many kilogram does this vehicle weigh?", ["1302"]), {"repairer": c})
    assert out["answers"] == ["1,301"] and "correct_answer" not in c.calls


# ------------------------------------------------------------------------------ posedness / leakage

def test_question_repair_minimal_edit_and_rejections():
    assert minimal_edit("Where is this car made?", "Where in which country is this car made?", 0.6) is None
    assert minimal_edit("Where is this car made?", "Name the manufacturer's home nation.", 0.6) is not None
    sug = "In which town is the company that owns this car based?"
    c = FakeClient(posedness={"tags": ["missing_spatial_reference"], "suggested_question": sug, "rationale": "town"})
    out = run(rec("Where is the company that owns this car based?", ["Woking"]), {"repairer": c})
    assert out["question"] == sug and out["audit"]["stages"]["posedness"]["settled_by"] == "llm"
    assert "missing_spatial_reference" in out["audit"]["tags"] and out["audit"]["action"] == "repair"
    leaky = FakeClient(posedness={"tags": ["missing_spatial_reference"],
                                  "suggested_question": "Is the company that owns this car based in Woking?"})
    out = run(rec("Where is the company that owns this car based?", ["Woking"]), {"repairer": leaky})
    assert out["question"] == "Where is the company that owns this car based?"
    assert "repair_rejected" in out["audit"]["tags"]
    assert "answer" in out["audit"]["stages"]["posedness"]["llm"]["rejected"]


def test_checker_leak_rolls_back_the_question_edit():
    sug = "In which English town is the company that owns this car based?"
    c = FakeClient(posedness={"tags": ["missing_spatial_reference"], "suggested_question": sug},
                   final_check=lambda m: {"leak": "English town" in m[1]["content"], "answerable": True,
                                          "unique": True, "rationale": "names the town's country"})
    out = run(rec("Where is the company that owns this car based?", ["Woking"]), {"repairer": c, "checker": c})
    a = out["audit"]
    assert out["question"] == "Where is the company that owns this car based?"
    assert "leak_rolled_back" in a["tags"] and a["stages"]["leakage"]["llm"]["rolled_back"] is True
    assert [h["stage"] for h in out["history"] if h["field"] == "question"] == ["posedness", "leakage"]


def test_leaking_edit_rolled_back_then_rewritten_conservatively():
    q = "When did production of this car begin?"
    sug = "When in the early 1990s did production of this car begin?"
    c = FakeClient(posedness={"tags": ["missing_temporal_scope"], "suggested_question": sug, "rationale": "year"},
                   final_check=lambda m: {"leak": "1990s" in m[1]["content"], "answerable": True, "unique": True,
                                          "rationale": "gives the decade away"})
    out = run(rec(q, ["1992"]), {"repairer": c, "checker": c})
    a = out["audit"]
    assert out["question"] == "In what year did production of this car begin?"  # the rules' template, no answer
    assert {"leak_rolled_back", "leak_rewritten"} <= set(a["tags"])
    assert [(h["stage"], h["after"]) for h in out["history"] if h["field"] == "question"] == [
        ("posedness", sug), ("leakage", q), ("leakage", out["question"])]
    # no safe template (the only repair would state the answer): the rolled-back question stays
    c2 = FakeClient(posedness={"tags": ["missing_spatial_reference"],
                               "suggested_question": "In which English town is the company that owns this car based?"},
                    final_check={"leak": True, "answerable": True, "unique": True, "rationale": "names it"})
    out = run(rec("Where is the company that owns this car based?", ["Woking"]), {"repairer": c2, "checker": c2})
    assert out["question"] == "Where is the company that owns this car based?"
    assert "leak_rolled_back" in out["audit"]["tags"] and "leak_rewritten" not in out["audit"]["tags"]


def test_checker_not_answerable_drops_and_not_unique_tags():
    c = FakeClient(final_check={"leak": False, "answerable": False, "unique": False, "rationale": "x"})
    out = run(rec("Who designed this car?", ["Gordon Murray"]), {"checker": c})
    a = out["audit"]
    assert a["action"] == "drop" and {"not_answerable", "not_unique"} <= set(a["tags"])
    assert a["stages"]["leakage"]["backend"] == "rules" and a["stages"]["leakage"]["llm"]["model"] == "fake-1"


# ------------------------------------------------------------------- runner, server, config and CLI

def _server_handler(state):
    def handler(req):
        if state.get("broken"):
            return ok("I think it is probably entailed")
        return scripted_auditor(req)
    return handler


def _write(tmp_path, samples):
    p = tmp_path / "in.jsonl"
    p.write_text("".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
    return p


def test_invalid_replies_end_invalid_and_are_retried_on_resume(tmp_path):
    state = {"broken": True}
    inp = _write(tmp_path, [rec("Who owns this car?", ["McLaren Group"], id="a"),
                            rec("Who owns this vehicle?", ["Ron Dennis"], id="b")])
    out = tmp_path / "out.jsonl"
    with FakeLLMServer(handler=_server_handler(state)) as srv:
        client = OpenAIChatClient(srv.base_url, "m", max_retries=0, timeout=5)
        roles = {"verifier": client, "repairer": client, "checker": client}
        cfg = AuditConfig(verify=VerifyConfig(rules_settle=False))
        s1 = audit_file(inp, KB, out, cfg, fmt="kbvqa", roles=roles, concurrency=2)
        assert s1["run"]["invalid"] == 2 and s1["answer_support"] == {"invalid": 2}
        rows = [json.loads(x) for x in out.read_text().splitlines()]
        assert {r["status"] for r in rows} == {"invalid"} and "unusable" in rows[0]["reason"]
        state["broken"] = False
        s2 = audit_file(inp, KB, out, cfg, fmt="kbvqa", roles=roles, concurrency=2)
        assert s2["run"]["ok"] == 2 and s2["answer_support"] == {"supported": 2}
        rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
        assert rows["b"]["attempts"] == 2 and rows["b"]["audit"]["stages"]["verify"]["verifiers"][1]["model"] == "m"
        manifest = json.loads((tmp_path / "out.manifest.json").read_text())
        assert "audit.verify_section@2" in json.dumps(manifest)


def test_api_error_ends_record_error(tmp_path):
    inp = _write(tmp_path, [rec("Who owns this car?", ["Ron Dennis"], id="a")])
    with FakeLLMServer(default=server_error(500)) as srv:
        client = OpenAIChatClient(srv.base_url, "m", max_retries=0, timeout=5)
        s = audit_file(inp, KB, tmp_path / "o.jsonl", fmt="kbvqa", roles={"verifier": client})
    assert s["run"]["error"] == 1 and s["answer_support"] == {"invalid": 1}
    row = json.loads((tmp_path / "o.jsonl").read_text().splitlines()[0])
    assert row["status"] == "error" and "ModelCallError" in row["reason"]


def test_roles_from_audit_toml(tmp_path):
    toml = tmp_path / "audit.toml"
    toml.write_text('[verify]\nconsensus = "majority"\n[leakage]\nllm = "off"\n'
                    '[[models.verifier]]\nbackend = "openai"\nmodel = "a"\nbase_url = "http://127.0.0.1:9/v1"\n'
                    '[[models.verifier]]\nbackend = "openai"\nmodel = "b"\nbase_url = "http://127.0.0.1:9/v1"\n',
                    encoding="utf-8")
    cfg = AuditConfig.from_toml(toml)
    assert cfg.verify.consensus == "majority" and cfg.leakage.llm == "off"
    roles = load_audit_roles(toml, env={})
    assert [c.model for c in roles["verifier"]] == ["a", "b"]
    short = load_audit_roles(None, llm="http://127.0.0.1:9", model="q")
    assert short["verifier"] is short["repairer"] is short["checker"] and short["checker"].model == "q"
    with pytest.raises(ValueError):
        load_audit_roles(None, llm="http://127.0.0.1:9")


def test_cli_llm_shortcut(tmp_path):
    from kbvqa.cli.app import app

    wiki = tmp_path / "wiki.json"
    wiki.write_text(json.dumps({URL: {"title": "McLaren F1", "section_titles": [s.title for s in KB.get(URL).sections],
                                      "section_texts": [s.text for s in KB.get(URL).sections], "image_urls": []}}),
                    encoding="utf-8")
    inp = _write(tmp_path, [rec("Is this car still produced?", ["No"], id="a")])
    out = tmp_path / "o.jsonl"
    with FakeLLMServer(handler=_server_handler({})) as srv:
        res = CliRunner().invoke(app, ["audit", "run", str(inp), "--kb", str(wiki), "--out", str(out), "--json",
                                       "--llm", srv.base_url, "--model", "tiny"])
        assert res.exit_code == 0, res.output
        assert srv.count >= 2
    row = json.loads(out.read_text().splitlines()[0])
    v = row["audit"]["stages"]["verify"]["verifiers"]
    assert v[1]["model"] == "tiny" and v[1]["backend"] == "openai" and row["audit"]["answer_support"] == "supported"
    assert row["audit"]["stages"]["leakage"]["llm"]["prompt"] == "audit.final_check@1"


def test_capital_in_evidence_supports_a_country_answer_one_way_only():
    from kbvqa.data.schema import Answer
    from kbvqa.stages.audit.evidence import match_answer

    assert match_answer(Answer(text="France"), "The cathedral stands in central Paris.")
    assert match_answer(Answer(text="French"), "The cathedral stands in central Paris.")
    assert not match_answer(Answer(text="Paris"), "The cathedral stands in France.")
    assert not match_answer(Answer(text="Spain"), "The cathedral stands in central Paris.")
