"""Role configuration (TOML + env + flags), redaction, building clients; image data URLs."""

import asyncio
import base64
import io

import pytest
from PIL import Image

from kbvqa.models.client import OpenAIChatClient
from kbvqa.models.config import ConfigError, build_roles, describe_roles, load_model_config, redact
from kbvqa.models.images import image_to_data_url, user_message
from kbvqa.models.replay import ReplayClient
from kbvqa.models.rules import RulesClient, register_rule

TOML = """
[models.judge]
backend = "openai"
model = "qwen3-30b"
base_url = "http://127.0.0.1:8000"
api_key_env = "MY_JUDGE_KEY"
concurrency = 16
max_tokens = 512

[[models.verifier]]
backend = "rules"
rule = "cfg_test_rule"

[[models.verifier]]
model = "verifier-llm"

[models.answerer]
backend = "replay"
cassette = "cassettes/answerer.jsonl"

[cache]
path = ".kbvqa/cache.sqlite"
"""


@register_rule("verifier", "cfg_test_rule")
def _rule(payload):
    return {"label": "yes"}


def write(tmp_path, text=TOML):
    p = tmp_path / "kbvqa.toml"
    p.write_text(text)
    return p


def test_load_file_env_and_flags(tmp_path):
    p = write(tmp_path)
    env = {"KBVQA_BASE_URL": "http://10.0.0.1:9000/v1", "KBVQA_MODEL": "fallback"}
    cfg = load_model_config(p, env=env)
    judge = cfg.roles["judge"]
    assert judge.base_url == "http://127.0.0.1:8000/v1" and judge.model == "qwen3-30b"  # file beats global env
    assert judge.concurrency == 16 and judge.max_tokens == 512
    v_rules, v_llm = cfg.roles["verifier"]
    assert v_rules.backend == "rules" and v_llm.model == "verifier-llm"
    assert v_llm.base_url == "http://10.0.0.1:9000/v1"  # filled from global env
    assert cfg.roles["answerer"].cassette == str(tmp_path / "cassettes/answerer.jsonl")
    assert cfg.cache.path == tmp_path / ".kbvqa/cache.sqlite"

    env2 = {**env, "KBVQA_JUDGE_MODEL": "judge-env", "KBVQA_CHECKER_MODEL": "checker-env"}
    cfg2 = load_model_config(p, env=env2)
    assert cfg2.roles["judge"].model == "judge-env"
    assert cfg2.roles["checker"].model == "checker-env"  # created from env
    assert cfg2.roles["checker"].base_url == "http://10.0.0.1:9000/v1"

    cfg3 = load_model_config(p, {"model": "flag-model", "concurrency": 4,
                                 "roles": {"judge": {"model": "flag-judge", "temperature": 0.5}}}, env=env2)
    assert cfg3.roles["judge"].model == "flag-judge" and cfg3.roles["judge"].temperature == 0.5
    assert cfg3.roles["verifier"][1].model == "flag-model" and cfg3.roles["verifier"][1].concurrency == 4
    assert cfg3.roles["verifier"][0].backend == "rules"  # global flags touch openai roles only
    assert cfg3.roles["judge"].concurrency == 4


def test_no_file_flags_only():
    cfg = load_model_config(None, {"roles": {"judge": {"model": "m", "base_url": "http://h:1"}}}, env={})
    assert set(cfg.roles) == {"judge"} and cfg.roles["judge"].base_url == "http://h:1/v1"
    assert load_model_config(None, env={}).roles == {}


@pytest.mark.parametrize("text,needle", [
    ('[models.judge]\nmodel = "m"\n', "models.judge: backend openai needs base_url"),
    ('[models.judge]\nmodel="m"\nbase_url="http://h"\napi_key = "sk-1"\n', "keys are never written"),
    ('[models.judge]\nmodel="m"\nbase_url="http://h"\nconcurrency = "lots"\n', "models.judge.concurrency"),
    ('[models.judeg]\nmodel="m"\n', "unknown role"),
    ('[[models.judge]]\nmodel="m"\nbase_url="http://h"\n', "only verifier may list"),
    ('[models.judge]\nbackend="replay"\n', "needs cassette"),
    ('[models.judge]\nbackend="gpt"\n', "models.judge.backend"),
    ('[models.judge\n', "not valid TOML"),
])
def test_bad_config_names_file_and_key(tmp_path, text, needle):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_model_config(p, env={})
    assert needle in str(e.value) and str(p) in str(e.value)


def test_missing_file():
    with pytest.raises(ConfigError, match="not found"):
        load_model_config("/nonexistent/kbvqa.toml")


def test_build_roles_and_describe_redacts(tmp_path, monkeypatch):
    monkeypatch.delenv("KBVQA_CACHE")  # the file's [cache] applies (conftest turns caching off)
    (tmp_path / "cassettes").mkdir()
    (tmp_path / "cassettes/answerer.jsonl").write_text("")
    p = write(tmp_path, TOML.replace('model = "verifier-llm"', 'model = "verifier-llm"\n'
                                     'base_url = "https://user:pw@api.example.com/v1?api-key=abc"\n'
                                     'extra_params = {seed = 1, auth_token = "t0ps3cret"}'))
    cfg = load_model_config(p, env={})
    with pytest.raises(ConfigError, match="MY_JUDGE_KEY"):
        build_roles(cfg, env={})
    roles = build_roles(cfg, env={"MY_JUDGE_KEY": "sk-judge"})
    assert isinstance(roles["judge"], OpenAIChatClient) and roles["judge"].concurrency == 16
    assert roles["judge"]._api_key == "sk-judge"
    assert isinstance(roles["verifier"][0], RulesClient) and isinstance(roles["verifier"][1], OpenAIChatClient)
    assert isinstance(roles["answerer"], ReplayClient)
    assert roles["judge"].cache is roles["verifier"][1].cache is not None
    assert asyncio.run(roles["verifier"][0].chat([], payload={})).data == {"label": "yes"}

    desc = describe_roles(cfg)
    text = repr(desc)
    for secret in ("sk-judge", "t0ps3cret", "pw@", "abc", "MY_JUDGE_KEY"):
        assert secret not in text
    assert desc["roles"]["judge"]["model"] == "qwen3-30b" and desc["roles"]["judge"]["max_tokens"] == 512
    assert desc["roles"]["verifier"][1]["extra_params"]["seed"] == 1
    assert desc["roles"]["verifier"][0] == {"backend": "rules", "rule": "cfg_test_rule"}
    assert redact({"headers": {"Authorization": "Bearer x"}, "max_tokens": 5}) == \
        {"headers": {"Authorization": "<redacted>"}, "max_tokens": 5}


# -- images ------------------------------------------------------------------------------------

def _decode(url):
    head, b64 = url.split(",", 1)
    return head, Image.open(io.BytesIO(base64.b64decode(b64)))


def test_image_data_url_resizes_and_converts(tmp_path):
    src = tmp_path / "big.png"
    Image.new("RGBA", (2000, 1000), (255, 0, 0, 128)).save(src)
    head, img = _decode(image_to_data_url(src, max_side=512))
    assert head == "data:image/jpeg;base64" and img.size == (512, 256) and img.mode == "RGB"
    head, img = _decode(image_to_data_url(Image.new("L", (100, 50)), fmt="png"))
    assert head == "data:image/png;base64" and img.size == (100, 50)
    with pytest.raises(FileNotFoundError):
        image_to_data_url(tmp_path / "missing.jpg")


def test_user_message_parts(tmp_path):
    assert user_message("hi") == {"role": "user", "content": "hi"}
    p = tmp_path / "a.jpg"
    Image.new("RGB", (10, 10)).save(p)
    m = user_message("what is this?", [p, "https://x/y.jpg"])
    assert m["content"][0] == {"type": "text", "text": "what is this?"}
    assert m["content"][1]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert m["content"][2]["image_url"]["url"] == "https://x/y.jpg"


def test_a_misspelt_role_variable_is_refused_by_name():
    with pytest.raises(ConfigError, match="KBVQA_VERIFER_MODEL.*'verifer' is not a model role"):
        load_model_config(None, env={"KBVQA_VERIFER_MODEL": "m", "KBVQA_BASE_URL": "http://127.0.0.1:1/v1"})
    cfg = load_model_config(None, env={"KBVQA_VERIFIER_MODEL": "m", "KBVQA_BASE_URL": "http://127.0.0.1:1/v1"})
    assert list(cfg.roles) == ["verifier"]


def test_the_response_cache_is_on_by_default_and_flags_move_or_disable_it(tmp_path, monkeypatch):
    from kbvqa.models.config import cache_path, roles_from_flags

    monkeypatch.delenv("KBVQA_CACHE")  # conftest turns it off for the suite

    home = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert cache_path(None, home) == tmp_path / "xdg" / "kbvqa" / "responses.sqlite"
    assert cache_path(None, {**home, "KBVQA_CACHE": "off"}) is None
    assert cache_path(None, {**home, "KBVQA_CACHE": str(tmp_path / "c.sqlite")}) == tmp_path / "c.sqlite"
    cfg_file = tmp_path / "kbvqa.toml"
    cfg_file.write_text('[models.judge]\nbackend = "openai"\nmodel = "m"\nbase_url = "http://127.0.0.1:1/v1"\n'
                        '[cache]\npath = "here.sqlite"\n')
    cfg = load_model_config(cfg_file, env=home)
    assert cache_path(cfg, home) == tmp_path / "here.sqlite"  # the file's own path
    assert cache_path(cfg, {**home, "KBVQA_CACHE": "0"}) is None  # --no-cache beats the file
    # `--llm` without any config file gets the default cache: a rerun re-sends nothing
    roles = roles_from_flags(llm="http://127.0.0.1:1/v1", model="m", fill=("judge",), env=home)
    assert roles["judge"].cache is not None
    assert roles["judge"].cache.path == tmp_path / "xdg" / "kbvqa" / "responses.sqlite"
    assert roles_from_flags(llm="http://127.0.0.1:1/v1", model="m", fill=("judge",),
                            env={**home, "KBVQA_CACHE": "off"})["judge"].cache is None


def test_cli_cache_flags_reach_every_role(tmp_path, monkeypatch):
    import os

    from typer.testing import CliRunner

    from kbvqa.cli.app import app

    monkeypatch.setenv("KBVQA_CACHE", "off")  # restored after the test, whatever the flags set
    runner = CliRunner()
    assert runner.invoke(app, ["--cache", str(tmp_path / "c.sqlite"), "journal", "--help"]).exit_code == 0
    assert os.environ["KBVQA_CACHE"] == str(tmp_path / "c.sqlite")
    assert runner.invoke(app, ["--no-cache", "journal", "--help"]).exit_code == 0
    assert os.environ["KBVQA_CACHE"] == "off"
    res = runner.invoke(app, ["--no-cache", "--cache", str(tmp_path / "c.sqlite"), "journal", "--help"])
    assert res.exit_code == 2


# -- provider/model shorthand ------------------------------------------------------------------

@pytest.mark.parametrize("given,base_url,model", [
    ("ollama/qwen2.5vl:7b", "http://127.0.0.1:11434/v1", "qwen2.5vl:7b"),
    ("vllm/Qwen/Qwen2.5-VL-7B-Instruct", "http://127.0.0.1:8000/v1", "Qwen/Qwen2.5-VL-7B-Instruct"),
    ("sglang/qwen3-30b-a3b", "http://127.0.0.1:30000/v1", "qwen3-30b-a3b"),
    ("lmstudio/gemma-3-12b", "http://127.0.0.1:1234/v1", "gemma-3-12b"),
    ("openai/gpt-4o-mini", "https://api.openai.com/v1", "gpt-4o-mini"),
])
def test_provider_shorthand_fills_base_url_when_none_is_given(tmp_path, given, base_url, model):
    from kbvqa.models.config import RoleConfig

    rc = RoleConfig(model=given)
    assert (rc.base_url, rc.model, rc.shorthand, rc.provider) == (base_url, model, given, given.split("/")[0])
    p = write(tmp_path, f'[models.judge]\nmodel = "{given}"\n')
    cfg = load_model_config(p, env={})
    judge = cfg.roles["judge"]
    assert (judge.base_url, judge.model) == (base_url, model)
    desc = describe_roles(cfg)["roles"]["judge"]  # the resolved server and model, and where they came from
    assert desc["base_url"] == base_url and desc["model"] == model
    assert desc["shorthand"] == given and desc["provider"] == given.split("/")[0]
    client = build_roles(cfg, env={}, cache=None)["judge"]
    assert isinstance(client, OpenAIChatClient)
    assert (client.base_url, client.model) == (base_url, model)
    assert (client.provenance.base_url, client.provenance.model) == (base_url, model)  # what manifests record


def test_an_explicit_base_url_always_wins_and_the_model_is_sent_verbatim(tmp_path):
    from kbvqa.models.config import RoleConfig

    rc = RoleConfig(model="openai/gpt-oss-20b", base_url="http://gpu:8000/v1")  # vLLM serving an HF name
    assert (rc.base_url, rc.model, rc.shorthand) == ("http://gpu:8000/v1", "openai/gpt-oss-20b", None)
    p = write(tmp_path, '[models.judge]\nmodel = "ollama/qwen2.5vl:7b"\n[models.checker]\nmodel = "vllm/m"\n'
                        'base_url = "http://10.0.0.2:9000/v1"\n')
    # a base_url from anywhere counts: the global env fallback, a per-role env, the file
    cfg = load_model_config(p, env={"KBVQA_BASE_URL": "http://10.0.0.1:9000/v1"})
    assert (cfg.roles["judge"].base_url, cfg.roles["judge"].model) == ("http://10.0.0.1:9000/v1", "ollama/qwen2.5vl:7b")
    assert cfg.roles["judge"].shorthand is None and "shorthand" not in describe_roles(cfg)["roles"]["judge"]
    assert (cfg.roles["checker"].base_url, cfg.roles["checker"].model) == ("http://10.0.0.2:9000/v1", "vllm/m")
    cfg = load_model_config(p, env={"KBVQA_JUDGE_BASE_URL": "http://10.0.0.3:1/v1"})
    assert cfg.roles["judge"].model == "ollama/qwen2.5vl:7b"
    cfg = load_model_config(p, {"roles": {"judge": {"base_url": "http://10.0.0.4:1/v1"}}}, env={})
    assert cfg.roles["judge"].model == "ollama/qwen2.5vl:7b"
    # without any base_url it resolves, from the file or from the environment
    cfg = load_model_config(p, env={})
    assert cfg.roles["judge"].base_url == "http://127.0.0.1:11434/v1"
    cfg = load_model_config(None, env={"KBVQA_ANSWERER_MODEL": "sglang/m"})
    assert (cfg.roles["answerer"].base_url, cfg.roles["answerer"].model) == ("http://127.0.0.1:30000/v1", "m")


@pytest.mark.parametrize("given", ["Qwen/Qwen2.5-VL-7B-Instruct", "Ollama/x", "ollama/", "ollama/ ", "llama3",
                                   "http://h/x"])
def test_an_unknown_prefix_is_never_a_provider(tmp_path, given):
    p = write(tmp_path, f'[models.judge]\nmodel = "{given}"\n')
    with pytest.raises(ConfigError) as e:
        load_model_config(p, env={})
    assert "models.judge: backend openai needs base_url" in str(e.value)
    assert "PROVIDER/NAME" in str(e.value) and "ollama" in str(e.value)


def test_rules_and_replay_roles_are_left_alone(tmp_path):
    from kbvqa.models.config import RoleConfig

    rc = RoleConfig(backend="rules", model="ollama/rule")
    assert rc.model == "ollama/rule" and rc.base_url is None and rc.shorthand is None
    rec = RoleConfig(backend="replay", cassette="c.jsonl", replay_mode="record", model="ollama/m")
    assert (rec.base_url, rec.model) == ("http://127.0.0.1:11434/v1", "m")  # recording calls the server


def test_roles_from_flags_takes_a_provider_model_without_llm(tmp_path):
    from kbvqa.models.config import roles_from_flags

    env = {"KBVQA_CACHE": "off"}
    roles = roles_from_flags(model="ollama/qwen2.5vl:7b", fill=("judge", "answerer"), env=env)
    judge = roles["judge"]
    assert roles["answerer"] is judge and isinstance(judge, OpenAIChatClient)
    assert (judge.base_url, judge.model) == ("http://127.0.0.1:11434/v1", "qwen2.5vl:7b")
    # with --llm the name is the server's own, slash and all
    roles = roles_from_flags(llm="http://127.0.0.1:8000/v1", model="openai/gpt-oss-20b", fill=("judge",), env=env)
    assert (roles["judge"].base_url, roles["judge"].model) == ("http://127.0.0.1:8000/v1", "openai/gpt-oss-20b")
    for bad in ({"model": "Qwen/Qwen2.5-VL-7B-Instruct"}, {"model": "m"}, {"llm": "http://127.0.0.1:1/v1"}):
        with pytest.raises(ConfigError, match="--llm and --model go together"):
            roles_from_flags(fill=("judge",), env=env, **bad)
    with pytest.raises(ConfigError, match="either --replay"):
        roles_from_flags(model="ollama/x", replay=tmp_path / "c.jsonl", fill=("judge",), env=env)
    # a config file's other roles stay; the flag fills the named ones
    p = write(tmp_path, '[models.checker]\nmodel = "vllm/Qwen/Qwen2.5-VL-7B-Instruct"\n')
    roles = roles_from_flags(p, model="lmstudio/gemma", fill=("judge",), env=env)
    assert (roles["checker"].base_url, roles["checker"].model) == ("http://127.0.0.1:8000/v1",
                                                                   "Qwen/Qwen2.5-VL-7B-Instruct")
    assert (roles["judge"].base_url, roles["judge"].model) == ("http://127.0.0.1:1234/v1", "gemma")


def test_openai_shorthand_takes_the_key_from_the_usual_environment(monkeypatch):
    from kbvqa.models.config import roles_from_flags

    monkeypatch.delenv("KBVQA_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    client = roles_from_flags(model="openai/gpt-4o-mini", fill=("judge",), env={"KBVQA_CACHE": "off"})["judge"]
    assert client.base_url == "https://api.openai.com/v1" and client._api_key == "sk-from-env"
    client = roles_from_flags(model="openai/gpt-4o-mini", api_key_env="MY_KEY", fill=("judge",),
                              env={"KBVQA_CACHE": "off", "MY_KEY": "sk-mine"})["judge"]
    assert client._api_key == "sk-mine"


# --- KBVQA_BASE_URL / KBVQA_MODEL: the --llm/--model of a job given neither (issue 34 item 3) --------

def test_environment_default_model_fills_the_roles_the_file_leaves(tmp_path, capsys):
    from kbvqa.models.config import roles_from_flags

    env = {"KBVQA_BASE_URL": "http://127.0.0.1:9/v1", "KBVQA_MODEL": "env-model", "KBVQA_CACHE": "off"}
    roles = roles_from_flags(None, fill=("verifier", "repairer"), env=env)
    assert {r: (c.model, c.base_url) for r, c in roles.items()} == {
        "verifier": ("env-model", "http://127.0.0.1:9/v1"), "repairer": ("env-model", "http://127.0.0.1:9/v1")}
    said = capsys.readouterr().err
    assert "model roles verifier, repairer: env-model at http://127.0.0.1:9/v1 (from KBVQA_MODEL/KBVQA_BASE_URL" in said
    # a role of the file keeps its own model; a flag beats the environment
    p = tmp_path / "k.toml"
    p.write_text('[models.verifier]\nmodel = "file-model"\nbase_url = "http://127.0.0.1:8/v1"\n', encoding="utf-8")
    roles = roles_from_flags(p, fill=("verifier", "repairer"), env=env)
    assert (roles["verifier"].model, roles["repairer"].model) == ("file-model", "env-model")
    assert "model roles repairer: env-model" in capsys.readouterr().err
    roles = roles_from_flags(None, llm="http://127.0.0.1:7/v1", model="flag-model", fill=("verifier",), env=env)
    assert roles["verifier"].model == "flag-model" and "KBVQA_MODEL" not in capsys.readouterr().err
    assert roles_from_flags(None, env=env) == {}  # a job that fills no role from flags gets none from the shell
    shorthand = roles_from_flags(None, fill=("answerer",), env={"KBVQA_MODEL": "ollama/qwen2.5vl:7b",
                                                                "KBVQA_CACHE": "off"})
    assert shorthand["answerer"].base_url == "http://127.0.0.1:11434/v1"
    with pytest.raises(ConfigError, match="KBVQA_MODEL is set without KBVQA_BASE_URL"):
        roles_from_flags(None, fill=("answerer",), env={"KBVQA_MODEL": "m", "KBVQA_CACHE": "off"})


def test_audit_run_uses_the_environment_model(tmp_path, monkeypatch):
    """README's `KBVQA_BASE_URL` + `KBVQA_MODEL`: `audit run` without --llm/--model asks that model (it
    went rules-only before, with no notice) and says so on stderr."""
    import json
    import sys
    from pathlib import Path

    from typer.testing import CliRunner

    from kbvqa.cli.app import app

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fake_llm_server import FakeLLMServer
    from test_options_audit import _handler, _samples, _wiki

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KBVQA_CACHE", "off")
    _samples(tmp_path / "in.jsonl")
    _wiki(tmp_path / "wiki.json")
    (tmp_path / "audit.toml").write_text("[audit.verify]\nrules_settle = false\n", encoding="utf-8")
    with FakeLLMServer(handler=_handler) as srv:
        monkeypatch.setenv("KBVQA_BASE_URL", srv.base_url)
        monkeypatch.setenv("KBVQA_MODEL", "env-model")
        res = CliRunner().invoke(app, ["audit", "run", "in.jsonl", "--kb", "wiki.json", "--config", "audit.toml",
                                       "--out", "a.jsonl", "--json"])
        assert res.exit_code == 0, res.output
        assert srv.count >= 2 and {r["json"]["model"] for r in srv.requests} == {"env-model"}
    assert "env-model at" in res.stderr and "KBVQA_MODEL" in res.stderr
    roles = json.loads(Path("a.manifest.json").read_text())["roles"]
    assert "env-model" in json.dumps(roles)
