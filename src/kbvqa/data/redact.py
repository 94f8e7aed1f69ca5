"""One redaction step for text that leaves the process: error bodies, reasons, observations, log lines.

Servers echo what they were sent: a gateway's 401 may quote the `Authorization` header, a 500 may
list the request headers, a search API may repeat the key it refused. Whatever kbvqa writes down
(journals, manifests, viewer pages, stderr) or hands to a model as an observation must pass through
`redact(text)` first. It replaces, with `[redacted]`:

- every configured key VALUE: the environment variables named by `api_key_env` settings (model
  roles, the web backend: `register_key_env`), keys handed over directly (`register_secret`), the
  client fall-backs KBVQA_API_KEY / OPENAI_API_KEY, and any environment variable whose name says it
  holds a secret (`*_API_KEY`, `*_TOKEN`, `*_SECRET`, `*_PASSWORD`, ...);
- the value of key-carrying headers and fields however they are quoted (`Authorization: Bearer x`,
  `"x-api-key": "x"`, `api_key=x`, `'authorization': 'Basic x'`, a URL's `?key=x`);
- bearer tokens (`Bearer x`), `sk-`-style API keys and `user:password@` in URLs, wherever they stand.

Values shorter than `MIN_SECRET_CHARS` are not searched for as text (a one-letter "key" would blank
every occurrence of that letter); the header and bearer patterns still catch them in context.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping

MARK = "[redacted]"
MIN_SECRET_CHARS = 6
#: the variables the model client falls back to, and the web backend's default
DEFAULT_KEY_ENVS = ("KBVQA_API_KEY", "OPENAI_API_KEY", "SERPER_API_KEY")
_SECRET_ENV_NAME = re.compile(r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|AUTH)$",
                              re.IGNORECASE)
_HEADER_VALUE = re.compile(
    r"""(?P<name>(?:proxy-)?authorization|x-api-key|x-goog-api-key|api[-_]?key|apikey|access[-_]?token|"""
    r"""(?<=[?&])(?:key|token|sig|signature)|"""
    r"""auth[-_]?token|x-auth-token|secret[-_]?key|client[-_]?secret|password)"""
    r"""(?P<sep>["']?\s*[:=]\s*["']?)(?P<scheme>(?:bearer|basic|token|apikey)\s+)?(?P<value>[^\s"',;&}\]\)]+)""",
    re.IGNORECASE)
_BEARER = re.compile(r"\b(?P<scheme>bearer|basic)\s+(?P<value>[A-Za-z0-9._~+/=:-]{6,})", re.IGNORECASE)
_SK_KEY = re.compile(r"\bsk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_-]{16,}")
_URL_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^/\s@?#]+@", re.IGNORECASE)

_lock = threading.Lock()
_key_envs: set[str] = set(DEFAULT_KEY_ENVS)
_secrets: set[str] = set()


def register_key_env(name: str | None) -> None:
    """Remember that the environment variable `name` holds a key (an `api_key_env` setting)."""
    if name:
        with _lock:
            _key_envs.add(name)


def register_secret(value: str | None) -> None:
    """Remember a key value handed over directly (not through an environment variable)."""
    if value and len(value.strip()) >= MIN_SECRET_CHARS:
        with _lock:
            _secrets.add(value.strip())


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    """Every key value redaction looks for, longest first (so a key containing another goes whole)."""
    env = os.environ if env is None else env
    with _lock:
        names, values = set(_key_envs), set(_secrets)
    names |= {k for k in env if _SECRET_ENV_NAME.search(k)}
    values |= {env[n].strip() for n in names if env.get(n)}
    return sorted((v for v in values if len(v) >= MIN_SECRET_CHARS), key=len, reverse=True)


def redact(text: str, *, extra: Iterable[str] = (), env: Mapping[str, str] | None = None) -> str:
    """`text` with every configured key value, key-carrying header value, bearer token and URL
    password replaced by `[redacted]` (see the module docstring). `extra`: more values to hide."""
    if not text:
        return text
    out = str(text)
    for value in sorted({*secret_values(env), *(v for v in extra if v and len(v) >= MIN_SECRET_CHARS)},
                        key=len, reverse=True):
        if value in out:
            out = out.replace(value, MARK)
    out = _HEADER_VALUE.sub(lambda m: f"{m['name']}{m['sep']}{m['scheme'] or ''}{MARK}"
                            if m["value"] != MARK else m[0], out)
    out = _BEARER.sub(lambda m: f"{m['scheme']} {MARK}" if m["value"] != MARK else m[0], out)
    out = _SK_KEY.sub(MARK, out)
    return _URL_USERINFO.sub(lambda m: f"{m['scheme']}{MARK}@", out)


def excerpt(text: str, chars: int, *, extra: Iterable[str] = ()) -> str:
    """The start of a server's body for an error reason: redacted BEFORE it is cut (a cut through an
    echoed key would leave a prefix no pattern recognises). The text is first bounded at 10x `chars`,
    which keeps whole any key that starts inside the part kept."""
    return redact(text[: chars * 10], extra=extra)[:chars]


class RedactingFilter(logging.Filter):
    """Redacts a log record's message (its arguments filled in) before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


def redact_logs(*names: str) -> None:
    """Attach the filter to kbvqa's loggers (a logger's filters see only what is logged to it by name,
    so each one kbvqa logs to is named here)."""
    for name in names or ("kbvqa", "kbvqa.runner", "kbvqa.viewer"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) for f in logger.filters):
            logger.addFilter(RedactingFilter())


redact_logs()
