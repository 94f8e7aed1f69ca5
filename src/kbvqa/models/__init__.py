"""Model roles: OpenAI-compatible client, rules and replay backends, response cache.

Every model call in kbvqa goes through this package: `OpenAIChatClient` (servers), `RulesClient`
(deterministic functions), `ReplayClient` (cassettes), all returning `ChatResult`.

The names below are exported lazily (PEP 562): importing one light submodule (prompts, jsonx,
replies) must not import the HTTP client stack and Pillow, which a command that makes no model call
(`kbvqa score infoseek`) never uses.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "ResponseCache": "cache", "make_key": "cache",
    "OpenAIChatClient": "client", "normalize_base_url": "result",
    "ModelsConfig": "config", "RoleConfig": "config", "ConfigError": "config", "build_roles": "config",
    "describe_roles": "config", "load_model_config": "config",
    "image_to_data_url": "images", "user_message": "images",
    "extract_json": "jsonx", "strip_think": "jsonx",
    "ReplayClient": "replay",
    "ChatResult": "result", "ModelClient": "result",
    "RulesClient": "rules", "get_rule": "rules", "register_rule": "rules",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kbvqa.models' has no attribute {name!r}")
    return getattr(import_module(f"kbvqa.models.{module}"), name)
