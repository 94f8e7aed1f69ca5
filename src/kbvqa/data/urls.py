"""URL canonicalisation: the one place that decides when two KB urls name the same article.
(Placeholder: the KB helper replaces this with the full implementation.)"""

from __future__ import annotations

from urllib.parse import unquote


def canonical_url(url: str) -> str:
    u = unquote(url.strip())
    if u.startswith("http://"):
        u = "https://" + u[len("http://"):]
    return u.rstrip("/").replace(" ", "_")
