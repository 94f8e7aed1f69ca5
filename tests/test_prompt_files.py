"""A user's own prompt text in place of kbvqa's (`kbvqa --prompt-file NAME=PATH`, `[prompts]` in
kbvqa.toml): checked for its placeholders, hashed, sent by every stage that uses the prompt, named by
its hash in provenance and in the run manifest, and handed to worker processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from kbvqa.cli.app import app
from kbvqa.models import prompts
from kbvqa.models.prompts import OVERRIDES_ENV, PromptFileError, read_prompt_file, use_prompt_files

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_llm_server import FakeLLMServer, Reply  # noqa: E402

runner = CliRunner()

# a five-rule filter in the shape of a paper's prompt: JSON examples with bare braces, kbvqa's placeholders
FILTER_TEXT = """Image 1 is the query photo, image 2 a candidate. Question: {question}
Expected answer: {answer}
Where it sits in the summary: {context}
Remove it if it repeats image 1, is a collage, carries a big watermark, shows a play button or is off-topic.
Reply with JSON only: {"remove": true, "reason": "<why>"} or {"remove": false}; {{question}} is literal.
"""


@pytest.fixture(autouse=True)
def kbvqa_prompts_after():
    yield
    prompts.clear_prompt_files()


def test_a_file_replaces_the_prompt_everywhere_it_is_rendered(tmp_path):
    pinned = prompts.get("reference.five_rule_filter")
    built_in = (pinned.id, pinned.sha256)
    f = tmp_path / "filter.txt"
    f.write_text(FILTER_TEXT, encoding="utf-8")
    table = use_prompt_files({"reference.five_rule_filter": f})
    p = prompts.get("reference.five_rule_filter")
    assert p is pinned  # the same object every stage imported: it consults the table when it renders
    assert p.id == f"reference.five_rule_filter@file-{p.sha256[:12]}" and p.sha256 != built_in[1]
    text = p.render(question="What is it?", answer="A dahlia", context="the flower {bloom}")
    assert text.startswith("Image 1 is the query photo") and '"What is it?"' in text
    assert '{"remove": true, "reason": "<why>"}' in text and "{question} is literal" in text
    assert "the flower {bloom}" in text  # a value's braces are data
    d = p.describe()
    assert d["file"] == str(f.resolve()) and d["replaces"] == "user" and len(d["file_sha256"]) == 64
    assert p.fragments == () and "fragments" not in d  # the file replaces the composed text whole
    assert prompts.get(p.id) is p and prompts.get("reference.five_rule_filter@2") is p
    assert list(table) == ["reference.five_rule_filter"] and json.loads(os.environ[OVERRIDES_ENV])[0]["path"] == d["file"]
    assert [o["prompt"] for o in prompts.describe_overrides()] == ["reference.five_rule_filter"]
    prompts.clear_prompt_files()
    assert (p.id, p.sha256) == built_in and OVERRIDES_ENV not in os.environ
    assert set(p.fragments) == {"reply.json", "reference.known_answer"}


@pytest.mark.parametrize("text, message", [
    ("Question {question} answer {answer} context {context} {today}", r"unknown placeholder \{today\}"),
    ("Question {question} answer {answer}", r"\{context\} are missing"),
    ("   \n", "text is empty"),
])
def test_a_file_is_checked_for_its_placeholders(tmp_path, text, message):
    f = tmp_path / "p.txt"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(PromptFileError, match=message):
        read_prompt_file("reference.five_rule_filter", f)


def test_other_refusals(tmp_path):
    f = tmp_path / "p.txt"
    f.write_bytes(b"\xff\xfe not utf-8 {question}")
    with pytest.raises(PromptFileError, match="not UTF-8"):
        read_prompt_file("reference.five_rule_filter", f)
    with pytest.raises(PromptFileError, match="no prompt of that name"):
        read_prompt_file("reference.five_rules", f)
    with pytest.raises(PromptFileError, match="cannot read"):
        read_prompt_file("reference.five_rule_filter", tmp_path / "missing.txt")
    f.write_text("### kbvqa:user\n{question_raw}\n### kbvqa:user\n{question_raw}\n", encoding="utf-8")
    with pytest.raises(PromptFileError, match="given twice"):
        read_prompt_file("agent.system", f)


def test_the_agent_system_prompt_with_both_parts(tmp_path):
    """The agent's system part must keep the tools block and the date; the user part the question."""
    f = tmp_path / "agent.txt"
    f.write_text("### kbvqa:system\nYou research with tools. Reply as <think> then one <tool_call> or <answer>.\n"
                 '<tool_call>{"name": ..., "arguments": {...}}</tool_call>\n{tools_block_raw}\nDate: {today_raw}\n'
                 "### kbvqa:user\nQuestion: {question_raw}\n", encoding="utf-8")
    o = read_prompt_file("agent.system", f)
    assert o.parts == ("system", "user")
    use_prompt_files({"agent.system": f})
    msgs = prompts.get("agent.system").messages(question_raw="What is this?", tools_block_raw="<tools>T</tools>",
                                                today_raw="2026-12-02")
    assert msgs[0]["content"].endswith("<tools>T</tools>\nDate: 2026-12-02")
    assert '{"name": ..., "arguments": {...}}' in msgs[0]["content"]
    f.write_text("### kbvqa:system\nYou research with tools.\n{tools_block_raw}\n", encoding="utf-8")
    with pytest.raises(PromptFileError, match=r"system part of agent.system\): the placeholder\(s\) \{today_raw\}"):
        read_prompt_file("agent.system", f)


def test_a_worker_process_sends_the_drivers_file(tmp_path):
    f = tmp_path / "filter.txt"
    f.write_text(FILTER_TEXT, encoding="utf-8")
    use_prompt_files({"reference.five_rule_filter": f})
    f.unlink()  # a worker on another node may not see the file: the table carries the text itself
    code = ("from kbvqa.models import prompts\np = prompts.get('reference.five_rule_filter')\n"
            "print(p.id)\nprint(p.render(question='q', answer='a', context='c').splitlines()[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                         env={**os.environ})
    first, second = out.stdout.strip().splitlines()
    assert first == prompts.get("reference.five_rule_filter").id and second.startswith("Image 1 is the query photo")


OFF = ("candidate", "text_only", "consistency", "aesthetic", "interleaved", "rubric", "plausibility", "standardize",
       "rewrite", "difficulty", "classify", "assign")


def test_cli_prompt_files_reach_the_model_and_the_manifest(tmp_path, monkeypatch):
    """As a user runs it: `[prompts]` in kbvqa.toml and `kbvqa --prompt-file` (which wins), relative
    paths from the project folder, the cache on. The server receives the files' text; the stage
    manifest and each verdict's provenance name the files' hashes; a bad file is a one-line error."""
    project = tmp_path / "project"
    (project / "img").mkdir(parents=True)
    (project / "prompts").mkdir()
    arr = (np.random.default_rng(2).random((8, 8, 3)) * 255).astype(np.uint8)
    Image.fromarray(arr).resize((256, 256), Image.Resampling.NEAREST).save(project / "img" / "t.png")
    (project / "posts.jsonl").write_text(json.dumps({
        "id": "zh1", "text": "在颐和园拍到的这座塔叫什么名字？有人知道它有多高吗？", "answer": "佛香阁",
        "images": ["img/t.png"]}, ensure_ascii=False) + "\n", encoding="utf-8")
    (project / "prompts" / "check_config.txt").write_text(
        "CONFIG CHECK of {language}: {question} / {answer} / {question_en} / {answer_en}. "
        'JSON: {"faithful": true, "issues": []}\n', encoding="utf-8")
    (project / "prompts" / "check_flag.txt").write_text(
        "FLAG CHECK of {language}: {question} / {answer} / {question_en} / {answer_en}. "
        'JSON: {"faithful": true, "issues": []}\n', encoding="utf-8")
    (project / "prompts" / "translate.txt").write_text(
        "MY TRANSLATION PROMPT from {language}: {question} {answer}. "
        'JSON: {"question": "...", "answer": "..."}\n', encoding="utf-8")
    seen: list[str] = []

    def handler(req: dict) -> Reply:
        text = req["messages"][-1]["content"]
        text = text if isinstance(text, str) else " ".join(p.get("text", "") for p in text if p.get("type") == "text")
        seen.append(text)
        if text.startswith(("MY TRANSLATION PROMPT", "Translate this benchmark item")):
            return Reply(content=json.dumps({"question": "What is this tower called?", "answer": "Tower of Incense"}))
        assert "CHECK of" in text or text.startswith("Check an English translation"), text
        return Reply(content=json.dumps({"faithful": True, "issues": []}))

    monkeypatch.setenv("KBVQA_CACHE", str(tmp_path / "cache.sqlite"))
    monkeypatch.chdir(project)
    with FakeLLMServer(handler=handler) as srv:
        toml = "".join(f"[curate.{k}]\nenabled = false\n" for k in OFF)
        toml += ('[prompts]\n"curate.translation_check" = "prompts/check_config.txt"\n'
                 '"curate.translate" = "prompts/translate.txt"\n')
        Path("kbvqa.toml").write_text(toml, encoding="utf-8")
        args = ["curate", "run", "posts.jsonl", "--config", "kbvqa.toml", "--llm", srv.base_url, "--model", "m",
                "--json"]
        r = runner.invoke(app, [*args, "--out", "a"])
        assert r.exit_code == 0, r.output
        assert [t.split(" ")[0] for t in seen] == ["MY", "CONFIG"]
        r = runner.invoke(app, ["--prompt-file", "curate.translation_check=prompts/check_flag.txt", *args, "--out", "b"])
        assert r.exit_code == 0, r.output
        assert seen[-1].startswith("FLAG CHECK") and len(seen) == 3  # the translation came from the cache
        bad = Path("prompts/bad.txt")
        bad.write_text("{question} only", encoding="utf-8")
        r = runner.invoke(app, ["--prompt-file", f"curate.translation_check={bad}", *args, "--out", "c"])
        assert r.exit_code == 2 and "are missing" in r.output and "Traceback" not in r.output
        r = runner.invoke(app, ["--prompt-file", "curate.translation_check", *args, "--out", "c"])
        assert r.exit_code == 2 and "NAME=PATH" in r.output
        # without a flag or [prompts], kbvqa's own prompts again
        Path("plain.toml").write_text("".join(f"[curate.{k}]\nenabled = false\n" for k in OFF), encoding="utf-8")
        r = runner.invoke(app, ["curate", "run", "posts.jsonl", "--config", "plain.toml", "--llm", srv.base_url,
                                "--model", "m", "--json", "--out", "d"])
        assert seen[-1].startswith("Check an English translation"), seen[-1][:80]
    manifest = json.loads(Path("b/stages/18_translate.manifest.json").read_text(encoding="utf-8"))
    hashes = manifest["stages"][0]["prompt_hashes"]
    ids = sorted(hashes)
    assert ids[0].startswith("curate.translate@file-") and ids[1].startswith("curate.translation_check@file-")
    line = json.loads(Path("b/stages/18_translate.jsonl").read_text(encoding="utf-8").splitlines()[0])
    checks = line["curate"]["translate"]["checks"]
    assert checks[0]["prompt_version"] == ids[1]  # each verdict names the file it was asked with
    flag = read_prompt_file("curate.translation_check", project / "prompts" / "check_flag.txt")
    assert ids[1] == f"curate.translation_check@file-{flag.sha256[:12]}"
