"""Text matching for the rules audit: normalisation, word-bounded phrase matching, numbers, units,
dates and country names.

Why one module: every audit stage (verification, derivability, posedness, leakage) must agree on when
an answer "appears" in a text, or the stages contradict each other. Matching is on tokens, never raw
substrings, so "Iran" is not found in "Tirana" and "6" is not found in "1906". Tokens keep their
character offsets, so a match can be returned *as the source text writes it* (the corrector only
ever rewrites an answer to a span copied from the evidence).

Normalisation (applied to both sides): Unicode NFC then accents folded, lower case, apostrophes
inside words removed, a possessive "'s" dropped ("Venice's" = "Venice"), punctuation dropped,
thousands separators removed ("1,234" = "1234"), decimals canonical ("4.10" = "4.1"), number words as
digits ("three" = "3"), ordinals as one token whether written in digits or words ("8th" = "eighth"),
articles a/an/the dropped, and a dash or "to" between two numbers kept as one range token ("6 - 7" =
"6–7" = "6 to 7").

Looser matches, each a separate function so a caller can say which kind of match it accepted:
inflected forms (`find_inflected`: plural/singular, "convicts" = "convict", "Ottomans" = "Ottoman"),
abbreviated forms (`find_abbreviated`: "H. sapiens" = "Homo sapiens", "Florence K. Upton" = "Florence
Kate Upton"), one word spelled differently (`find_near_phrase`), and equivalent names
(`equivalent_forms`: country <-> demonym, exonyms and local spellings such as Munich/München, the
Saint/San/St. prefixes, "X Empire" <-> "X").
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, NamedTuple

# --------------------------------------------------------------------------------------------- tokens

NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20,
    "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
    "hundred": 100, "dozen": 12,
}
ORDINAL_WORDS = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5, "sixth": 6, "seventh": 7, "eighth": 8,
    "ninth": 9, "tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13, "fourteenth": 14,
    "fifteenth": 15, "sixteenth": 16, "seventeenth": 17, "eighteenth": 18, "nineteenth": 19,
    "twentieth": 20, "thirtieth": 30, "fortieth": 40, "fiftieth": 50, "hundredth": 100,
}


def ordinal(n: int) -> str:
    """The canonical ordinal token: 1st, 2nd, 3rd, 4th, 11th, 21st ..."""
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"
ARTICLES = frozenset({"a", "an", "the"})
_DASHES = "-\u2010\u2011\u2012\u2013\u2014\u2212"
_APOS = "'\u2019\u02bb\u02bc\u2018`\u00b4"
_TOKEN_RE = re.compile(
    r"\d+(?:st|nd|rd|th)\b"                    # ordinals: 8th, 21st
    r"|\d{1,3}(?:,\d{3})+(?:\.\d+)?"          # 1,234 or 1,234.5
    r"|\d+(?:\.\d+)?"                          # 1234 or 4.10
    rf"|\w+(?:[{_APOS}]\w+)*"                  # words, with inner apostrophes (Lloyd's, Hawaiʻi)
    rf"|[{_DASHES}]"                           # dashes: kept only between numbers
    r"|%"
)


class Token(NamedTuple):
    norm: str
    start: int
    end: int


_APOS_TABLE = {ord(c): None for c in _APOS}


@lru_cache(maxsize=65536)
def fold(text: str) -> str:
    """Lower case, accents removed, apostrophes removed (for one token or a short string).
    Cached, with an ASCII fast path: it runs once per token and dominated the rules' CPU time."""
    if text.isascii():
        return text.translate(_APOS_TABLE).lower()
    t = unicodedata.normalize("NFKD", text)
    t = "".join(c for c in t if not unicodedata.combining(c))
    t = t.translate(_APOS_TABLE)
    return t.lower().replace("ß", "ss").replace("ø", "o").replace("đ", "d").replace("ł", "l")


def canon_number(s: str) -> str:
    """'1,234' -> '1234', '4.10' -> '4.1', '2.0' -> '2' (kept as text so 1986 stays 1986)."""
    s = s.replace(",", "")
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return s or "0"


def _is_num(tok: str) -> bool:
    return bool(tok) and (tok[0].isdigit())


@lru_cache(maxsize=262144)
def _norm_word(s: str) -> str:
    """The normalised form of one raw token (see the module docstring)."""
    if s[0].isdigit():
        return ordinal(int(s[:-2])) if s[-1].isalpha() else canon_number(s)
    if s in _DASHES:
        return "-"
    if s == "%":
        return "%"
    if len(s) > 2 and s[-1] in "sS" and s[-2] in _APOS:
        s = s[:-2]  # possessive: "Venice's" -> "Venice"
    norm = fold(s)
    if norm in NUMBER_WORDS:
        return str(NUMBER_WORDS[norm])
    if norm in ORDINAL_WORDS:
        return ordinal(ORDINAL_WORDS[norm])
    return norm


@lru_cache(maxsize=32768)
def tokenize(text: str) -> tuple[Token, ...]:
    """Normalised tokens with offsets into `text` (see the module docstring for the rules)."""
    text = unicodedata.normalize("NFC", text or "")
    new = tuple.__new__  # Token(...) runs a Python-level __new__; this is the C one, same result
    raw = [new(Token, (_norm_word(m.group(0)), m.start(), m.end())) for m in _TOKEN_RE.finditer(text)]
    out: list[Token] = []
    for i, t in enumerate(raw):
        if t.norm in ARTICLES:
            continue
        if t.norm in ("-", "to"):
            prev_num = bool(out) and _is_num(out[-1].norm)
            next_num = i + 1 < len(raw) and _is_num(raw[i + 1].norm)
            if not (prev_num and next_num):
                continue  # a hyphen inside words, or "to" as a preposition
            t = Token("-", t.start, t.end)
        out.append(t)
    return tuple(out)


@lru_cache(maxsize=65536)
def norm(text: str) -> str:
    """The normalised form of a text: its tokens joined by single spaces."""
    return " ".join(t.norm for t in tokenize(text))


def find_phrase(text: str, phrase: str) -> str | None:
    """The span of `text` (as written) matching `phrase` word-bounded after normalisation, or None."""
    needle = [t.norm for t in tokenize(phrase)]
    if not needle or needle[0] not in _vocab(text):
        return None
    toks = tokenize(text)
    n = len(needle)
    first = needle[0]
    for i in range(len(toks) - n + 1):
        if toks[i].norm == first and all(toks[i + j].norm == needle[j] for j in range(1, n)):
            return unicodedata.normalize("NFC", text)[toks[i].start:toks[i + n - 1].end]
    return None


def stem(tok: str) -> str:
    """A light singular form of a normalised word token ("convicts" -> "convict", "marshes" ->
    "marsh", "cities" -> "city"; "grass", "cactus" and "iris" kept); numbers and words under four
    letters are kept. Both sides of a comparison go through it, so it need not be a real lemma."""
    if len(tok) < 4 or not tok.isalpha():
        return tok
    if tok.endswith("ies") and len(tok) > 4:
        return tok[:-3] + "y"
    if tok.endswith(("sses", "xes", "zes", "ches", "shes")):
        return tok[:-2]
    if tok.endswith("s") and not tok.endswith(("ss", "us", "is")):
        return tok[:-1]
    return tok


@lru_cache(maxsize=32768)
def _stems(text: str) -> tuple[str, ...]:
    return tuple(stem(t.norm) for t in tokenize(text))


@lru_cache(maxsize=32768)
def _vocab(text: str) -> frozenset[str]:
    """Every normalised token and stem of a text: a cheap test before a phrase scan."""
    return frozenset(t.norm for t in tokenize(text)) | frozenset(_stems(text))


def vocab(text: str) -> frozenset[str]:
    """Every normalised token of `text` and its singular form (cached)."""
    return _vocab(text)


@lru_cache(maxsize=32768)
def phrase_keys(phrase: str) -> frozenset[str]:
    """Every token (and singular form) of `phrase` and of its equivalent names and capitals: a text
    sharing none of them cannot state the phrase by any word-based match (phrase, equivalent,
    inflection, coordination, abbreviation, spelling, list)."""
    keys = set(_vocab(phrase))
    for f in equivalent_forms(phrase) + capitals_of(phrase):
        keys |= _vocab(f)
    return frozenset(keys)


def _span(text: str, toks: tuple[Token, ...], i: int, n: int) -> str:
    return unicodedata.normalize("NFC", text)[toks[i].start:toks[i + n - 1].end]


def find_inflected(text: str, phrase: str) -> str | None:
    """The span of `text` matching `phrase` word by word up to inflection (plural/singular:
    "Ottomans" ~ "Ottoman", "convict" ~ "convicts"), or None. (An exact match matches too: callers
    try find_phrase first to tell the kinds apart.)"""
    needle = _stems(phrase)
    if not needle or not set(needle) <= _vocab(text):
        return None
    hay = _stems(text)
    n = len(needle)
    if n > len(hay):
        return None
    toks = tokenize(text)
    for i in range(len(hay) - n + 1):
        if hay[i:i + n] == needle:
            return _span(text, toks, i, n)
    return None


def _initial(text: str, tok: Token) -> bool:
    """A single letter written as an abbreviation ("H." in "H. sapiens")."""
    return len(tok.norm) == 1 and tok.norm.isalpha() and text[tok.end:tok.end + 1] == "."


def find_adjective(text: str, phrase: str) -> str | None:
    """A one-word place name (capitalised, 4+ letters) written as its adjective in `text`: the
    name plus "n" or "an" ("Sonora" ~ "Sonoran desert", "Europe" ~ "European", "Asia" ~ "Asian")."""
    p = (phrase or "").strip()
    if " " in p or len(p) < 4 or not p[:1].isupper() or not p.isalpha():
        return None
    base = norm(p)
    vocab = _vocab(text)
    for form in (base + "n", base + "an", base.rstrip("e") + "ean"):
        if form in vocab:
            tok = next(t for t in tokenize(text) if t.norm == form)
            return unicodedata.normalize("NFC", text)[tok.start:tok.end]
    return None


# between the answer's modifier and the shared head: ", other modifiers" then "and|or" and one modifier
_COORD_GAP = re.compile(r"(?:\s*,\s*[\w'-]+)*\s*,?\s+(?:and|or|&)\s+[\w'-]+\s+")


def find_coordinated(text: str, phrase: str) -> str | None:
    """A "modifier head" phrase stated through a coordination that shares the head: "tannic acid"
    in "rich in tannic and gallic acids", "Persian architects" in "Ottoman, Persian and Italian
    architects" (up to four coordinated modifiers, the head up to inflection)."""
    needle = [t.norm for t in tokenize(phrase)]
    if len(needle) < 2:
        return None
    mods, head = needle[:-1], stem(needle[-1])
    vocab = _vocab(text)
    if head not in vocab or not set(mods) <= vocab:
        return None
    text = unicodedata.normalize("NFC", text or "")
    toks = tokenize(text)
    stems = _stems(text)
    n = len(mods)
    for i in range(len(toks) - n):
        if [t.norm for t in toks[i:i + n]] != mods:
            continue
        for j in range(i + n + 1, min(len(toks), i + n + 8)):
            if stems[j] == head:
                if _COORD_GAP.fullmatch(text[toks[i + n - 1].end:toks[j].start]):
                    return _span(text, toks, i, j - i + 1)
                break
    return None


def find_abbreviated(text: str, phrase: str) -> str | None:
    """A span of `text` matching `phrase` where one side abbreviates a word to its initial ("H.
    sapiens" ~ "Homo sapiens", "Florence K. Upton" ~ "Florence Kate Upton"): every other word equal,
    at least one full word of 3+ letters in common, and never only initials."""
    ptext = unicodedata.normalize("NFC", phrase or "")
    needle = tokenize(ptext)
    n = len(needle)
    if n < 2:
        return None
    ttext = unicodedata.normalize("NFC", text or "")
    if not any(len(t.norm) >= 3 and t.norm in _vocab(ttext) for t in needle):
        return None  # no full word in common
    if not any(_initial(ptext, t) for t in needle) and "." not in ttext:
        return None
    toks = tokenize(ttext)
    for i in range(len(toks) - n + 1):
        abbrev = exact = 0
        for j in range(n):
            a, b = toks[i + j], needle[j]
            if a.norm == b.norm:
                exact += len(a.norm) >= 3
                continue
            if (_initial(ttext, a) and b.norm.isalpha() and len(b.norm) > 1 and b.norm[0] == a.norm) or \
                    (_initial(ptext, b) and a.norm.isalpha() and len(a.norm) > 1 and a.norm[0] == b.norm):
                abbrev += 1
                continue
            break
        else:
            if abbrev and exact:
                return _span(ttext, toks, i, n)
    return None


_ELLIPSIS_RE = re.compile(r"(\.\.\.|\u2026)\s*[\"')\]]?\s*$")
_INITIALS_END = re.compile(r"[\s,(][A-Z]\. [A-Z]\.$")


def is_truncated(text: str | None) -> bool:
    """Evidence cut off by whoever wrote it: the text ends in "..." or "…" (E-VQA's evidence
    spans and ARA's final evidence are cut at ~320 characters this way), or stops inside a name's
    initials where a sentence splitter broke it ("... teammates Jim Landis, J. C.")."""
    t = (text or "").rstrip()[-24:].rstrip("\"')]").rstrip()
    return t.endswith("...") or t.endswith("\u2026") or _INITIALS_END.search(t) is not None


def truncated_stem(text: str) -> str:
    """The text of a truncated span without its trailing ellipsis."""
    return _ELLIPSIS_RE.sub("", text or "").rstrip()


def contains(text: str, phrase: str) -> bool:
    """Word-bounded, normalised containment ("Iran" is not in "Tirana"; "1,301" is in "1301 kg")."""
    needle = norm(phrase)
    if not needle:
        return False
    return f" {needle} " in f" {norm(text)} "


_CJK_CHAR = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def answers_in_text(text: str, answers: Iterable[str], min_chars: int = 3) -> list[str]:
    """The reference answers `text` states verbatim (normalised, word-bounded; an answer in a script
    written without spaces, such as Chinese, as a plain substring). Answers shorter than
    `min_chars` are skipped: "no" or "4" would be found everywhere. Used for the agent's leakage
    flags and for useful-evidence hit rates."""
    out = []
    for a in answers:
        a = (a or "").strip()
        if len(a) < min_chars:
            continue
        if (a in text) if _CJK_CHAR.search(a) else contains(text, a):
            out.append(a)
    return out


# ------------------------------------------------------------------------------- countries/demonyms

_COUNTRIES: dict[str, list[str]] = {
    "Afghanistan": ["Afghan"], "Albania": ["Albanian"], "Algeria": ["Algerian"],
    "Argentina": ["Argentine", "Argentinian"], "Armenia": ["Armenian"], "Australia": ["Australian"],
    "Austria": ["Austrian"], "Azerbaijan": ["Azerbaijani"], "Bangladesh": ["Bangladeshi"],
    "Belarus": ["Belarusian"], "Belgium": ["Belgian"], "Bolivia": ["Bolivian"],
    "Bosnia and Herzegovina": ["Bosnian"], "Brazil": ["Brazilian"], "Bulgaria": ["Bulgarian"],
    "Cambodia": ["Cambodian"], "Cameroon": ["Cameroonian"], "Canada": ["Canadian"], "Chile": ["Chilean"],
    "China": ["Chinese", "People's Republic of China"], "Colombia": ["Colombian"],
    "Costa Rica": ["Costa Rican"], "Croatia": ["Croatian"], "Cuba": ["Cuban"], "Cyprus": ["Cypriot"],
    "Czech Republic": ["Czech", "Czechia"], "Denmark": ["Danish"], "Ecuador": ["Ecuadorian"],
    "Egypt": ["Egyptian"], "England": ["English"], "Estonia": ["Estonian"], "Ethiopia": ["Ethiopian"],
    "Finland": ["Finnish"], "France": ["French"], "Georgia": ["Georgian"], "Germany": ["German"],
    "Ghana": ["Ghanaian"], "Greece": ["Greek"], "Guatemala": ["Guatemalan"], "Hungary": ["Hungarian"],
    "Iceland": ["Icelandic"], "India": ["Indian"], "Indonesia": ["Indonesian"], "Iran": ["Iranian"],
    "Iraq": ["Iraqi"], "Ireland": ["Irish", "Republic of Ireland"], "Israel": ["Israeli"],
    "Italy": ["Italian"], "Jamaica": ["Jamaican"], "Japan": ["Japanese"], "Jordan": ["Jordanian"],
    "Kazakhstan": ["Kazakh", "Kazakhstani"], "Kenya": ["Kenyan"], "Latvia": ["Latvian"],
    "Lebanon": ["Lebanese"], "Libya": ["Libyan"], "Lithuania": ["Lithuanian"],
    "Luxembourg": ["Luxembourgish"], "Madagascar": ["Malagasy"], "Malaysia": ["Malaysian"],
    "Malta": ["Maltese"], "Mexico": ["Mexican"], "Moldova": ["Moldovan"], "Mongolia": ["Mongolian"],
    "Montenegro": ["Montenegrin"], "Morocco": ["Moroccan"], "Myanmar": ["Burmese", "Burma"],
    "Nepal": ["Nepali", "Nepalese"], "Netherlands": ["Dutch", "Holland"],
    "New Zealand": ["New Zealander"], "Nigeria": ["Nigerian"], "North Korea": ["North Korean"],
    "North Macedonia": ["Macedonian", "Macedonia"], "Norway": ["Norwegian"], "Pakistan": ["Pakistani"],
    "Panama": ["Panamanian"], "Paraguay": ["Paraguayan"], "Peru": ["Peruvian"],
    "Philippines": ["Filipino", "Philippine"], "Poland": ["Polish"], "Portugal": ["Portuguese"],
    "Qatar": ["Qatari"], "Romania": ["Romanian"], "Russia": ["Russian", "Russian Federation"],
    "Saudi Arabia": ["Saudi"], "Scotland": ["Scottish"], "Serbia": ["Serbian"],
    "Singapore": ["Singaporean"], "Slovakia": ["Slovak", "Slovakian"], "Slovenia": ["Slovenian", "Slovene"],
    "South Africa": ["South African"], "South Korea": ["South Korean", "Korean", "Republic of Korea"],
    "Spain": ["Spanish"], "Sri Lanka": ["Sri Lankan"], "Sweden": ["Swedish"], "Switzerland": ["Swiss"],
    "Syria": ["Syrian"], "Taiwan": ["Taiwanese"], "Tanzania": ["Tanzanian"], "Thailand": ["Thai"],
    "Tunisia": ["Tunisian"], "Turkey": ["Turkish", "Türkiye"], "Uganda": ["Ugandan"],
    "Ukraine": ["Ukrainian"], "United Arab Emirates": ["Emirati", "UAE"],
    "United Kingdom": ["British", "UK", "Great Britain", "Britain"],
    "United States": ["American", "United States of America", "USA", "US", "U.S.", "U.S.A."],
    "Uruguay": ["Uruguayan"], "Uzbekistan": ["Uzbek"], "Venezuela": ["Venezuelan"],
    "Vietnam": ["Vietnamese", "Viet Nam"], "Wales": ["Welsh"], "Zimbabwe": ["Zimbabwean"],
}
# Historical states, regions and peoples named by an adjective or a plural ("the Ottomans"): equivalent
# forms like the countries above, but not countries (COUNTRY_NAMES does not list them).
_POLITIES: dict[str, list[str]] = {
    "Ottoman Empire": ["Ottoman"], "Roman Empire": ["Roman", "Ancient Rome"], "Byzantine Empire": ["Byzantine"],
    "Mughal Empire": ["Mughal"], "Inca Empire": ["Inca", "Incan"], "Aztec Empire": ["Aztec"],
    "Khmer Empire": ["Khmer"], "Safavid Empire": ["Safavid"], "Mongol Empire": ["Mongol"],
    "Soviet Union": ["Soviet", "USSR"], "Persia": ["Persian"], "Prussia": ["Prussian"], "Bavaria": ["Bavarian"],
    "Catalonia": ["Catalan"], "Flanders": ["Flemish"], "Tibet": ["Tibetan"], "Sicily": ["Sicilian"],
    "Sardinia": ["Sardinian"], "Corsica": ["Corsican"], "Crete": ["Cretan"], "Tuscany": ["Tuscan"],
    "Brittany": ["Breton"], "Andalusia": ["Andalusian"], "Castile": ["Castilian"], "Galicia": ["Galician"],
    "Hawaii": ["Hawaiian"], "Bohemia": ["Bohemian"], "Moravia": ["Moravian"], "Silesia": ["Silesian"],
    "Saxony": ["Saxon"], "Mesopotamia": ["Mesopotamian"], "Phoenicia": ["Phoenician"], "Etruria": ["Etruscan"],
    "Korea": ["Korean"], "Maya civilization": ["Maya", "Mayan"], "Ancient Egypt": ["Ancient Egyptian"],
}
# Exonyms and local spellings of the same place (accents are folded anyway: Zürich = Zurich).
_EXONYMS: list[list[str]] = [
    ["Munich", "München"], ["Cologne", "Köln"], ["Vienna", "Wien"], ["Prague", "Praha"], ["Rome", "Roma"],
    ["Florence", "Firenze"], ["Venice", "Venezia"], ["Naples", "Napoli"], ["Milan", "Milano"],
    ["Turin", "Torino"], ["Genoa", "Genova"], ["Padua", "Padova"], ["Mantua", "Mantova"],
    ["Syracuse", "Siracusa"], ["Leghorn", "Livorno"], ["Lisbon", "Lisboa"], ["Oporto", "Porto"],
    ["Warsaw", "Warszawa"], ["Cracow", "Kraków"], ["Breslau", "Wrocław"], ["Danzig", "Gdańsk"],
    ["Moscow", "Moskva"], ["Copenhagen", "København"], ["Gothenburg", "Göteborg"],
    ["Brussels", "Bruxelles", "Brussel"], ["Antwerp", "Antwerpen", "Anvers"], ["Ghent", "Gent"],
    ["Bruges", "Brugge"], ["Louvain", "Leuven"], ["The Hague", "Den Haag"], ["Nuremberg", "Nürnberg"],
    ["Hanover", "Hannover"], ["Brunswick", "Braunschweig"], ["Bavaria", "Bayern"], ["Saxony", "Sachsen"],
    ["Seville", "Sevilla"], ["Saragossa", "Zaragoza"], ["Majorca", "Mallorca"], ["Athens", "Athina"],
    ["Thessaloniki", "Salonica", "Salonika"], ["Beijing", "Peking"], ["Nanjing", "Nanking"],
    ["Kyiv", "Kiev"], ["Lviv", "Lvov", "Lwów", "Lemberg"], ["Kharkiv", "Kharkov"], ["Odesa", "Odessa"],
    ["Bucharest", "București"], ["Belgrade", "Beograd"], ["Geneva", "Genève", "Genf"], ["Lucerne", "Luzern"],
    ["Basel", "Basle"], ["Bern", "Berne"], ["Aachen", "Aix-la-Chapelle"], ["Mumbai", "Bombay"],
    ["Chennai", "Madras"], ["Kolkata", "Calcutta"], ["Yangon", "Rangoon"], ["Ho Chi Minh City", "Saigon"],
    ["Istanbul", "Constantinople"], ["Ukraine", "Ukraina"], ["Strasbourg", "Strassburg"],
    ["Regensburg", "Ratisbon"], ["Vilnius", "Wilno", "Vilna"], ["Tallinn", "Reval"],
    ["Helsinki", "Helsingfors"], ["Turku", "Åbo"], ["Tbilisi", "Tiflis"], ["Mainz", "Mayence"],
]
# A saint's name is written with any of these prefixes (Saint Sebastian / San Sebastián / St. Sebastian).
SAINT_PREFIXES = ("saint", "st", "san", "santo", "santa", "sao", "sankt", "sant", "sainte", "ste", "sveti", "sv")
# "Inca Empire" ~ "Inca", "Ming dynasty" ~ "Ming": the head names the polity the adjective already names.
_POLITY_HEADS = frozenset({"empire", "dynasty", "kingdom", "sultanate", "caliphate", "khanate", "civilization",
                           "civilisation"})

CONTINENTS = frozenset(norm(c) for c in (
    "Africa", "Asia", "Europe", "North America", "South America", "Central America", "Oceania",
    "Antarctica", "Australasia", "Middle East", "Southeast Asia", "Caribbean", "Mediterranean"))


def _build_country_index() -> dict[str, frozenset[str]]:
    idx: dict[str, set[str]] = {}
    groups = [[c, *f] for c, f in _COUNTRIES.items()] + [[c, *f] for c, f in _POLITIES.items()] + _EXONYMS
    for names in groups:
        group = {norm(n) for n in names}
        for g in group:
            idx.setdefault(g, set()).update(group)
    # "US" normalises to "us", which is also an English pronoun: only match the dotted/long forms.
    idx.pop("us", None)
    for g in idx.values():
        g.discard("us")
    return {k: frozenset(v) for k, v in idx.items()}


_COUNTRY_INDEX = _build_country_index()
COUNTRY_NAMES = frozenset(norm(c) for c in _COUNTRIES)  # names only, not demonyms
COUNTRY_NAME_FORMS = frozenset(norm(x) for c, forms in _COUNTRIES.items() for x in [c, *forms])


@lru_cache(maxsize=32768)
def _padded(text: str) -> str:
    return f" {norm(text)} "


def country_forms(phrase: str) -> frozenset[str]:
    """Normalised names + demonyms of the country `phrase` names ("France" -> {france, french});
    empty when `phrase` is not a country or demonym in the table."""
    return _COUNTRY_INDEX.get(norm(phrase), frozenset())


def is_country(phrase: str) -> bool:
    return norm(phrase) in _COUNTRY_INDEX


_REGNAL_RE = re.compile(r"^(.+ (?:i|ii|iii|iv|v|vi|vii|viii|ix|x|xi|xii|xiii|xiv|xv|xvi|xvii|xviii|\d+th|1st|2nd|3rd))"
                        r" of .+$")


@lru_cache(maxsize=16384)
def _equivalent_forms(phrase: str) -> tuple[str, ...]:
    base = norm(phrase)
    forms = [base] if base else []
    m = _REGNAL_RE.match(base)
    if m:  # "henry ii of england" ~ "henry ii"
        forms.append(m.group(1))
    forms += sorted(f for f in country_forms(phrase) if f != base)
    words = base.split()
    if len(words) > 1:  # a country inside a longer name: "ancient greece" ~ "ancient greek"
        for i, w in enumerate(words):
            for f in sorted(_COUNTRY_INDEX.get(w, ())):
                if f != w and " " not in f:
                    forms.append(" ".join(words[:i] + [f] + words[i + 1:]))
        if words[-1] in _POLITY_HEADS:  # "inca empire" ~ "inca"
            head = " ".join(words[:-1])
            forms += [head] + sorted(f for f in _COUNTRY_INDEX.get(head, ()) if f != head)
        for i, w in enumerate(words):  # saint prefixes: "saint sebastian" ~ "san sebastian" ~ "st sebastian"
            if w in SAINT_PREFIXES and i + 1 < len(words):
                forms += [" ".join(words[:i] + [p] + words[i + 1:]) for p in SAINT_PREFIXES if p != w]
                break
    seen: set[str] = set()
    return tuple(f for f in forms if f and not (f in seen or seen.add(f)))  # type: ignore[func-returns-value]


def equivalent_forms(phrase: str) -> list[str]:
    """`phrase` plus the forms that name the same thing, normalised: country <-> demonym (also
    inside a longer name), historical polities and their peoples ("Ottoman Empire" ~ "Ottoman"),
    exonyms and local spellings (Munich ~ München), "X Empire/dynasty" ~ "X", and the
    Saint/San/St. prefixes of a saint's name."""
    return list(_equivalent_forms(phrase))


def find_near_phrase(text: str, phrase: str, min_ratio: float = 0.7) -> str | None:
    """A span of `text` matching a multi-word `phrase` with one word spelled differently ("Georg
    Adolph Demmler" / "Georg Adolf Demmler"); None otherwise. Single words never match this way."""
    needle = [t.norm for t in tokenize(phrase)]
    n = len(needle)
    if n < 2:
        return None
    vocab = _vocab(text)
    if sum(w in vocab for w in needle) < n - 1:
        return None
    toks = tokenize(text)
    for i in range(len(toks) - n + 1):
        diff = [j for j in range(n) if toks[i + j].norm != needle[j]]
        if len(diff) != 1:
            continue
        a, b = toks[i + diff[0]].norm, needle[diff[0]]
        if min(len(a), len(b)) >= 4 and a.isalpha() and b.isalpha() and \
                difflib.SequenceMatcher(None, a, b).ratio() >= min_ratio:
            return unicodedata.normalize("NFC", text)[toks[i].start:toks[i + n - 1].end]
    return None


def list_items(phrase: str) -> list[str]:
    """The items of a list answer ("bayou, prairie and rock outcrops"), or [phrase]."""
    return list(_list_items(phrase))


@lru_cache(maxsize=16384)
def _list_items(phrase: str) -> tuple[str, ...]:
    items = [re.sub(r"[\s,]*\betc\b\.?$", "", x.strip(), flags=re.I).strip()
             for x in re.split(r"\s*(?:,|;|\band\b|&)\s*", phrase)]
    items = [x for x in items if x and norm(x)]
    return tuple(items) if len(items) > 1 else (phrase,)


_CAPITALS: dict[str, list[str]] = {
    "Argentina": ["Buenos Aires"], "Australia": ["Canberra"], "Austria": ["Vienna"], "Belgium": ["Brussels"],
    "Brazil": ["Brasília"], "Bulgaria": ["Sofia"], "Canada": ["Ottawa"], "Chile": ["Santiago"],
    "China": ["Beijing"], "Colombia": ["Bogotá"], "Croatia": ["Zagreb"], "Cuba": ["Havana"],
    "Czech Republic": ["Prague"], "Denmark": ["Copenhagen"], "Egypt": ["Cairo"], "England": ["London"],
    "Estonia": ["Tallinn"], "Finland": ["Helsinki"], "France": ["Paris"], "Germany": ["Berlin"],
    "Greece": ["Athens"], "Hungary": ["Budapest"], "Iceland": ["Reykjavík"], "India": ["New Delhi"],
    "Indonesia": ["Jakarta"], "Iran": ["Tehran"], "Ireland": ["Dublin"], "Israel": ["Jerusalem"],
    "Italy": ["Rome"], "Japan": ["Tokyo"], "Kenya": ["Nairobi"], "Latvia": ["Riga"], "Lithuania": ["Vilnius"],
    "Malaysia": ["Kuala Lumpur"], "Mexico": ["Mexico City"], "Morocco": ["Rabat"], "Nepal": ["Kathmandu"],
    "Netherlands": ["Amsterdam"], "New Zealand": ["Wellington"], "Norway": ["Oslo"], "Peru": ["Lima"],
    "Philippines": ["Manila"], "Poland": ["Warsaw"], "Portugal": ["Lisbon"], "Romania": ["Bucharest"],
    "Russia": ["Moscow"], "Scotland": ["Edinburgh"], "Serbia": ["Belgrade"], "Slovakia": ["Bratislava"],
    "Slovenia": ["Ljubljana"], "South Korea": ["Seoul"], "Spain": ["Madrid"], "Sweden": ["Stockholm"],
    "Switzerland": ["Bern"], "Thailand": ["Bangkok"], "Turkey": ["Ankara"], "Ukraine": ["Kyiv", "Kiev"],
    "United Kingdom": ["London"], "Vietnam": ["Hanoi"], "Wales": ["Cardiff"],
}
_CAPITAL_INDEX = {norm(c): [norm(x) for x in caps] for c, caps in _CAPITALS.items()}


@lru_cache(maxsize=16384)
def _capitals_of(phrase: str) -> tuple[str, ...]:
    return tuple(capitals_of_uncached(phrase))


def capitals_of(phrase: str) -> list[str]:
    """See capitals_of_uncached (cached)."""
    return list(_capitals_of(phrase))


def capitals_of_uncached(phrase: str) -> list[str]:
    """Normalised capital names of the country `phrase` names (or its demonym); [] otherwise.
    One direction only: a capital in the evidence places something in the country, but a country
    in the evidence says nothing about the city."""
    out: list[str] = []
    for f in sorted(country_forms(phrase)) or [norm(phrase)]:
        out += [c for c in _CAPITAL_INDEX.get(f, []) if c not in out]
    return out


def contains_equivalent(text: str, phrase: str) -> str | None:
    """The normalised form of `phrase` (or an equivalent, or for a country its capital) found
    word-bounded in `text`, or None."""
    hay = _padded(text)
    for f in equivalent_forms(phrase) + capitals_of(phrase):
        if f and f" {f} " in hay:
            return f
    return None


# ---------------------------------------------------------------------------------------- quantities

_UNITS: dict[str, tuple[str, str]] = {}  # surface (normalised) -> (canonical unit, dimension)


def _add_units(dim: str, canon: str, *surfaces: str) -> None:
    for s in (canon,) + surfaces:
        _UNITS[norm(s) if s not in ("%",) else "%"] = (canon, dim)


_add_units("length", "m", "metre", "metres", "meter", "meters", "m")
_add_units("length", "km", "kilometre", "kilometres", "kilometer", "kilometers")
_add_units("length", "cm", "centimetre", "centimetres", "centimeter", "centimeters")
_add_units("length", "mm", "millimetre", "millimetres", "millimeter", "millimeters")
_add_units("length", "ft", "foot", "feet")
_add_units("length", "in", "inch", "inches")
_add_units("length", "mi", "mile", "miles")
_add_units("mass", "kg", "kilogram", "kilograms", "kilogramme", "kilogrammes", "kgs")
_add_units("mass", "g", "gram", "grams", "gramme", "grammes")
_add_units("mass", "mg", "milligram", "milligrams")
_add_units("mass", "lb", "lbs", "pound", "pounds")
_add_units("mass", "t", "tonne", "tonnes", "ton", "tons")
_add_units("mass", "oz", "ounce", "ounces")
_add_units("area", "km2", "km²", "square kilometre", "square kilometres", "square kilometer",
           "square kilometers", "sq km")
_add_units("area", "m2", "m²", "square metre", "square metres", "square meter", "square meters")
_add_units("area", "mi2", "sq mi", "square mile", "square miles")
_add_units("area", "ha", "hectare", "hectares")
_add_units("area", "acre", "acres")
_add_units("volume", "l", "litre", "litres", "liter", "liters")
_add_units("volume", "m3", "m³", "cubic metre", "cubic metres", "cubic meter", "cubic meters")
_add_units("volume", "km3", "km³", "cubic kilometre", "cubic kilometres")
_add_units("time", "year", "years", "yr", "yrs")
_add_units("time", "month", "months")
_add_units("time", "week", "weeks")
_add_units("time", "day", "days")
_add_units("time", "hour", "hours", "h")
_add_units("time", "minute", "minutes", "min")
_add_units("speed", "km/h", "kmh", "kilometres per hour", "kilometers per hour", "kph")
_add_units("speed", "mph", "miles per hour")
_add_units("speed", "kn", "knot", "knots")
_add_units("power", "hp", "horsepower", "bhp")
_add_units("power", "kw", "kilowatt", "kilowatts")
_add_units("ratio", "%", "percent", "per cent")
for _count_noun in ("egg", "floor", "storey", "story", "level", "seat", "room", "passenger", "member",
                    "species", "people", "inhabitant", "step", "bell", "engine", "crew"):
    _add_units("count:" + _count_noun, _count_noun, _count_noun + "s", _count_noun + "es")
_add_units("count:storey", "storey", "storeys", "stories", "story")
_add_units("count:people", "people", "persons", "person", "inhabitants", "residents")
_UNIT_MAX_WORDS = max(len(k.split()) for k in _UNITS)
_SCALES = {"thousand": 1e3, "million": 1e6, "billion": 1e9}


@dataclass(frozen=True)
class Quantity:
    """A number or numeric range found in a text, with its unit (None when none follows)."""

    low: float
    high: float
    unit: str | None
    dim: str | None
    text: str  # as written in the source, unit included
    number_text: str  # as written, without the unit
    start: int
    end: int

    @property
    def is_range(self) -> bool:
        return self.high != self.low


def _num_value(tok: str) -> float | None:
    try:
        return float(tok)
    except ValueError:
        return None


def _unit_at(toks: tuple[Token, ...], i: int) -> tuple[str, str, int] | None:
    """The longest unit starting at token i: (canonical, dimension, tokens used)."""
    for n in range(min(_UNIT_MAX_WORDS, len(toks) - i), 0, -1):
        key = " ".join(t.norm for t in toks[i:i + n])
        if key in _UNITS:
            canon, dim = _UNITS[key]
            return canon, dim, n
    return None


@lru_cache(maxsize=8192)
def find_quantities(text: str) -> tuple[Quantity, ...]:
    """Numbers and ranges ("6 - 7", "between 5 and 7") in `text`, with a following unit if any.
    Years in date expressions are numbers too; callers that care use find_dates."""
    text = unicodedata.normalize("NFC", text or "")
    toks = tokenize(text)
    out: list[Quantity] = []
    i = 0
    while i < len(toks):
        v = _num_value(toks[i].norm)
        if v is None:
            i += 1
            continue
        start_i, low, high, j = i, v, v, i + 1
        text_start = toks[i].start
        # range: N - M, or "between N and M" (written from "between": "between 50 and 70 mm")
        if j + 1 < len(toks) and toks[j].norm == "-" and _num_value(toks[j + 1].norm) is not None:
            high = _num_value(toks[j + 1].norm)  # type: ignore[assignment]
            j += 2
        elif (i > 0 and toks[i - 1].norm in ("between", "from") and j + 1 < len(toks)
              and toks[j].norm in ("and", "-") and _num_value(toks[j + 1].norm) is not None):
            high = _num_value(toks[j + 1].norm)  # type: ignore[assignment]
            j += 2
            if toks[i - 1].norm == "between":
                text_start = toks[i - 1].start
        scale = 1.0
        if j < len(toks) and toks[j].norm in _SCALES:
            scale = _SCALES[toks[j].norm]
            j += 1
        number_end = toks[j - 1].end
        unit = dim = None
        u = _unit_at(toks, j) if j < len(toks) else None
        if u is not None:
            unit, dim, n = u
            j += n
        low, high = low * scale, high * scale
        if high < low:  # "1990-91"-style or a decreasing pair: keep the first number only
            high = low
            j = start_i + 1
            number_end = toks[start_i].end
            unit = dim = None
            text_start = toks[start_i].start
        out.append(Quantity(low, high, unit, dim, text[text_start:toks[j - 1].end],
                            text[text_start:number_end], text_start, toks[j - 1].end))
        i = j
    return tuple(out)


@lru_cache(maxsize=32768)
def parse_quantity(text: str) -> Quantity | None:
    """The quantity an answer states, if the answer is essentially one number or range
    ("1,301", "6 - 7", "170–200 cm", "about 25 kg"); None for text answers."""
    qs = find_quantities(text)
    if len(qs) != 1:
        return None
    q = qs[0]
    rest = [t.norm for t in tokenize(text) if not (q.start <= t.start < q.end)]
    fillers = {"about", "approximately", "around", "up", "to", "over", "under", "c", "ca", "circa",
               "than", "more", "less", "nearly", "almost", "roughly", "some", "average", "of", "on"}
    return q if all(r in fillers for r in rest) else None


def question_unit(question: str) -> tuple[str, str] | None:
    """(unit, dimension) a question asks for ("... in square kilometre", "how many kilogram ...")."""
    toks = tokenize(question)
    for i in range(len(toks)):
        if toks[i].norm in ("m", "in", "t", "h", "g", "l", "min"):  # too ambiguous as plain words
            continue
        u = _unit_at(toks, i)
        if u is not None and not u[1].startswith("count:") and u[1] != "time":
            return u[0], u[1]
    return None


_AMBIGUOUS_UNIT_WORDS = frozenset({"m", "in", "t", "h", "g", "l", "min", "s"})


def unit_dim(unit: str | None) -> str | None:
    """The dimension of a canonical unit ("day" -> "time", "cm" -> "length")."""
    return _UNITS.get(unit)[1] if unit in _UNITS else None  # type: ignore[index]


def units_named(text: str) -> list[tuple[str, str]]:
    """Every (unit, dimension) a text names, time and count nouns included ("in months", "how
    many eggs"); one-letter abbreviations that are also words ("m", "in", "t") are skipped."""
    toks = tokenize(text)
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(toks):
        u = None if toks[i].norm in _AMBIGUOUS_UNIT_WORDS else _unit_at(toks, i)
        if u is None:
            i += 1
            continue
        if (u[0], u[1]) not in out:
            out.append((u[0], u[1]))
        i += u[2]
    return out


def question_names_unit(question: str, unit: str | None) -> bool:
    """The question already names `unit` (a canonical unit: "in metres", "how many days"), so an
    answer need not repeat it."""
    return unit is not None and any(u == unit for u, _ in units_named(question))


_ASKS_NUMBER_RE = re.compile(r"\b(how (many|much|long|old|tall|high|heavy|big|large|wide|deep|far|fast)|number of|"
                             r"(what|which) (is|was) the (height|length|width|depth|area|weight|mass|size|"
                             r"population|capacity|number|elevation|wingspan|lifespan|speed))\b", re.I)


def asks_number(question: str) -> bool:
    """The question asks for a quantity ("how many ...", "what is the height ...")."""
    return bool(_ASKS_NUMBER_RE.search(question or "")) or question_unit(question or "") is not None


_TENS = {w: v for w, v in NUMBER_WORDS.items() if v in (20, 30, 40, 50, 60, 70, 80, 90)}
_UNITS_WORDS = {w: v for w, v in NUMBER_WORDS.items() if 0 <= v <= 19}
_NUMWORD_RE = re.compile(
    r"\b(?:(" + "|".join(_TENS) + r")[-\s](" + "|".join(w for w, v in _UNITS_WORDS.items() if 1 <= v <= 9) + r")"
    r"|(" + "|".join(sorted(set(_TENS) | set(_UNITS_WORDS), key=len, reverse=True)) + r"))\b", re.I)


def number_words_to_digits(text: str) -> str:
    """Number words written as digits ("three to four months" -> "3 to 4 months", "twenty-five" ->
    "25"); the rest of the text as written."""
    def sub(m: re.Match) -> str:
        if m.group(1):
            return str(NUMBER_WORDS[m.group(1).lower()] + NUMBER_WORDS[m.group(2).lower()])
        return str(NUMBER_WORDS[m.group(3).lower()])
    return _NUMWORD_RE.sub(sub, text or "")


def same_value(a: Quantity, b: Quantity) -> bool:
    return abs(a.low - b.low) <= 1e-9 * max(1, abs(a.low)) and abs(a.high - b.high) <= 1e-9 * max(1, abs(a.high))


def units_compatible(a: str | None, b: str | None) -> bool:
    """Same unit, or one side does not say (no conversions: a different unit is not the same value)."""
    return a is None or b is None or a == b


# --------------------------------------------------------------------------------------------- dates

MONTHS = {m: i + 1 for i, m in enumerate(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december"])}
MONTHS.update({k[:3]: v for k, v in list(MONTHS.items())})
MONTHS["sept"] = 9
SEASONS = frozenset({"spring", "summer", "autumn", "fall", "winter"})
_MON = r"(january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\.?"
_YEAR = r"(\d{3,4})"
_DATE_PATTERNS = [
    re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MON},?\s+{_YEAR}\b", re.I),  # 27 October 1989
    re.compile(rf"\b{_MON}\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+{_YEAR}\b", re.I),  # October 27, 1989
    re.compile(r"\b(\d{4})[-/](\d{1,2})[-/](\d{1,2})\b"),  # 1989-10-27
    re.compile(rf"\b{_MON},?\s+{_YEAR}\b", re.I),  # October 1989
    re.compile(r"\b(\d{4})\b"),  # 1989
]


@dataclass(frozen=True)
class DateValue:
    year: int
    month: int | None
    day: int | None
    text: str
    start: int
    end: int

    @property
    def key(self) -> tuple[int, int | None, int | None]:
        return (self.year, self.month, self.day)

    @property
    def precision(self) -> int:
        return 1 + (self.month is not None) + (self.day is not None)


def _mk(kind: int, m: re.Match, text: str) -> DateValue | None:
    g = m.groups()
    try:
        if kind == 0:
            d, mo, y = int(g[0]), MONTHS[g[1].lower()], int(g[2])
        elif kind == 1:
            mo, d, y = MONTHS[g[0].lower()], int(g[1]), int(g[2])
        elif kind == 2:
            y, mo, d = int(g[0]), int(g[1]), int(g[2])
        elif kind == 3:
            mo, y, d = MONTHS[g[0].lower()], int(g[1]), None
        else:
            y, mo, d = int(g[0]), None, None
            if not 1000 <= y <= 2100:
                return None
    except KeyError:
        return None
    if mo is not None and not 1 <= mo <= 12 or d is not None and not 1 <= d <= 31:
        return None
    return DateValue(y, mo, d, text[m.start():m.end()], m.start(), m.end())


@lru_cache(maxsize=8192)
def find_dates(text: str) -> tuple[DateValue, ...]:
    """Dates in `text`, most specific first where they overlap ("27 October 1989" is one date, not
    also "1989")."""
    text = unicodedata.normalize("NFC", text or "")
    taken: list[tuple[int, int]] = []
    out: list[DateValue] = []
    for kind, pat in enumerate(_DATE_PATTERNS):
        for m in pat.finditer(text):
            if any(m.start() < e and s < m.end() for s, e in taken):
                continue
            dv = _mk(kind, m, text)
            if dv is not None:
                out.append(dv)
                taken.append((m.start(), m.end()))
    out.sort(key=lambda d: d.start)
    return tuple(out)


@lru_cache(maxsize=32768)
def parse_date(text: str) -> DateValue | None:
    """The date an answer states when the whole answer is a date: "27 October 1989", "October 27,
    1989", "1989-10-27", InfoSeek's "1989 10 27", "October 1989", "1989"."""
    t = unicodedata.normalize("NFC", (text or "").strip())
    m = re.fullmatch(r"(\d{4})\s+(\d{1,2})\s+(\d{1,2})", t)
    if m:
        y, mo, d = (int(x) for x in m.groups())
        if 1 <= mo <= 12 and 1 <= d <= 31:
            return DateValue(y, mo, d, t, 0, len(t))
        return None
    m = re.fullmatch(r"(\d{4})\s+(\d{1,2})", t)
    if m and 1 <= int(m.group(2)) <= 12:
        return DateValue(int(m.group(1)), int(m.group(2)), None, t, 0, len(t))
    ds = find_dates(t)
    if len(ds) == 1 and ds[0].start == 0 and len(t[ds[0].end:].strip(" .")) == 0:
        return ds[0]
    return None


def date_matches(answer: DateValue, found: DateValue) -> bool:
    """Same date at the answer's precision, and the evidence at least as precise."""
    return found.precision >= answer.precision and found.key[:answer.precision] == answer.key[:answer.precision]


# ------------------------------------------------------------------------------------------- helpers

STOPWORDS = frozenset("""
a an the this that these those is are was were be been being of in on at to for by with from as and or
what which who whom whose when where how why does do did has have had can could would will its it their
they there here image picture shown pictured specific particular type kind name many much into about
than more most after before during over under per year years number
""".split())


def content_words(text: str) -> set[str]:
    """Rough content-word stems (first 5 letters) for "does this sentence talk about the same thing"."""
    return set(_content_words(text))


@lru_cache(maxsize=32768)
def _content_words(text: str) -> frozenset[str]:
    return frozenset(t.norm[:5] for t in tokenize(text) if t.norm.isalpha() and t.norm not in STOPWORDS
                     and len(t.norm) > 2)


_SENT_RE = re.compile(r"(?<=[.!?;])\s+(?=[A-Z0-9\"(])|\n+")


def sentences(text: str) -> list[str]:
    return list(_sentences(text))


@lru_cache(maxsize=16384)
def _sentences(text: str) -> tuple[str, ...]:
    return tuple(s for s in _SENT_RE.split(text or "") if s.strip())
