"""Removals decided as seed 000 decides them (§4.1 steps 1-2): two model verifiers, the rules only
settling a verbatim match, unsupported rows removed, mismatched rows corrected, supported rows left
as annotated, the model's ambiguity tags deciding, E-VQA's keep-everything policy, and the notice a
run with fewer than two model verifiers gives. Models are scripted servers on 127.0.0.1, imperfect on
purpose: the two verifiers disagree, one sends an unparseable reply."""

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
from kbvqa.pipelines.audit import AuditConfig, audit_file, audit_records
from kbvqa.stages.audit.derive import DeriveConfig
from kbvqa.stages.audit.verify import ONE_VERIFIER, RULES_ONLY, VerifyConfig, combine

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, ok  # noqa: E402

URL = "https://en.wikipedia.org/wiki/McLaren_F1"
SECTIONS = [("McLaren F1", "The McLaren F1 is a sports car designed by Gordon Murray."),
            ("Ownership", "The car is owned by the McLaren Group, based in Woking."),
            ("Specifications", "It weighs 1,301 kg. Production began in 1992."),
            ("Racing", "It won the 24 Hours of Le Mans races in 1995.")]
KB = InMemoryKB([Article(url=URL, title="McLaren F1", sections=[
    Section(index=i, title=t, text=x) for i, (t, x) in enumerate(SECTIONS)])])

# id -> (question, answers): what each sample shows
CASES = {
    "verbatim": ("Who designed this car?", ["Gordon Murray"]),  # written in the evidence: rules settle
    "one_supports": ("In which county is the owner of this car based?", ["Surrey", "County of Surrey"]),
    "both_unsupported": ("Who was the first owner of this car?", ["Ron Dennis"]),
    "rules_lenient": ("What did this car win?", ["Le Mans race"]),  # rules: inflection match only
    "rules_contradicted": ("How many kilograms does this car weigh?", ["1302"]),  # rules: another number
    "mismatched": ("What is the mass of this car in kilograms?", ["1310"]),  # models: another value
    "untouched": ("Where is the owner of this car based?", ["Woking", "Paris"]),  # supported: as annotated
    "broken": ("What colour is this car?", ["papaya orange"]),  # verifier B's reply is unparseable
}


def _answers_line(user: str) -> list[str]:
    line = next(x for x in user.splitlines() if x.startswith("Annotated answer"))
    return json.loads(line.split(": ", 1)[1])


def scripted(req: dict):
    """Verifier A (model qa) and B (qb) per the first answer alias; the other prompts reply plainly."""
    system, user, model = req["messages"][0]["content"], req["messages"][-1]["content"], req["model"]
    if "check benchmark annotations" in system:
        first = _answers_line(user)[0]
        if first == "papaya orange" and model == "qb":
            return ok("I think the section supports it")
        label = {"Surrey": "entailed" if model == "qa" else "not_supported", "Ron Dennis": "not_supported",
                 "Le Mans race": "not_supported", "1302": "not_supported", "1310": "contradicted"}.get(first, "entailed")
        return ok(json.dumps({"label": label, "rationale": f"{model} scripted"}))
    if "repair benchmark answers" in system:
        return ok(json.dumps({"status": "not_answerable", "answer": None, "rationale": "not stated"}))
    if "flag questions" in system:
        return ok(json.dumps({"tags": [], "suggested_question": None, "rationale": "the question is clear"}))
    return ok(json.dumps({"leak": False, "answerable": True, "unique": True, "rationale": "fine"}))


def _inputs(tmp_path):
    wiki = tmp_path / "wiki.json"
    wiki.write_text(json.dumps({URL: {"title": "McLaren F1", "section_titles": [t for t, _ in SECTIONS],
                                      "section_texts": [x for _, x in SECTIONS], "image_urls": []}}), encoding="utf-8")
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(Sample(id=k, question=q, answers=a, entity={"url": URL}).dump()) + "\n"
                           for k, (q, a) in CASES.items()), encoding="utf-8")
    return inp, wiki


def test_two_verifiers_remove_only_what_both_find_unsupported(tmp_path):
    from kbvqa.cli.app import app

    inp, wiki = _inputs(tmp_path)
    out = tmp_path / "audited.jsonl"
    with FakeLLMServer(handler=scripted) as srv:
        res = CliRunner().invoke(app, ["audit", "run", str(inp), "--kb", str(wiki), "--out", str(out), "--json",
                                       "--llm", srv.base_url, "--model", "qa", "--model", "qb", "--max-retries", "0"])
        verify_reqs = [r["json"] for r in srv.requests if "check benchmark" in r["json"]["messages"][0]["content"]]
    assert res.exit_code == 0 and "invalid 1" in res.stderr, res.output  # the unparseable reply: said, not a label
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    a = {k: r.get("audit") or {} for k, r in rows.items()}
    # the rules settle only the verbatim answer: no model was asked about it
    asked = {_answers_line(r["messages"][-1]["content"])[0] for r in verify_reqs}
    assert "Gordon Murray" not in asked and a["verbatim"]["stages"]["verify"]["settled_by"] == "rules"
    assert {r["model"] for r in verify_reqs} == {"qa", "qb"}
    # one verifier's support keeps a sample; both unsupported removes it
    assert a["one_supports"]["answer_support"] == "supported" and a["one_supports"]["action"] != "drop"
    assert a["both_unsupported"]["action"] == "drop" and a["both_unsupported"]["answer_support"] == "unsupported"
    # the rules' lenient match and the rules' "contradicted" do not overrule two models
    for k in ("rules_lenient", "rules_contradicted"):
        v = a[k]["stages"]["verify"]
        rules = next(r for r in v["verifiers"] if r["backend"] == "rules")
        assert rules["counted"] is False and rules["label"] in ("entailed", "contradicted")
        assert v["label"] == "not_supported" and a[k]["action"] == "drop", k
        assert rows[k]["answers"] == CASES[k][1]  # removed, not corrected
    # Supported but Mismatched: corrected to the value the evidence writes
    assert a["mismatched"]["answer_support"] == "mismatched" and rows["mismatched"]["answers"] == ["1,301"]
    assert a["mismatched"]["action"] == "repair"
    # Supported and Matched: left as annotated (no alternative pruned), and the model's "clear" wins
    # over the rules' spatial tag for "where ..."
    assert rows["untouched"]["answers"] == ["Woking", "Paris"] and rows["untouched"]["question"] == CASES["untouched"][0]
    pos = a["untouched"]["stages"]["posedness"]
    assert pos["proposed"] == ["missing_spatial_reference"] and pos["tags"] == []
    assert "missing_spatial_reference" not in a["untouched"]["tags"]
    # an unparseable verifier reply is invalid, never a label
    assert rows["broken"]["status"] == "invalid" and not a["broken"]
    # the verifier sees every alias
    surrey = [r for r in verify_reqs if "Surrey" in r["messages"][-1]["content"]]
    assert surrey and all(_answers_line(r["messages"][-1]["content"]) == ["Surrey", "County of Surrey"] for r in surrey)
    # two verifiers: no notice; the manifest records who decided
    summary = json.loads(res.stdout[res.stdout.index("{"):])
    assert summary["verification"] == {"model_verifiers": [{"verifier": "verifier#1", "model": "qa"},
                                                           {"verifier": "verifier#2", "model": "qb"}]}
    manifest = json.loads((tmp_path / "audited.manifest.json").read_text())
    assert manifest["run_config"]["verification"] == summary["verification"]


def test_one_verifier_is_allowed_and_said(tmp_path):
    from kbvqa.cli.app import app

    inp, wiki = _inputs(tmp_path)
    keep = "".join(line for line in inp.read_text().splitlines(True) if '"both_unsupported"' in line)
    inp.write_text(keep, encoding="utf-8")
    with FakeLLMServer(handler=scripted) as srv:
        res = CliRunner().invoke(app, ["audit", "run", str(inp), "--kb", str(wiki), "--out", str(tmp_path / "o.jsonl"),
                                       "--llm", srv.base_url, "--model", "qa"])
    assert res.exit_code == 0, res.output
    assert f"note: {ONE_VERIFIER}" in res.stderr
    summary = json.loads((tmp_path / "o.summary.json").read_text())
    assert summary["verification"]["notice"] == ONE_VERIFIER
    manifest = json.loads((tmp_path / "o.manifest.json").read_text())
    assert manifest["run_config"]["verification"]["notice"] == ONE_VERIFIER
    row = json.loads((tmp_path / "o.jsonl").read_text())
    assert ONE_VERIFIER in row["audit"]["stages"]["verify"]["rationale"]
    # rules only: kbvqa's offline stand-in, said as such
    s = audit_file(inp, KB, tmp_path / "r.jsonl", fmt="kbvqa")
    assert s["verification"] == {"model_verifiers": [], "notice": RULES_ONLY}


class Verifier:
    """A ModelClient that labels sections by a function of the user message."""

    def __init__(self, label):
        self.provenance = Provenance(backend="fake", model="v")
        self.label = label

    async def chat(self, messages, *, schema=None, prompt_version="", **params):
        prov = self.provenance.model_copy(update={"prompt_version": prompt_version})
        data = {"label": self.label(messages[-1]["content"]), "rationale": "scripted"}
        return ChatResult(status="ok", data=data, text=json.dumps(data), provenance=prov)


def test_contradicted_is_the_authors_rule_all_sections_with_any_an_option():
    assert combine(["contradicted", "not_supported"]) == "not_supported"
    assert combine(["contradicted", "contradicted"]) == "contradicted"
    assert combine(["contradicted", "not_supported"], "any") == "contradicted"
    one = Verifier(lambda u: "contradicted" if "1,301" in u else "not_supported")
    r = Sample(id="x", question="What is the mass of this car in kilograms?", answers=["1310"], entity={"url": URL}).dump()
    cfg = AuditConfig(verify=VerifyConfig(verifiers=[], llm="on"), stages=["verify", "derive"])
    out = asyncio.run(audit_records([r], KB, cfg, roles={"verifier": one}))[0]
    assert out["audit"]["stages"]["verify"]["label"] == "not_supported" and out["audit"]["action"] == "drop"
    cfg = AuditConfig(verify=VerifyConfig(verifiers=[], llm="on", contradicted="any"), stages=["verify", "derive"])
    out = asyncio.run(audit_records([r], KB, cfg, roles={"verifier": one}))[0]
    assert out["audit"]["answer_support"] == "mismatched" and out["answers"] == ["1,301"]


def test_evqa_fixed_split_keeps_every_question():
    r = Sample(id="e", question="Who was the first owner of this car?", answers=["Ron Dennis"], entity={"url": URL},
               question_type="templated", dataset="landmarks").dump()
    out = asyncio.run(audit_records([r], KB))[0]
    a = out["audit"]
    assert a["answer_support"] == "unsupported" and a["action"] == "keep"
    assert "kept_by_dataset_policy" in a["tags"] and a["would_drop"] == ["unsupported"]
    off = AuditConfig(derive=DeriveConfig(evqa_keep_all=False))
    assert asyncio.run(audit_records([r], KB, off))[0]["audit"]["action"] == "drop"


def test_posedness_model_sees_every_alias():
    seen = []

    class Repairer(Verifier):
        async def chat(self, messages, *, schema=None, prompt_version="", **params):
            seen.append(messages[-1]["content"])
            prov = self.provenance.model_copy(update={"prompt_version": prompt_version})
            data = {"tags": ["missing_spatial_reference"], "suggested_question": None, "rationale": "which level?"}
            return ChatResult(status="ok", data=data, text=json.dumps(data), provenance=prov)

    r = Sample(id="p", question="Which place is the owner of this car based in?", answers=["Woking", "Surrey"],
               entity={"url": URL}).dump()
    out = asyncio.run(audit_records([r], KB, roles={"repairer": Repairer(None)}))[0]
    assert seen and _answers_line(seen[0]) == ["Woking", "Surrey"]
    assert out["audit"]["stages"]["posedness"]["tags"] == ["missing_spatial_reference"]


ARA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ara" / "ground_truth"


@pytest.mark.skipif(not (ARA / "evqa_unfixed_test_with_id.csv").exists(), reason="ARA shared data not present")
def test_ara_rows_with_two_verifiers(tmp_path):
    """The released E-VQA rows (their own evidence sentences, no KB): the two verifiers disagree on
    the rows whose answer is not written verbatim in the sentence, or both find no support; nothing
    is removed (E-VQA keeps its 4,750) and every alias reaches the verifier."""
    from kbvqa.data.formats import SampleRecords

    src = ARA / "evqa_unfixed_test_with_id.csv"
    rows = [s for s, _ in zip(SampleRecords(src, None), range(12))]
    inp = tmp_path / "evqa.jsonl"
    inp.write_text("".join(json.dumps(s if isinstance(s, dict) else s.dump()) + "\n" for s in rows), encoding="utf-8")

    def handler(req):
        system, user = req["messages"][0]["content"], req["messages"][-1]["content"]
        if "check benchmark annotations" in system:
            question = next(x for x in user.splitlines() if x.startswith("Question"))
            both_fail = len(question) % 2 == 0  # neither model finds support on these rows
            label = "not_supported" if req["model"] == "qb" or both_fail else "entailed"
            return ok(json.dumps({"label": label, "rationale": "s"}))
        return scripted(req)

    with FakeLLMServer(handler=handler) as srv:
        client_a = OpenAIChatClient(srv.base_url, "qa", max_retries=0, timeout=10)
        client_b = OpenAIChatClient(srv.base_url, "qb", max_retries=0, timeout=10)
        s = audit_file(inp, InMemoryKB([]), tmp_path / "o.jsonl", fmt="kbvqa",
                       roles={"verifier": [client_a, client_b], "repairer": client_a, "checker": client_a})
        users = [r["json"]["messages"][-1]["content"] for r in srv.requests
                 if "check benchmark" in r["json"]["messages"][0]["content"]]
    assert s["run"]["ok"] == 12 and s["action"].get("drop", 0) == 0
    assert "notice" not in s["verification"]
    out = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    asked = [r for r in out if r["audit"]["stages"]["verify"]["settled_by"] != "rules"]
    unsupported = [r for r in asked if len("Question: " + json.dumps(r["audit"]["question_before"])) % 2 == 0]
    assert asked and all(r["audit"]["answer_support"] == ("unsupported" if r in unsupported else "supported")
                         for r in asked)
    assert unsupported and s["kept_by_dataset_policy"] == len(unsupported)  # E-VQA: kept, said
    for r in asked:
        texts = [a if isinstance(a, str) else a["text"] for a in r["audit"]["answers_before"]]
        assert any(_answers_line(u) == texts for u in users)
