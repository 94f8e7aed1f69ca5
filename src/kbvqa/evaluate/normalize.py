"""Answer normalisation shared by every answer metric.

Two families exist in the wild and they are *not* interchangeable:

* `infoseek_normalize` – the InfoSeek scorer's rule (field-anchors §4.1): lowercase, delete the ASCII
  characters of `string.punctuation` only (so curly quotes and dashes survive), replace the
  articles a/an/the by a space, collapse whitespace.
* `evqa_normalize` – the Encyclopedic-VQA rule (field-anchors §1.2), also used by the ARA reward
  scorer for String/Time: lowercase, drop a leading ``<extra_id_0> `` span marker, delete ASCII
  punctuation plus ‘ ’ ´ ` _, remove "the answer is" and articles, map number words to digits and
  apostrophe-less contractions back to their usual spelling, collapse whitespace.

Both use `str.translate` and precompiled regexes: the official InfoSeek script rebuilt a punctuation
set for every character, which was ~80% of its run time.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable

__all__ = [
    "NormMemo", "infoseek_normalize", "evqa_normalize", "number_words_to_digits", "contains_word_bounded",
    "DIGIT_WORDS",
]

_ASCII_PUNCT_TABLE = str.maketrans("", "", string.punctuation)
_ASCII_PUNCT_BYTES = string.punctuation.encode("ascii")
_ARTICLE_WORDS = frozenset(("a", "an", "the"))
_EVQA_PUNCT_TABLE = str.maketrans("", "", string.punctuation + "\u2018\u2019\u00b4`_")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_EVQA_ARTICLES = re.compile(r"\b(the answer is|a|an|the)\b")

# Number words the E-VQA / ARA scorers turn into digits (plus their yes/no synonyms).
DIGIT_WORDS: dict[str, str] = {
    "none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5",
    "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10",
}
_EVQA_WORD_MAP: dict[str, str] = dict(DIGIT_WORDS)
_EVQA_WORD_MAP.update({"entailment": "yes", "true": "yes", "contradiction": "no", "false": "no"})

# Common English contractions written without the apostrophe. Punctuation is removed *before* this
# lookup, so only apostrophe-free, lowercase keys can ever match; the E-VQA scorer maps them back to
# the apostrophe spelling, which is why its output may contain "'" (ours too, to stay comparable).
_CONTRACTION_STEMS = {
    "aint": "ain't", "arent": "aren't", "cant": "can't", "couldve": "could've", "couldnt": "couldn't",
    "didnt": "didn't", "doesnt": "doesn't", "dont": "don't", "hadnt": "hadn't", "hasnt": "hasn't",
    "havent": "haven't", "hed": "he'd", "hes": "he's", "howd": "how'd", "howll": "how'll",
    "hows": "how's", "isnt": "isn't", "itd": "it'd", "itll": "it'll", "lets": "let's",
    "maam": "ma'am", "mightnt": "mightn't", "mightve": "might've", "mustnt": "mustn't",
    "mustve": "must've", "neednt": "needn't", "notve": "not've", "oclock": "o'clock",
    "oughtnt": "oughtn't", "shant": "shan't", "shed": "she'd", "shes": "she's",
    "shouldve": "should've", "shouldnt": "shouldn't", "somebodyd": "somebody'd",
    "somebodyll": "somebody'll", "somebodys": "somebody's", "someoned": "someone'd",
    "someonell": "someone'll", "someones": "someone's", "somethingd": "something'd",
    "somethingll": "something'll", "thats": "that's", "thered": "there'd", "therere": "there're",
    "theres": "there's", "theyd": "they'd", "theyll": "they'll", "theyre": "they're",
    "theyve": "they've", "twas": "'twas", "wasnt": "wasn't", "wed": "we'd", "weve": "we've",
    "werent": "weren't", "whatll": "what'll", "whatre": "what're", "whats": "what's",
    "whatve": "what've", "whens": "when's", "whered": "where'd", "wheres": "where's",
    "whereve": "where've", "whod": "who'd", "wholl": "who'll", "whos": "who's", "whove": "who've",
    "whyll": "why'll", "whyre": "why're", "whys": "why's", "wont": "won't", "wouldve": "would've",
    "wouldnt": "wouldn't", "yall": "y'all", "youd": "you'd", "youll": "you'll", "youre": "you're",
    "youve": "you've",
}
_EVQA_LOOKUP = {**_CONTRACTION_STEMS, **_EVQA_WORD_MAP}
assert not (set(_CONTRACTION_STEMS) & (set(_EVQA_WORD_MAP) | set(_EVQA_WORD_MAP.values())))
_EXTRA_ID_PREFIX = "<extra_id_0> "


def infoseek_normalize(text: str) -> str:
    """InfoSeek normalisation N(s): "The U.S.  Army" -> "us army"."""
    s = text.lower()
    if s.isascii():
        # bytes.translate deletes in one C pass; when only letters, digits and spaces are left, the
        # article regex's word boundaries are exactly the spaces, so dropping whole words a/an/the
        # is the same as replacing them by a space and collapsing whitespace
        s = s.encode("ascii").translate(None, _ASCII_PUNCT_BYTES).decode("ascii")
        if s.replace(" ", "").isalnum() or not s.strip(" "):
            return " ".join([w for w in s.split(" ") if w and w not in _ARTICLE_WORDS])
        return " ".join(_ARTICLES.sub(" ", s).split())
    return " ".join(_ARTICLES.sub(" ", s.translate(_ASCII_PUNCT_TABLE)).split())


class NormMemo(dict):
    """text -> normalize(text), remembering at most `cap` texts (then it stops remembering).

    Answers and predictions repeat (years, countries, common entities), so a scorer normalises each
    distinct text once; the cap keeps a file of all-distinct texts small.
    """

    def __init__(self, normalize: Callable[[str], str], cap: int = 1 << 17):
        super().__init__()
        self.normalize, self.cap = normalize, cap

    def __missing__(self, text: str) -> str:
        norm = self.normalize(text)
        if len(self) < self.cap:
            self[text] = norm
        return norm


def evqa_normalize(text: str) -> str:
    """E-VQA answer preprocessing (also the ARA reward rule for String/Time answers)."""
    s = text.lower().replace("\n", " ").replace("\t", " ").strip()
    if s.startswith(_EXTRA_ID_PREFIX):
        s = s.replace(_EXTRA_ID_PREFIX, "")
    s = _EVQA_ARTICLES.sub(" ", s.translate(_EVQA_PUNCT_TABLE))
    # number words, then contractions: one merged lookup is the same thing because no digit-word
    # output is a contraction key and no contraction key is a number word
    get = _EVQA_LOOKUP.get
    return " ".join([get(w, w) for w in s.split()])


_NUMBER_WORD_RE = re.compile(r"\b(" + "|".join(DIGIT_WORDS) + r")\b", re.IGNORECASE)


def number_words_to_digits(text: str) -> str:
    """Replace the words zero..ten and none (any case, word-bounded) by digits (ARA reward rule)."""
    return _NUMBER_WORD_RE.sub(lambda m: DIGIT_WORDS[m.group(1).lower()], text)


def contains_word_bounded(haystack: str, needle: str) -> bool:
    """True when `needle` occurs in `haystack` at word boundaries (both already normalised).

    Used by the answer-in-retrieved-text recall, where plain substring tests would accept "art"
    inside "cartography".
    """
    if not needle:
        return False
    start = 0
    n = len(needle)
    while True:
        i = haystack.find(needle, start)
        if i < 0:
            return False
        before_ok = i == 0 or not haystack[i - 1].isalnum()
        j = i + n
        after_ok = j == len(haystack) or not haystack[j].isalnum()
        if before_ok and after_ok:
            return True
        start = i + 1
