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
