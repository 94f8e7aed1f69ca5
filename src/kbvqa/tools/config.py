"""`[tools.web]` of a kbvqa.toml: the agent's web backend, configured like a model role.

It lives with the tools (not with the model roles in kbvqa.models.config) because it names tool
backends and providers; it reuses that module's file rules (no key values in a file) and errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kbvqa.models.config import ConfigError, refuse_keys_in_file
from kbvqa.runner.config import load_table
from kbvqa.tools.base import WEB_PROVIDERS


class WebToolsConfig(BaseModel):
    """`[tools.web]` of a kbvqa.toml: the agent's web backend, configured like a model role.

        [tools.web]
        provider = "searxng"                 # serper (default; any Serper-compatible API) | searxng
        base_url = "http://127.0.0.1:8888"   # serper: https://google.serper.dev unless set; searxng: required
        api_key_env = "SEARCH_KEY"           # the variable holding the key (serper: SERPER_API_KEY by default)

    Every other WebTools setting may be set here too (visit_via, top_k, timeout, max_api_bytes, ...);
    a field left out keeps WebTools' own default, which stays the only copy of it. Keys are never
    written here: only the name of the variable that holds one."""

    model_config = ConfigDict(extra="forbid")

    provider: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    visit_via: Literal["fetch", "scrape"] | None = None
    scrape_url: str | None = None
    top_k: int | None = Field(None, ge=1, le=100)
    images_per_query: int | None = Field(None, ge=1, le=5)
    concurrency: int | None = Field(None, ge=1, le=1024)
    timeout: float | None = Field(None, gt=0)
    retries: int | None = Field(None, ge=0, le=20)
    backoff: float | None = Field(None, ge=0)
    gl: str | None = None
    hl: str | None = None
    extractor_role: str | None = None
    max_page_bytes: int | None = Field(None, ge=1)
    max_api_bytes: int | None = Field(None, ge=1)
    page_timeout: float | None = Field(None, gt=0)
    allow_hosts: list[str] | None = None
    allow_private: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_keys_in_file(cls, data: Any) -> Any:
        return refuse_keys_in_file(data)

    @field_validator("provider")
    @classmethod
    def _provider(cls, v: str | None) -> str | None:
        if v is not None and v not in WEB_PROVIDERS:
            raise ValueError(f"unknown web provider {v!r} (choose from {', '.join(WEB_PROVIDERS)})")
        return v

    @field_validator("base_url", "scrape_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError(f"{v!r} is not an http(s) URL")
        return v


class ToolsConfig(BaseModel):
    """`[tools]` of a kbvqa.toml (one table per configurable tool backend)."""

    model_config = ConfigDict(extra="forbid")
    web: WebToolsConfig = Field(default_factory=WebToolsConfig)


def web_tool_options(config: Path | str | None = None, *, provider: str | None = None,
                     base_url: str | None = None, api_key_env: str | None = None) -> dict[str, Any]:
    """The web backend's settings (kbvqa.tools.web.WebTools keywords): `[tools.web]` of `config`, then
    the flags (`--web-provider`, `--web-base-url`, `--web-api-key-env`) over it. Only what was set is
    returned. Raises ConfigError naming the file and key, or the flag."""
    web = load_table(config, "tools", ToolsConfig, error=ConfigError).web if config is not None else WebToolsConfig()
    flags = {k: v for k, v in (("provider", provider), ("base_url", base_url), ("api_key_env", api_key_env))
             if v is not None}
    try:
        merged = WebToolsConfig.model_validate({**web.model_dump(exclude_none=True), **flags})
    except ValidationError as err:
        first = err.errors()[0]
        field = str((first.get("loc") or ("",))[0])
        where = f"--web-{field.replace('_', '-')}" if field in flags else f"{config}: tools.web.{field}"
        raise ConfigError(f"{where}: {first['msg'].removeprefix('Value error, ')}") from None
    return merged.model_dump(exclude_none=True)
