"""The second check before a semantic hit is served: reject pairs whose meaning differs in ways cosine misses.

Sentence embeddings put "Is X safe?" and "Is X not safe?", "flights on May 3" and "flights on May 4", "capital
of Austria" and "capital of Australia" almost on top of each other. Each text is reduced to the facts that flip
an answer (negation polarity, numbers, dates, named entities, scope words such as all/only/most/before); the
pair passes only if both texts carry the same facts. English and Chinese. Pure Python, microseconds per pair.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache

from gateway.cache import lexicon as lx

_WORD = re.compile(r"[A-Za-z]+(?:['’][A-Za-z]+)?|\d+(?:[.,:]\d+)*%?")
_CJK = re.compile(r"[\u3400-\u9fff]")
_CJK_NUMERAL = re.compile(r"[零〇一二两三四五六七八九十百千万亿]+")
_SENTENCE_END = re.compile(r"[.!?。！？]\s*$")
_A_NOT_A = re.compile(r"(.)[不没]\1")  # 是不是 / 能不能 / 有没有: a question form, not a negation


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: str | None = None  # negation | number | date | entity | scope | content


@dataclass(frozen=True, slots=True)
class Facts:
    negation_odd: bool
    numbers: frozenset[float]
    dates: frozenset[str]
    entities: frozenset[str]  # lower-cased
    words: frozenset[str]  # every lower-cased word, to forgive case-only differences of entities
    scope: frozenset[str]
    cjk_core: str  # Chinese text with the paraphrase-neutral words taken out, for the substitution check


def verify(query: str, candidate: str) -> Verdict:
    a, b = facts(query), facts(candidate)
    if a.negation_odd != b.negation_odd:
        return Verdict(False, "negation")
    if a.numbers != b.numbers:
        return Verdict(False, "number")
    if a.dates != b.dates:
        return Verdict(False, "date")
    if (a.entities - b.words) or (b.entities - a.words):
        return Verdict(False, "entity")
    if a.scope != b.scope:
        return Verdict(False, "scope")
    if a.cjk_core and b.cjk_core and _cjk_substituted(a.cjk_core, b.cjk_core):
        return Verdict(False, "content")
    return Verdict(True)


@lru_cache(maxsize=8192)
def facts(text: str) -> Facts:
    english = _english_facts(text)
    chinese = _chinese_facts(text) if _CJK.search(text) else _EMPTY_ZH
    negations, numbers, dates, entities, words, scope = english
    zneg, znum, zdates, zscope, core = chinese
    return Facts(
        negation_odd=(negations + zneg) % 2 == 1,
        numbers=frozenset(numbers | znum),
        dates=frozenset(dates | zdates),
        entities=frozenset(entities),
        words=frozenset(words),
        scope=frozenset(scope | zscope),
        cjk_core=core,
    )


# ---- English -------------------------------------------------------------------------------------------------


def _english_facts(text: str) -> tuple[int, set[float], set[str], set[str], set[str], set[str]]:
    tokens = [(m.group(0), m.start()) for m in _WORD.finditer(text)]
    lower = [t.lower().replace("’", "'") for t, _ in tokens]
    negations = 0
    numbers: set[float] = set()
    dates: set[str] = set()
    entities: set[str] = set()
    scope: set[str] = set()
    pending_words: list[str] = []  # a run of number words ("twenty five")
    for i, (tok, start) in enumerate(tokens):
        low = lower[i]
        prev = lower[i - 1] if i else ""
        nxt = lower[i + 1] if i + 1 < len(lower) else ""
        if low in lx.EN_NUMBER_WORDS and not (low == "one" and prev in lx.EN_ONE_PRONOUN_BEFORE):
            pending_words.append(low)
            continue
        if pending_words:
            numbers.add(_number_words_value(pending_words))
            pending_words = []
        if low in lx.EN_NEGATIONS or low.endswith("n't"):
            negations += 1
        if tok[0].isdigit():
            numbers.update(_digits_value(tok))
            continue
        if low in lx.EN_ORDINALS:
            numbers.add(lx.EN_ORDINALS[low])
        date = _english_date(low, prev, nxt)
        if date:
            dates.add(date)
        group = lx.EN_SCOPE.get(low)
        if group and not (low == "best" and nxt == "way"):  # "the best way to" asks how, not for a ranking
            scope.add(group)
        if _is_entity(tok, low, text, start, i):
            entities.add(low)
    if pending_words:
        numbers.add(_number_words_value(pending_words))
    return negations, numbers, dates, entities, set(lower), scope


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
    return not sentence_start or low not in lx.EN_COMMON_WORDS


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


# ---- Chinese -------------------------------------------------------------------------------------------------

_EMPTY_ZH: tuple[int, set[float], set[str], set[str], str] = (0, set(), set(), set(), "")


def _chinese_facts(text: str) -> tuple[int, set[float], set[str], set[str], str]:
    s = _A_NOT_A.sub(r"\1", text)
    for word in lx.ZH_NOT_NEGATION:  # 非常, 特别, 未来, 是否 ... carry a negation character but no negation
        s = s.replace(word, "※")
    dates: set[str] = set()
    s = _take(s, lx.ZH_DATES, dates)
    scope: set[str] = set()
    s = _take(s, lx.ZH_SCOPE, scope)
    negations = sum(s.count(w) for w in lx.ZH_NEGATIONS)
    for word in lx.ZH_NUMERAL_IDIOMS:  # 一下, 一些, 一起 ... contain 一 but no count
        s = s.replace(word, "※")
    numbers = {v for m in _CJK_NUMERAL.finditer(s) if (v := _zh_number(m.group(0))) is not None}
    core = s
    for word in lx.ZH_NEUTRAL:
        core = core.replace(word, "")
    core = "".join(c for c in core if _CJK.match(c) or c.isalnum())
    core = _CJK_NUMERAL.sub("", core)
    return negations, numbers, dates, scope, core


def _take(s: str, table: dict[str, str], found: set[str]) -> str:
    """Find each lexicon word (longest first), record its canonical tag, and blank it out of the text."""
    for word, tag in table.items():
        if word in s:
            found.add(tag)
            s = s.replace(word, "※")
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


def _cjk_substituted(a: str, b: str) -> bool:
    """True when one content word was swapped for another (北京 -> 上海, 苹果 -> 微软): a replace of at least
    one CJK character on each side. Reordering and added or dropped words are not substitutions."""
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "replace" and _CJK.search(a[i1:i2]) and _CJK.search(b[j1:j2]):
            if not (set(a[i1:i2]) & set(b[j1:j2])):
                return True
    return False
