"""Model roles: OpenAI-compatible client, rules and replay backends, response cache.

Every model call in kbvqa goes through this package: `OpenAIChatClient` (servers), `RulesClient`
(deterministic functions), `ReplayClient` (cassettes), all returning `ChatResult`.
"""

from kbvqa.models.cache import ResponseCache, make_key
from kbvqa.models.client import OpenAIChatClient, normalize_base_url
from kbvqa.models.config import ModelsConfig, RoleConfig, ConfigError, build_roles, describe_roles, load_model_config
from kbvqa.models.images import image_to_data_url, user_message
from kbvqa.models.jsonx import extract_json, strip_think
from kbvqa.models.replay import ReplayClient
from kbvqa.models.result import ChatResult, ModelClient
from kbvqa.models.rules import RulesClient, get_rule, register_rule

__all__ = [
    "ChatResult", "ConfigError", "ModelClient", "ModelsConfig", "OpenAIChatClient", "ReplayClient",
    "ResponseCache", "RoleConfig", "RulesClient", "build_roles", "describe_roles", "extract_json",
    "get_rule", "image_to_data_url", "load_model_config", "make_key", "normalize_base_url",
    "register_rule", "strip_think", "user_message",
]
