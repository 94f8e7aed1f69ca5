"""Agent tool backends: one typed contract (`tools.base`), the harness side (`tools.toolbox`: validation,
cache, leakage guard), the tool cache, and the registered backends — `local` (the KB, offline) and
`web` (a search provider — Serper or any Serper-compatible API, or a self-hosted SearXNG — and guarded
page fetches; settings in `tools.config`). `--tools replay` is not a backend of its own: it runs the
recorded backend's Toolbox from a cassette and treats any miss as an error."""

from kbvqa.registry import Registry

TOOL_BACKENDS: Registry = Registry("tool_backend", modules=("kbvqa.tools.local", "kbvqa.tools.web"))
