"""`kbvqa.data.redact.redact`: the one step every error text passes before it is written or shown to a
model. Echoed keys in the shapes gateways, proxies and search APIs use."""

from __future__ import annotations

import pytest

from kbvqa.data.redact import MARK, redact, register_key_env, register_secret, secret_values

KEY = "sk-live-0123456789abcdefXYZ"


@pytest.mark.parametrize("text", [
    f"401 Unauthorized: invalid header Authorization: Bearer {KEY}",
    f'{{"error": "bad", "headers": {{"authorization": "Bearer {KEY}", "x-api-key": "{KEY}"}}}}',
    f"{{'Authorization': 'Bearer {KEY}', 'Content-Type': 'application/json'}}",
    f"X-API-KEY: {KEY}\r\nHost: api.example.org",
    f"https://api.example.org/v1/search?q=x&api_key={KEY}",
    f"token {KEY} expired",
])
def test_header_shapes_and_bearer_tokens_are_redacted_without_any_configuration(text, monkeypatch):
    for var in list(__import__("os").environ):
        if "KEY" in var or "TOKEN" in var:
            monkeypatch.delenv(var)
    out = redact(text)
    assert KEY not in out and MARK in out


def test_configured_key_values_are_redacted_wherever_they_stand(monkeypatch):
    monkeypatch.setenv("ODD_SEARCH_SETTING", "plain-words-value-77")
    assert redact("the key plain-words-value-77 was refused") == "the key plain-words-value-77 was refused"
    register_key_env("ODD_SEARCH_SETTING")  # an api_key_env setting names it
    assert redact("the key plain-words-value-77 was refused") == f"the key {MARK} was refused"
    monkeypatch.setenv("JUDGE_API_KEY", "abcdef123456")  # a name that says it holds a secret
    assert redact("echo: abcdef123456.") == f"echo: {MARK}."
    register_secret("handed-over-directly-1")
    assert "handed-over-directly-1" not in redact("got handed-over-directly-1")
    assert redact("x 123", extra=("x 123456",)) == "x 123"


def test_short_values_and_plain_text_are_left_alone(monkeypatch):
    monkeypatch.setenv("TINY_API_KEY", "abc")
    assert "abc" not in secret_values()
    for text in ("HTTP 500 from http://127.0.0.1:8000/v1: internal error", "api_key_env names X, which is not set",
                 "the tools are search, visit; the key is sent as X-API-KEY", ""):
        assert redact(text) == text


def test_url_credentials_are_redacted():
    assert redact("refused http://bob:pa55word@10.0.0.1/x: credentials in the URL") == \
        f"refused http://{MARK}@10.0.0.1/x: credentials in the URL"
