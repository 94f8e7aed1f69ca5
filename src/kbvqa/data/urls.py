"""URL canonicalisation: the one place that decides when two KB urls name the same article.

Benchmarks, KB dumps and retrievers spell the same Wikipedia article many ways (http vs https,
mobile host, percent-encoded vs Unicode, spaces vs underscores, lower-case first letter, trailing
slash or fragment). Every comparison of KB urls (KB keys, entity links, Recall@K) goes through
`canonical_url` so that they agree. The function is total (never raises on a str) and idempotent.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Iterable
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["canonical_url", "url_to_title", "title_to_url", "dedupe_urls", "normalize_title"]

WIKI_BASE = "https://en.wikipedia.org/wiki/"

# xx.m.wikipedia.org (and sister projects) -> xx.wikipedia.org
_MOBILE_HOST = re.compile(
    r"^(?P<lang>[a-z0-9-]+)\.m\.(?P<site>wikipedia|wiktionary|wikiquote|wikibooks|wikisource|wikinews|"
    r"wikiversity|wikivoyage|wikimedia)\.org$")
# scheme-less "en.wikipedia.org/wiki/X"
_BARE_WIKI = re.compile(r"^[a-z0-9.-]+\.(wikipedia|wikimedia|wikidata)\.org(/|$)", re.IGNORECASE)
_WIKI_HOST = re.compile(r"(^|\.)wikipedia\.org$")
_UNDERSCORES = re.compile(r"_+")


def _needs_escape(ch: str) -> bool:
    # Characters that, once decoded, would change how the url parses ('%', '#', '?') or vanish
    # under whitespace stripping (controls, non-space whitespace): kept percent-encoded so that
    # canonical_url(canonical_url(u)) == canonical_url(u).
    return ch in "%#?" or (ch != " " and ch.isspace()) or unicodedata.category(ch) in ("Cc", "Cf", "Cs")


def _escape(ch: str) -> str:
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))


def _norm_path(path: str, *, strip_left: bool = False) -> str:
    """Percent-decode to Unicode, trim whitespace and trailing '/', re-escape structural
    characters, spaces -> underscores."""
    decoded = unquote(path, errors="replace")
    while True:  # "a /", "a%20/" and "a/ " all end up as "a"
        trimmed = decoded.rstrip().rstrip("/")
        if strip_left:
            trimmed = trimmed.lstrip()
        if trimmed == decoded:
            break
        decoded = trimmed
    return _reescape(decoded).replace(" ", "_")


def _reescape(decoded: str) -> str:
    """`decoded` with the characters `_needs_escape` names percent-encoded again."""
    if decoded.isprintable() and "%" not in decoded and "#" not in decoded and "?" not in decoded:
        return decoded  # fast path: nothing to re-escape (printable excludes controls and odd spaces)
    return "".join(_escape(c) if _needs_escape(c) else c for c in decoded)


def _norm_title_part(title: str) -> str:
    # MediaWiki: runs of spaces/underscores collapse, no leading/trailing ones (any Unicode space
    # counts, so a no-break space left at an end once "_" is gone goes too), first letter upper-case.
    # `title` arrives escaped; it is decoded, trimmed to a fixed point and escaped again.
    decoded = unquote(title, errors="replace")
    while True:
        trimmed = _UNDERSCORES.sub("_", decoded).strip().strip("_").rstrip("/")
        if trimmed == decoded:
            break
        decoded = trimmed
    if decoded:
        first = decoded[0].upper()
        if len(first) == 1:  # 'ß'.upper() == 'SS': MediaWiki keeps such letters, so do we
            decoded = first + decoded[1:]
    return _reescape(decoded).replace(" ", "_")


def canonical_url(url: str) -> str:
    """The canonical spelling of a KB url (https, lower-case host, decoded Unicode path, ...).

    Two urls name the same article iff their canonical forms are equal. Strings that are not urls
    (bare titles, ids) are normalised the same way as a url path, never rejected.
    """
    if not isinstance(url, str):
        raise TypeError(f"canonical_url expects a str, got {type(url).__name__}: {url!r}")
    return _canonical(url)


@lru_cache(maxsize=65536)  # rankings and gold labels repeat the same urls many times
def _canonical(url: str) -> str:
    s = url.strip()
    if _BARE_WIKI.match(s):
        s = "https://" + s
    elif s.startswith("//"):
        s = "https:" + s
    try:
        parts = urlsplit(s)
    except ValueError:  # e.g. an unbalanced '[' in the host: treat the whole thing as opaque text
        return _norm_path(s.split("#", 1)[0], strip_left=True)
    scheme = parts.scheme.lower()
    if not parts.netloc:
        # Not an absolute url: normalise it like a path (keeps bare titles comparable).
        return _norm_path(s.split("#", 1)[0], strip_left=True)
    if scheme == "http":
        scheme = "https"
    host = (parts.hostname or "").rstrip(".")
    try:
        port = parts.port
    except ValueError:
        port = None
        host = parts.netloc.rsplit("@", 1)[-1].lower()
    if not host:  # e.g. "a://." — nothing left of the host: not an absolute url after all
        return _norm_path(s.split("#", 1)[0], strip_left=True)
    m = _MOBILE_HOST.match(host)
    if m:
        host = f"{m['lang']}.{m['site']}.org"
    netloc = host
    if port is not None and not (port == 443 and scheme == "https") and not (port == 80 and scheme == "http"):
        netloc = f"{host}:{port}"
    if "@" in parts.netloc:
        netloc = parts.netloc.rsplit("@", 1)[0] + "@" + netloc

    path, query = parts.path, parts.query
    # /w/index.php?title=X is the same article as /wiki/X
    if path == "/w/index.php" and query:
        q = parse_qs(query, keep_blank_values=True)
        if set(q) == {"title"} and len(q["title"]) == 1:
            path, query = "/wiki/" + q["title"][0].replace("%", "%25").replace("#", "%23").replace("?", "%3F"), ""
    path = _norm_path(path)
    if path.startswith("/wiki/") and _WIKI_HOST.search(host):
        title = _norm_title_part(path[len("/wiki/"):])
        path = "/wiki/" + title if title else "/wiki"  # "/wiki/" would lose its slash on the next pass
    out = f"{scheme}://{netloc}{path}"
    if query:
        out += "?" + query
    return out


def url_to_title(url: str) -> str:
    """The article title a url names: 'https://en.wikipedia.org/wiki/Edificio_Espa%C3%B1a' -> 'Edificio España'."""
    c = canonical_url(url)
    c = c.split("?", 1)[0]
    if "/wiki/" in c:
        raw = c.split("/wiki/", 1)[1]
    else:
        raw = c.rsplit("/", 1)[-1]
    return unquote(raw).replace("_", " ")


def title_to_url(title: str, base: str = WIKI_BASE) -> str:
    """The canonical url of a title under `base` (English Wikipedia by default)."""
    if not isinstance(title, str):
        raise TypeError(f"title_to_url expects a str, got {type(title).__name__}: {title!r}")
    escaped = "".join(_escape(c) if _needs_escape(c) else c for c in title.strip())
    url = canonical_url(base + escaped.replace(" ", "_"))
    if len(url) <= len(canonical_url(base)) + 1:
        raise ValueError(f"title {title!r} is empty once normalised (no url can name it)")
    return url


def normalize_title(title: str) -> str:
    """A title as Wikipedia would store it (what `url_to_title(title_to_url(t))` returns)."""
    return url_to_title(title_to_url(title))


def dedupe_urls(urls: Iterable[str]) -> list[str]:
    """Canonicalise and drop repeats, keeping the first occurrence and the order (Recall@K rankings)."""
    seen: set[str] = set()
    out: list[str] = []
    for u in urls:
        c = canonical_url(u)
        if c not in seen:
            seen.add(c)
            out.append(c)
    return out
