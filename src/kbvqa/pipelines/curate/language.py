"""Offline language identification for posts: Unicode scripts first, then stopword profiles.

Why not a model: curation must run with nothing downloaded, and the decision it feeds (keep posts in
the languages a benchmark wants; send the rest to translation) needs the language of a paragraph, not
of a word. Two signals settle that for the languages community platforms mostly carry:

1. **Script.** Letters are counted by Unicode script. Kana means Japanese, Hangul Korean, Han without
   kana Chinese; Cyrillic, Arabic, Devanagari, Thai, Greek and Hebrew name their language (Cyrillic
   with і/ї/є is Ukrainian). A script wins when it holds at least `SCRIPT_SHARE` of the letters.
2. **Stopwords**, for Latin script: the share of tokens that are frequent function words of each
   language (about 40 per language, chosen to overlap little). The best profile wins when it covers at
   least `MIN_STOPWORD_SHARE` of the tokens, `MIN_HITS` tokens in all, and beats the runner-up.

Anything else is `und` (undetermined), with the reason. `detect_language` returns the code, a
confidence in [0, 1] and the evidence, so a curator can see why a post was kept or dropped.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

__all__ = ["LanguageGuess", "SUPPORTED", "detect_language"]

SCRIPT_SHARE = 0.3
MIN_STOPWORD_SHARE = 0.12
MIN_HITS = 2

_STOPWORDS: dict[str, frozenset[str]] = {k: frozenset(v.split()) for k, v in {
    "en": "the and is are was were this that what which who how with for have has from you your my it its "
          "of to in on be can does did not they there would could should about any anyone know these those",
    "fr": "le la les des est une un et que qui dans pour pas sur avec sont ce cette je vous mon ma mes "
          "quel quelle quoi comment du au aux ou il elle nous ont fait très",
    "de": "der die das und ist nicht ein eine ich sie mit auf für den dem des zu was wie wer ist sind "
          "auch hat haben kann weiß jemand dieser diese dieses mein meine",
    "es": "el la los las es son una uno y que qué en por para con como cómo del al lo se mi mis alguien "
          "sabe este esta esto pero muy cuál dónde",
    "it": "il lo la gli le è sono una uno e che chi di da per con come del della questo questa non mio "
          "mia qualcuno sa cosa dove quale molto",
    "pt": "o a os as é são uma um e que quem de do da em para com como não meu minha alguém sabe isso "
          "este esta qual onde muito você",
    "nl": "de het een en is zijn niet dat wat wie hoe met voor op van ik je mijn weet iemand deze dit "
          "ook heeft kan waar welke",
}.items()}
SUPPORTED = ("en", "fr", "de", "es", "it", "pt", "nl", "zh", "ja", "ko", "ru", "uk", "ar", "hi", "th", "el", "he")

_SCRIPT_LANG = {"CYRILLIC": "ru", "ARABIC": "ar", "DEVANAGARI": "hi", "THAI": "th", "GREEK": "el", "HEBREW": "he"}
_TOKEN = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?", re.UNICODE)
_UKRAINIAN = set("іїєґІЇЄҐ")


@dataclass(frozen=True)
class LanguageGuess:
    language: str  # an ISO 639-1 code or "und"
    confidence: float
    evidence: str

    def as_dict(self) -> dict[str, object]:
        return {"language": self.language, "confidence": round(self.confidence, 3), "evidence": self.evidence}


def _script(ch: str) -> str:
    """The script of one letter, from its Unicode name (cheap and table-free)."""
    o = ord(ch)
    if o < 0x250:
        return "LATIN"
    if 0x3040 <= o <= 0x30FF or 0x31F0 <= o <= 0x31FF:
        return "KANA"
    if 0xAC00 <= o <= 0xD7AF or 0x1100 <= o <= 0x11FF or 0x3130 <= o <= 0x318F:
        return "HANGUL"
    if 0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x2FA1F:
        return "HAN"
    name = unicodedata.name(ch, "")
    return name.split(" ", 1)[0] if name else "OTHER"


def _scripts(text: str) -> Counter[str]:
    return Counter(_script(ch) for ch in text if ch.isalpha())


def detect_language(text: str) -> LanguageGuess:
    """The language of `text` (see the module docstring)."""
    scripts = _scripts(text)
    letters = sum(scripts.values())
    if letters == 0:
        return LanguageGuess("und", 0.0, "no letters")
    cjk = scripts["HAN"] + scripts["KANA"] + scripts["HANGUL"]
    if cjk / letters >= SCRIPT_SHARE:
        if scripts["KANA"] >= max(1, 0.05 * cjk):
            return LanguageGuess("ja", cjk / letters, f"kana {scripts['KANA']}, han {scripts['HAN']}")
        if scripts["HANGUL"] >= scripts["HAN"]:
            return LanguageGuess("ko", cjk / letters, f"hangul {scripts['HANGUL']}")
        return LanguageGuess("zh", cjk / letters, f"han {scripts['HAN']} without kana")
    for script, lang in _SCRIPT_LANG.items():
        if scripts[script] / letters >= SCRIPT_SHARE:
            if lang == "ru" and any(ch in _UKRAINIAN for ch in text):
                lang = "uk"
            return LanguageGuess(lang, scripts[script] / letters, f"{script.lower()} script")
    if scripts["LATIN"] / letters < SCRIPT_SHARE:
        top = scripts.most_common(1)[0][0]
        return LanguageGuess("und", 0.0, f"script {top.lower()} has no profile")
    tokens = [t.lower() for t in _TOKEN.findall(text)]
    if not tokens:
        return LanguageGuess("und", 0.0, "no words")
    hits = {lang: sum(1 for t in tokens if t in words) for lang, words in _STOPWORDS.items()}
    ranked = sorted(hits.items(), key=lambda kv: (-kv[1], kv[0]))
    (best, n1), (_, n2) = ranked[0], ranked[1]
    share = n1 / len(tokens)
    if n1 < MIN_HITS or share < MIN_STOPWORD_SHARE:
        return LanguageGuess("und", share, f"too few function words ({n1} of {len(tokens)} tokens)")
    if n1 == n2:
        return LanguageGuess("und", share, f"tie between {ranked[0][0]} and {ranked[1][0]} ({n1} function words)")
    margin = (n1 - n2) / n1
    return LanguageGuess(best, min(1.0, share * 2) * margin,
                         f"{n1} of {len(tokens)} tokens are {best} function words (runner-up {ranked[1][0]}: {n2})")
