"""Do two answers say the same thing? The check behind the semantic cache's learning (learning.py).

A cached answer and a fresh one to a look-alike question are compared on the hard facts they state (numbers
with their signs, yes/no, names and identifiers) and, when those do not differ, on the meaning of their
wording (MiniLM cosine). Facts are compared one way or the other (one answer's facts found in the other's),
because a reworded answer often adds a detail; two answers each stating a fact the other lacks differ.
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np

AGREE_COSINE = 0.5  # answers of one question rarely fall below this; answers to look-alikes often sit above it
NUMBER_TOLERANCE = 0.02  # 453.6 g and "roughly 454 g" are one fact
MAX_CHARS = 1500  # compared and embedded: answers are judged on their opening, where the fact is stated

_NUMBER = re.compile(r"(?<![\w.])[-+−]?\d+(?:[,\u00a0]\d{3})*(?:\.\d+)?(?:\s?[kK]\b)?")
_CODE = re.compile(r"(?<!\w)(?:--?[a-zA-Z][\w-]*|\w+[~^]\d*|\w+\(\)|\.\w{2,4}\b)")  # --soft, HEAD~1, len(), .csv
_NAME = re.compile(r"\b(?:[A-Z][a-zA-Z0-9]*[A-Z0-9][a-zA-Z0-9]*|[A-Z][a-z]+(?:[A-Z][a-z]+)+)\b")  # USPS, iOS17, PayPal

def fact_text(completion: dict) -> str:
    """The text an answer states: the first choice's content, or its tool calls, as plain text."""
    choices = completion.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    choice = choices[0]
    message = choice.get("message")
    if isinstance(message, dict):
        text = message.get("content") or ""
        calls = message.get("tool_calls") or []
        if calls:
            text += " " + " ".join(str(c.get("function", "")) for c in calls if isinstance(c, dict))
    else:
        text = choice.get("text") or ""
    return unicodedata.normalize("NFKC", str(text))[:MAX_CHARS]


def numbers(text: str) -> list[float]:
    out = []
    for raw in _NUMBER.findall(text):
        cleaned = raw.replace(",", "").replace("\u00a0", "").replace("−", "-").strip()
        scale = 1000.0 if cleaned[-1:] in "kK" else 1.0
        try:
            out.append(float(cleaned.rstrip("kK ")) * scale)
        except ValueError:
            continue
    return out


def _found(value: float, pool: list[float]) -> bool:
    return any(abs(value - other) <= NUMBER_TOLERANCE * max(abs(value), abs(other), 1.0) for other in pool)


def _covered(small: list[float], large: list[float]) -> bool:
    return all(_found(v, large) for v in small)


def facts_differ(a: str, b: str) -> str | None:
    """Why two answers state different facts ("number", "name", "identifier", "polarity"), or None."""
    na, nb = numbers(a), numbers(b)
    if not (_covered(na, nb) or _covered(nb, na)):
        return "number"
    names_a, names_b = set(_NAME.findall(a)), set(_NAME.findall(b))
    if names_a and names_b and not (names_a <= names_b or names_b <= names_a) and not names_a & names_b:
        return "name"
    code_a, code_b = set(_CODE.findall(a)), set(_CODE.findall(b))
    if code_a and code_b and not (code_a <= code_b or code_b <= code_a):
        return "identifier"
    pa, pb = _opening_polarity(a), _opening_polarity(b)
    if pa is not None and pb is not None and pa != pb:
        return "polarity"
    return None


def _opening_polarity(text: str) -> bool | None:
    """A yes/no answer's verdict from its first sentence: True yes, False no, None when it gives none."""
    first = re.split(r"(?<=[.!?。！？])\s*", text.strip(), maxsplit=1)[0].lower()
    if re.match(r"^\W*(yes|yeah|yep|sí|si|oui|ja|sim|是|可以|对)\b", first):
        return True
    if re.match(r"^\W*(no|nope|non|nein|não|不|没有)\b", first):
        return False
    return None


def by_facts(a: str, b: str) -> tuple[bool, str] | None:
    """(agree, why) when the texts alone decide (equal, or stating other facts); None when the meaning must."""
    if " ".join(a.split()).lower() == " ".join(b.split()).lower():
        return True, "equal"
    differ = facts_differ(a, b)
    return None if differ is None else (False, differ)


def by_meaning(va: np.ndarray, vb: np.ndarray) -> tuple[bool, str]:
    """(agree, why) from the answers' unit-length embeddings."""
    return float(np.dot(va, vb)) >= AGREE_COSINE, "meaning"


def answers_agree(a: str, b: str, va: np.ndarray | None, vb: np.ndarray | None) -> tuple[bool, str]:
    """(agree, why) for two answer texts and their embeddings (None: facts only)."""
    decided = by_facts(a, b)
    if decided is not None:
        return decided
    return (True, "facts") if va is None or vb is None else by_meaning(va, vb)
