"""Model roles from `kbvqa.toml`, environment and flags.

Roles, not hard-coded models: a stage asks for `judge`, the config says which backend and model
fills it. Keys are never written in the file: `api_key_env` names the environment variable that
holds one (otherwise the client falls back to KBVQA_API_KEY / OPENAI_API_KEY).

    [models.judge]
    backend = "openai"            # openai | rules | replay
    model = "qwen3-30b"
    base_url = "http://127.0.0.1:8000/v1"
    api_key_env = "MY_KEY"
    concurrency = 16
    connect_timeout = 10          # seconds to open a connection
    read_timeout = 60             # seconds to wait for the server's next bytes (`timeout` = old name)
    deadline = 300                # seconds for one whole call: all attempts and backoff (unset = none)
    max_reply_bytes = 4194304     # a reply's cap in bytes, on the wire and decoded (over it: an error)
    structured_output = "auto"    # auto | json_schema | json_object | off

    [[models.verifier]]           # verifier may list several
    backend = "rules"
    rule = "answer_in_evidence"

    [cache]
    path = ".kbvqa/cache.sqlite"  # relative paths are relative to the config file
    # the response cache is on by default: ~/.cache/kbvqa/responses.sqlite (XDG_CACHE_HOME);
    # `kbvqa --no-cache` / KBVQA_CACHE=off turn it off, `kbvqa --cache PATH` / KBVQA_CACHE=PATH move it

    [prompts]                     # a prompt replaced by your own template file (kbvqa.models.prompts)
    "agent.system" = "prompts/agent_system.txt"   # relative to the config file; `kbvqa --prompt-file` wins

Precedence for a role's field, highest first: flag for that role (`overrides["roles"][role]`),
global flag (`overrides["model"]`, `overrides["base_url"]`, … for every openai role), env for that
role (`KBVQA_<ROLE>_BASE_URL`, `KBVQA_<ROLE>_MODEL`), the file, then global env (`KBVQA_BASE_URL`,
`KBVQA_MODEL`: fill in openai roles that do not set their own). A per-role env model or a per-role
flag creates a role the file does not mention. Roles left unconfigured are absent from
`build_roles`, and the stage uses its embedded rules default. A job given neither `--llm` nor
`--model` takes `KBVQA_BASE_URL` + `KBVQA_MODEL` as those flags for the roles it would fill with them
and the file leaves unset (`roles_from_flags`), and says so on stderr; judges are chosen by their own
`--judge-*` flags or `--config`.

`provider/model` shorthand, applied last, once precedence has settled both fields: a role that ends
up with NO base_url from any of the places above (a flag, `KBVQA_<ROLE>_BASE_URL`, the file,
`KBVQA_BASE_URL`) and whose model starts with a known provider (`PROVIDERS`: ollama, vllm, sglang,
lmstudio, openai) gets that provider's default base URL and the rest of the string as its model:
`model = "ollama/qwen2.5vl:7b"` → `http://127.0.0.1:11434/v1` + `qwen2.5vl:7b`. Only the first `/`
splits, so `vllm/Qwen/Qwen2.5-VL-7B-Instruct` sends `Qwen/Qwen2.5-VL-7B-Instruct`. A base_url given
anywhere always wins and the model is then sent exactly as written (vLLM serves `Qwen/…` and even
`openai/gpt-oss-20b`); an unknown prefix is never taken for a provider (without a base_url that stays
an error). The resolved role keeps the shorthand (`RoleConfig.shorthand`, `.provider`) and
`describe_roles` writes it next to the resolved base_url and model. `roles_from_flags` accepts
`--model PROVIDER/NAME` without `--llm` on the same terms.
"""

from __future__ import annotations

import os
import re
import sqlite3
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from kbvqa.data.redact import register_key_env, register_secret
from kbvqa.data.config_tables import check_tables, did_you_mean, renamed_key
from kbvqa.models.cache import ResponseCache
from kbvqa.models.replay import ReplayClient
from kbvqa.models.result import ModelClient, StructuredOutput, normalize_base_url
from kbvqa.models.rules import RulesClient, get_rule

ROLES = ("verifier", "repairer", "checker", "judge", "answerer", "agent", "vision", "extractor")
MULTI_ROLES = ("verifier",)
_SECRET = re.compile(r"(^|_)(api_?key|key|secret|password|passwd|token|auth|authorization)($|_)", re.IGNORECASE)


class ConfigError(ValueError):
    """A bad model configuration; the message names the file and key."""


#: `provider/model` shorthand: the OpenAI-compatible base URL each known provider serves on by default.
#: Used only for a role that has no base_url from anywhere (see the module docstring); the key is the
#: exact, lower-case prefix before the first `/` — any other prefix is part of the model's name.
PROVIDERS: dict[str, str] = {
    "ollama": "http://127.0.0.1:11434/v1",
    "vllm": "http://127.0.0.1:8000/v1",
    "sglang": "http://127.0.0.1:30000/v1",
    "lmstudio": "http://127.0.0.1:1234/v1",
    "openai": "https://api.openai.com/v1",  # the key: api_key_env, else KBVQA_API_KEY / OPENAI_API_KEY
}


def split_shorthand(model: str | None) -> tuple[str, str] | None:
    """`"ollama/qwen2.5vl:7b"` → `("ollama", "qwen2.5vl:7b")`; None when the string does not start
    with a known provider followed by a non-empty model name. Only the first `/` splits
    (`"vllm/Qwen/Qwen2.5-VL-7B-Instruct"` → `("vllm", "Qwen/Qwen2.5-VL-7B-Instruct")`)."""
    if not model or "/" not in model:
        return None
    provider, rest = model.split("/", 1)
    if provider not in PROVIDERS or not rest.strip():
        return None
    return provider, rest


def refuse_keys_in_file(data: Any) -> Any:
    """A config table may name the variable holding a key (`api_key_env`), never hold a key itself."""
    if isinstance(data, dict):
        for k in data:
            if k != "api_key_env" and _SECRET.search(str(k)):
                raise ValueError(f"{k!r}: keys are never written in the config; "
                                 "set api_key_env to the name of an environment variable")
    return data


class RoleConfig(BaseModel):
    """One model slot. Fields not used by a backend are ignored by it.

    Time limits of an openai role: `connect_timeout` (open a connection), `read_timeout` (wait for
    the server's next bytes; `timeout` is its old name and still accepted) and `deadline` (one whole
    call, every retry and backoff included; None = only `max_retries` bounds it).
    `structured_output`: auto | json_schema | json_object | off (kbvqa.models.client)."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["openai", "rules", "replay"] = "openai"
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    concurrency: int = Field(8, ge=1, le=4096)
    read_timeout: float = Field(60.0, gt=0)
    connect_timeout: float = Field(10.0, gt=0)
    deadline: float | None = Field(None, gt=0)
    max_reply_bytes: int | None = Field(None, ge=1)  # None: the client's default (4 MiB)
    structured_output: StructuredOutput = "auto"
    max_retries: int = Field(4, ge=0, le=50)
    backoff_base: float = Field(0.5, ge=0)
    backoff_max: float = Field(20.0, ge=0)
    temperature: float = Field(0.0, ge=0)
    max_tokens: int | None = Field(None, ge=1)
    price_in_per_mtok: float = Field(0.0, ge=0)
    price_out_per_mtok: float = Field(0.0, ge=0)
    extra_params: dict[str, Any] = Field(default_factory=dict)
    json_schema_strict: bool = False
    rule: str | None = None  # rules backend: registered rule name (defaults to `model`)
    cassette: str | None = None  # replay backend: JSONL cassette path
    replay_mode: Literal["replay", "record"] = "replay"
    _shorthand: str | None = PrivateAttr(default=None)  # "ollama/qwen2.5vl:7b" when resolved from one

    @property
    def shorthand(self) -> str | None:
        """The `provider/model` string this role's base_url and model were resolved from, or None."""
        return self._shorthand

    @property
    def provider(self) -> str | None:
        """The provider whose default base URL the shorthand chose, or None."""
        return self._shorthand.split("/", 1)[0] if self._shorthand else None

    @model_validator(mode="before")
    @classmethod
    def _no_keys_in_file(cls, data: Any) -> Any:
        return refuse_keys_in_file(data)

    @model_validator(mode="before")
    @classmethod
    def _timeout_is_read_timeout(cls, data: Any) -> Any:
        """Configs written before connect/read timeouts were separate say `timeout`: the read timeout."""
        return renamed_key(data, "timeout", "read_timeout")

    @property
    def timeout(self) -> float:
        """The read timeout, by its old name."""
        return self.read_timeout

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return None if v is None else normalize_base_url(v)

    @model_validator(mode="after")
    def _complete(self) -> "RoleConfig":
        needs_server = self.backend == "openai" or (self.backend == "replay" and self.replay_mode == "record")
        if needs_server and not self.base_url and self._shorthand is None:
            found = split_shorthand(self.model)  # only when no base_url came from anywhere: one always wins
            if found is not None:
                self._shorthand = self.model
                self.base_url, self.model = PROVIDERS[found[0]], found[1]
        if needs_server:
            missing = [f for f in ("model", "base_url") if not getattr(self, f)]
            if missing:
                raise ValueError(f"backend {self.backend} needs {' and '.join(missing)} "
                                 "(in the file, KBVQA_BASE_URL/KBVQA_MODEL or KBVQA_<ROLE>_BASE_URL/_MODEL; "
                                 f"or model = \"PROVIDER/NAME\" with PROVIDER one of {', '.join(PROVIDERS)})")
        if self.backend == "rules" and not (self.rule or self.model):
            raise ValueError("backend rules needs rule = \"<registered rule name>\"")
        if self.backend == "replay" and not self.cassette:
            raise ValueError("backend replay needs cassette = \"<path to .jsonl>\"")
        return self


class CacheConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: Path | None = None
    enabled: bool = True


class ModelsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    roles: dict[str, RoleConfig | list[RoleConfig]] = Field(default_factory=dict)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    #: `[prompts]`: a prompt's name -> the user's template file that replaces it (kbvqa.models.prompts)
    prompts: dict[str, Path] = Field(default_factory=dict)
    source: Path | None = None  # the file it came from, for messages and the manifest


def _fmt_loc(prefix: str, e: ValidationError, model: type[BaseModel] | None = None) -> str:
    """pydantic's errors as `prefix.key: message`; a misspelt key of `model` with the closest known one."""
    out = []
    for er in e.errors()[:5]:
        loc = ".".join(str(x) for x in er["loc"])
        msg = er["msg"].removeprefix("Value error, ")
        if model is not None and er.get("type") == "extra_forbidden":
            msg += did_you_mean(model, tuple(er["loc"]))
        out.append(f"{prefix}{'.' + loc if loc else ''}: {msg}")
    return "; ".join(out)


def _apply_overrides(role: str, entry: dict[str, Any], env: dict[str, str], overrides: dict[str, Any]) -> dict:
    def put(updates: dict[str, Any]) -> None:
        if {"timeout", "read_timeout"} & set(updates):  # an override of either name replaces the file's both
            d.pop("timeout", None)
            d.pop("read_timeout", None)
        d.update(updates)

    d = dict(entry)
    backend = d.get("backend", "openai")
    if backend == "openai":
        if "base_url" not in d and env.get("KBVQA_BASE_URL"):
            d["base_url"] = env["KBVQA_BASE_URL"]
        if "model" not in d and env.get("KBVQA_MODEL"):
            d["model"] = env["KBVQA_MODEL"]
    for field in ("base_url", "model"):
        v = env.get(f"KBVQA_{role.upper()}_{field.upper()}")
        if v:
            d[field] = v
    if backend == "openai":
        put({k: v for k, v in overrides.items() if k not in ("roles", "cache") and v is not None})
    put({k: v for k, v in ((overrides.get("roles") or {}).get(role) or {}).items() if v is not None})
    return d


def load_model_config(path: Path | str | None, overrides: dict[str, Any] | None = None,
                      env: dict[str, str] | None = None) -> ModelsConfig:
    """Read `[models.*]` and `[cache]` from a TOML file (or nothing when path is None), apply env
    and flag overrides, and validate. Raises ConfigError naming the file and key."""
    env = dict(os.environ if env is None else env)
    overrides = dict(overrides or {})
    where = str(path) if path else "<flags/env>"
    raw: dict[str, Any] = {}
    base_dir = Path.cwd()
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{p}: config file not found")
        try:
            raw = tomllib.loads(p.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{p}: not valid TOML: {e}") from None
        check_tables(raw, p, ConfigError)  # a misspelt [modles.judge] is named, not "not configured"
        base_dir = p.resolve().parent
    models = raw.get("models", {})
    if not isinstance(models, dict):
        raise ConfigError(f"{where}: [models] must be a table of roles")
    names = set(models)
    for var in sorted(env):  # a misspelt role variable would be silently ignored: refuse it by name
        m = re.fullmatch(r"KBVQA_([A-Z0-9_]+)_(MODEL|BASE_URL)", var)
        if m and m.group(1).lower() not in ROLES:
            raise ConfigError(f"environment: {var}: {m.group(1).lower()!r} is not a model role "
                              f"(known roles: {', '.join(ROLES)})")
    names |= {r for r in ROLES if env.get(f"KBVQA_{r.upper()}_MODEL")}
    names |= set(overrides.get("roles") or {})
    roles: dict[str, Any] = {}
    for role in sorted(names):
        if role not in ROLES:
            import difflib

            close = difflib.get_close_matches(role, ROLES, n=1, cutoff=0.6)
            hint = f"did you mean [models.{close[0]}]? " if close else ""
            raise ConfigError(f"{where}: models.{role}: unknown role ({hint}known roles: {', '.join(ROLES)})")
        entry = models.get(role, {})
        entries = entry if isinstance(entry, list) else [entry]
        if isinstance(entry, list) and role not in MULTI_ROLES:
            raise ConfigError(f"{where}: models.{role}: only {', '.join(MULTI_ROLES)} may list several models")
        built = []
        for i, e in enumerate(entries):
            label = f"models.{role}" + (f"[{i}]" if isinstance(entry, list) else "")
            if not isinstance(e, dict):
                raise ConfigError(f"{where}: {label}: must be a table")
            d = _apply_overrides(role, e, env, overrides)
            if d.get("cassette") and not Path(d["cassette"]).is_absolute():
                d["cassette"] = str(base_dir / d["cassette"])
            try:
                built.append(RoleConfig.model_validate(d))
            except ValidationError as err:
                raise ConfigError(f"{where}: {_fmt_loc(label, err, RoleConfig)}") from None
        roles[role] = built if isinstance(entry, list) else built[0]
    cache_raw = dict(raw.get("cache", {}) or {})
    cache_raw.update(overrides.get("cache") or {})
    try:
        cache = CacheConfig.model_validate(cache_raw)
    except ValidationError as err:
        raise ConfigError(f"{where}: {_fmt_loc('cache', err, CacheConfig)}") from None
    if cache.path is not None and not cache.path.is_absolute():
        cache.path = base_dir / cache.path
    files = raw.get("prompts", {})
    if not isinstance(files, dict) or not all(isinstance(v, str) and v.strip() for v in files.values()):
        raise ConfigError(f"{where}: [prompts] maps a prompt's name to a file path, e.g. "
                          '"agent.system" = "prompts/agent.txt"')
    prompts = {name: base_dir / Path(f).expanduser() for name, f in files.items()}  # relative to the file
    return ModelsConfig(roles=roles, cache=cache, prompts=prompts, source=Path(path) if path else None)


def use_config_prompts(cfg: ModelsConfig) -> None:
    """Put the file's `[prompts]` in force (under `kbvqa --prompt-file`, which wins); a file that
    cannot replace its prompt is a ConfigError naming the config file."""
    from kbvqa.models.prompts import PromptFileError, use_prompt_files

    try:
        use_prompt_files(dict(cfg.prompts), layer="config")
    except PromptFileError as exc:
        raise ConfigError(f"{cfg.source}: [prompts]: {exc}") from None


def _build_one(role: str, rc: RoleConfig, cache: ResponseCache | None, env: dict[str, str]) -> ModelClient:
    if rc.backend == "rules":
        name = rc.rule or rc.model or ""
        return RulesClient(name, get_rule(role, name))
    key = None
    if rc.api_key_env:
        register_key_env(rc.api_key_env)  # whatever a server echoes of it is redacted (kbvqa.data.redact)
        key = env.get(rc.api_key_env)
        if not key:
            raise ConfigError(f"models.{role}: api_key_env names {rc.api_key_env!r}, which is not set")
        register_secret(key)

    def openai() -> ModelClient:
        from kbvqa.models.client import OpenAIChatClient  # the HTTP stack only when a server role is built

        return OpenAIChatClient(
            rc.base_url or "", rc.model or "", key, concurrency=rc.concurrency, timeout=rc.read_timeout,
            connect_timeout=rc.connect_timeout, deadline=rc.deadline, structured_output=rc.structured_output,
            max_retries=rc.max_retries, backoff_base=rc.backoff_base, backoff_max=rc.backoff_max,
            temperature=rc.temperature, max_tokens=rc.max_tokens, price_in_per_mtok=rc.price_in_per_mtok,
            price_out_per_mtok=rc.price_out_per_mtok, cache=cache, extra_params=rc.extra_params,
            json_schema_strict=rc.json_schema_strict,
            **({"max_reply_bytes": rc.max_reply_bytes} if rc.max_reply_bytes is not None else {}))

    if rc.backend == "openai":
        return openai()
    inner = openai() if rc.replay_mode == "record" else None
    return ReplayClient(rc.cassette or "", mode=rc.replay_mode, inner=inner)


CACHE_ENV = "KBVQA_CACHE"
_OFF = ("0", "off", "false", "no", "none")


def cache_path(cfg: ModelsConfig | None = None, env: dict[str, str] | None = None) -> Path | None:
    """Where deterministic model replies are cached, or None for no cache. Highest first:
    KBVQA_CACHE (`kbvqa --no-cache` sets "off", `kbvqa --cache PATH` a path), the file's `[cache]`
    (`enabled = false` turns it off), then the user cache folder: re-running a judge or an audit
    costs nothing for the calls it already made, without a config file."""
    env = dict(os.environ if env is None else env)
    flag = env.get(CACHE_ENV, os.environ.get(CACHE_ENV, "")).strip()  # a process setting (the root flags)
    if flag.lower() in _OFF:
        return None
    if flag:
        return Path(flag).expanduser()
    if cfg is not None and not cfg.cache.enabled:
        return None
    if cfg is not None and cfg.cache.path is not None:
        return cfg.cache.path
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "kbvqa" / "responses.sqlite"


def open_cache(where: Path | None) -> ResponseCache | None:
    """The ResponseCache at `where` (None: none); one that cannot be opened is a ConfigError."""
    if where is None:
        return None
    try:
        return ResponseCache(where)
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(f"{where}: cannot open the response cache ({exc}); "
                          "give kbvqa --cache PATH or --no-cache") from None


def build_roles(cfg: ModelsConfig, env: dict[str, str] | None = None, *,
                cache: ResponseCache | None | bool = True) -> dict[str, ModelClient | list[ModelClient]]:
    """Clients for every configured role (lists stay lists); openai roles share one cache (`cache`
    True: the one `cache_path` names; a ResponseCache: that one; None/False: none)."""
    env = dict(os.environ if env is None else env)
    if cache is True:
        cache = open_cache(cache_path(cfg, env))
    elif cache is False:
        cache = None
    out: dict[str, ModelClient | list[ModelClient]] = {}
    for role, rc in cfg.roles.items():
        if isinstance(rc, list):
            out[role] = [_build_one(role, r, cache, env) for r in rc]
        else:
            out[role] = _build_one(role, rc, cache, env)
    return out


# What makes a config key secret when its value is written out (manifests, role descriptions): any
# key/token/secret/password/credential/authorization in the name, or `auth` as a word part. A keyword
# list (`block_keywords`) is a setting, not a key.
_SECRET_NAME = re.compile(r"key(?!words?(?:$|[_-]))|token|secret|passw|credential|authorization|(?:^|[_-])auth(?:$|[_-])",
                          re.IGNORECASE)
# URL query parameters additionally hide signatures (`?sig=`, `X-Amz-Signature=`).
_SECRET_PARAM = re.compile(_SECRET_NAME.pattern + "|sig", re.IGNORECASE)


def is_secret_key(key: Any) -> bool:
    return isinstance(key, str) and bool(_SECRET_NAME.search(key))


def redact_url(url: str, *, marker: str = "<redacted>") -> str:
    """Drop `user:password@` and hide key-like query parameters (`?api_key=...`); anything that does
    not parse as an absolute URL is returned as it came, and so is a URL with nothing to hide."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.scheme or not parts.netloc:
        return url
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = parts.query
    pairs = parse_qsl(query, keep_blank_values=True) if query else []
    if any(_SECRET_PARAM.search(k) for k, _ in pairs):
        query = urlencode([(k, marker if _SECRET_PARAM.search(k) else v) for k, v in pairs])
    if netloc == parts.netloc and query == parts.query:
        return url  # untouched: keep the exact spelling
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact(value: Any, *, marker: str = "<redacted>") -> Any:
    """A copy of `value` that is safe to write down: the one redactor (the run manifest uses it too,
    with its own marker).

    Recursively through mappings and lists, the value under a secret-looking key (`is_secret_key`)
    is replaced by `marker`. Numbers, booleans and None under
    such keys are kept: they are counts and switches (`max_tokens`, `use_api_key`), never credentials,
    and hiding them would hide the run's settings. Strings holding a URL lose their credentials
    (`redact_url`); paths become strings."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if is_secret_key(k) and not (v is None or isinstance(v, (bool, int, float))):
                out[str(k)] = marker
            else:
                out[str(k)] = redact(v, marker=marker)
        return out
    if isinstance(value, (list, tuple)):
        return [redact(v, marker=marker) for v in value]
    if isinstance(value, str) and "://" in value:
        return redact_url(value, marker=marker)
    if isinstance(value, Path):
        return str(value)
    return value


def describe_roles(cfg: ModelsConfig) -> dict[str, Any]:
    """Manifest entry: per role backend, model, base URL and params; never a key."""

    def one(rc: RoleConfig) -> dict[str, Any]:
        d = rc.model_dump(mode="json", exclude_none=True)
        if rc.backend != "replay":
            d.pop("cassette", None)
            d.pop("replay_mode", None)
        if rc.backend == "rules":
            d = {k: d[k] for k in ("backend", "model", "rule") if k in d}
        if rc.shorthand:  # base_url and model above are the resolved ones: say where they came from
            d["shorthand"] = rc.shorthand
            d["provider"] = rc.provider
        return redact(d)

    return {"source": str(cfg.source) if cfg.source else None,
            "roles": {r: ([one(x) for x in rc] if isinstance(rc, list) else one(rc)) for r, rc in cfg.roles.items()},
            "cache": {"path": str(cfg.cache.path) if cfg.cache.path else None, "enabled": cfg.cache.enabled}}


def roles_from_flags(config: Path | str | None = None, *, llm: str | None = None, model: str | None = None,
                     api_key_env: str | None = None, replay: Path | str | None = None, fill: tuple[str, ...] = (),
                     concurrency: int = 8, timeout: float | None = None, connect_timeout: float | None = None,
                     deadline: float | None = None, structured_output: StructuredOutput | None = None,
                     max_retries: int | None = None, env: dict[str, str] | None = None,
                     ) -> dict[str, ModelClient | list[ModelClient]]:
    """The model roles of one job, from the places a user sets them — the one builder every command uses.

    Roles configured in `config` (`[models.*]` of a kbvqa.toml; a file without that table adds none)
    and by `KBVQA_<ROLE>_MODEL` variables come first. Then `--llm URL --model NAME` (or `--replay
    CASSETTE`) fills every role named in `fill` with ONE client, replacing those roles from the file:
    one client means one concurrency limit, so the job's `--concurrency` is what reaches the server.
    `--model PROVIDER/NAME` without `--llm` (a known provider: `PROVIDERS`) uses that provider's
    default base URL; with `--llm` the model name is sent exactly as written.

    The call limits — `timeout` (the read timeout), `connect_timeout`, `deadline` (one whole call,
    retries and backoff included), `structured_output`, `max_retries` — are flags: None leaves the
    role's own setting (the file's, else RoleConfig's default); a value applies to the `--llm`
    client and overrides every openai role from the file.
    Raises ConfigError (a ValueError) naming the file and key, or the flag, that is wrong."""
    env = dict(os.environ if env is None else env)
    limits = {k: v for k, v in (("read_timeout", timeout), ("connect_timeout", connect_timeout),
                                ("deadline", deadline), ("structured_output", structured_output),
                                ("max_retries", max_retries)) if v is not None}
    roles: dict[str, ModelClient | list[ModelClient]] = {}
    cache: ResponseCache | None = None
    from_env = bool(fill) and replay is None and not (llm or model) and bool(env.get("KBVQA_MODEL"))
    if from_env:  # KBVQA_BASE_URL + KBVQA_MODEL: the --llm/--model of every job that was given neither
        llm, model = env.get("KBVQA_BASE_URL") or None, env["KBVQA_MODEL"]
        if not llm and split_shorthand(model) is None:
            raise ConfigError("environment: KBVQA_MODEL is set without KBVQA_BASE_URL: set both (or a "
                              f"PROVIDER/NAME model, PROVIDER one of {', '.join(PROVIDERS)}), or unset it")
    shorthand = not llm and split_shorthand(model) is not None  # `--model ollama/qwen2.5vl:7b` alone
    if config is not None or any(env.get(f"KBVQA_{r.upper()}_MODEL") for r in ROLES):
        cfg = load_model_config(config, overrides=limits, env=env)
        if config is not None:
            use_config_prompts(cfg)
        cache = open_cache(cache_path(cfg, env))
        roles.update(build_roles(cfg, env=env, cache=cache))
    elif model and (llm or shorthand):
        cache = open_cache(cache_path(None, env))
    if replay is not None:
        if llm or model:
            raise ConfigError("choose either --replay or --llm/--model")
        client: ModelClient = ReplayClient(replay)
    elif llm or model:
        if not (model and (llm or shorthand)):
            raise ConfigError("--llm and --model go together (server URL and model name); without --llm, "
                              f"--model PROVIDER/NAME with PROVIDER one of {', '.join(PROVIDERS)} "
                              "(e.g. ollama/qwen2.5vl:7b) uses that provider's default base URL")
        try:
            rc = RoleConfig(backend="openai", base_url=llm, model=model, api_key_env=api_key_env,
                            concurrency=concurrency, **limits)
        except ValidationError as err:
            raise ConfigError(_fmt_loc("flags", err)) from None
        client = _build_one("flags", rc, cache, env)
    else:
        return roles
    filled = []
    for role in fill:
        if role not in ROLES:
            raise ConfigError(f"unknown role {role!r} (known roles: {', '.join(ROLES)})")
        if from_env and role in roles:  # the environment is a default: a role of the file keeps its model
            continue
        roles[role] = client
        filled.append(role)
    if from_env and filled:  # said at start: a model from the shell is easy to forget
        import sys

        print(f"model roles {', '.join(filled)}: {model} at {redact_url(str(getattr(client, 'base_url', llm)))} "
              "(from KBVQA_MODEL/KBVQA_BASE_URL; --llm/--model or [models.<role>] choose another)", file=sys.stderr)
    return roles


def one_role(roles: dict[str, Any], role: str, where: str = "the configuration") -> ModelClient:
    """The single client filling `role`; a missing role or a list of several is a ConfigError."""
    if role not in roles:
        raise ConfigError(f"model role {role!r} is not configured in {where} "
                          f"(configured: {', '.join(sorted(roles)) or 'none'})")
    client = roles[role]
    if isinstance(client, list):
        raise ConfigError(f"model role {role!r} lists several models; this job needs exactly one")
    return client
