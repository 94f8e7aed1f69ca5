"""Model roles: OpenAI-compatible client, rules and replay backends, response cache."""
