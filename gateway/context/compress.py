"""Compression that needs no model: sentence-boundary truncation in tokens, system-prompt pruning by rule
priority, and exact / near-duplicate removal of retrieved documents (MinHash over word shingles)."""

from __future__ import annotations

import re
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gateway.errors import bad_request

CountText = Callable[[str], int]

# A sentence ends at . ! ? followed by whitespace, at CJK end punctuation, or at a line break; the
# separator stays with the sentence so the pieces join back to the exact text.
_SENTENCE = re.compile(r".+?(?:[.!?]+(?=\s|$)\s*|[。！？；]+\s*|\n+|$)", re.S)


def split_sentences(text: str) -> list[str]:
    return [p for p in _SENTENCE.findall(text) if p]


def truncate_to_tokens(text: str, budget: int, count: CountText) -> str:
    """The longest run of whole leading sentences of `text` within `budget` tokens ('' if none fits)."""
    if budget <= 0:
        return ""
    if count(text) <= budget:
        return text
    pieces = split_sentences(text)
    used, end = 0, 0
    for piece in pieces:
        cost = count(piece)
        if used + cost > budget:
            break
        used += cost
        end += 1
    # Token counts are not quite additive across a join (BPE merges at the seam): check the real count.
    while end > 0:
        candidate = "".join(pieces[:end]).rstrip()
        if count(candidate) <= budget:
            return candidate
        end -= 1
    return ""


# -- system prompt -----------------------------------------------------------------------------------------
_HARD = re.compile(
    r"\b(must|never|always|important|required|forbidden|prohibited|do not|don't|shall not|under no)\b"
    r"|必须|禁止|重要|务必|不得|严禁|不要|不能",
    re.I,
)
_SOFT = re.compile(
    r"\b(should|may|might|could|prefer|preferably|consider|try to|optionally|if possible|feel free)\b"
    r"|建议|可以|尽量|最好|可选",
    re.I,
)
HARD, PLAIN, SOFT = 0, 1, 2


def line_priority(line: str) -> int:
    if _HARD.search(line):
        return HARD
    if _SOFT.search(line):
        return SOFT
    return PLAIN


def prune_system(text: str, budget: int, count: CountText) -> str:
    """Drop suggestion lines, then plain lines (last first), never hard rules, until `text` fits `budget`.

    What is kept keeps its order. The result may still exceed `budget` when the hard rules alone do.
    """
    if count(text) <= budget:
        return text
    lines = text.splitlines(keepends=True)
    keep = [True] * len(lines)
    costs = [count(line) for line in lines]
    total = sum(costs)
    for level in (SOFT, PLAIN):
        for i in range(len(lines) - 1, -1, -1):
            if total <= budget:
                break
            if keep[i] and line_priority(lines[i]) == level:
                keep[i] = False
                total -= costs[i]
        pruned = "".join(line for line, k in zip(lines, keep, strict=True) if k)
        if count(pruned) <= budget:
            return pruned.rstrip("\n")
    return "".join(line for line, k in zip(lines, keep, strict=True) if k).rstrip("\n")


# -- documents ---------------------------------------------------------------------------------------------
@dataclass(slots=True)
class Document:
    id: str
    content: str
    score: float = 0.0
    static: bool = False  # shared across requests: goes into the stable prefix


def parse_documents(raw: object) -> list[Document]:
    """The `documents` extension field, validated; errors name the offending field."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise bad_request("`documents` must be a list of {id, content, score} objects", param="documents")
    docs: list[Document] = []
    for i, item in enumerate(raw):
        where = f"documents[{i}]"
        if not isinstance(item, dict):
            raise bad_request(f"{where} must be an object with `content`", param=where)
        content = item.get("content")
        if not isinstance(content, str):
            raise bad_request(f"{where}.content must be a string", param=f"{where}.content")
        doc_id = item.get("id", str(i))
        if not isinstance(doc_id, str | int) or isinstance(doc_id, bool):
            raise bad_request(f"{where}.id must be a string", param=f"{where}.id")
        score = item.get("score", 0.0)
        if isinstance(score, bool) or not isinstance(score, int | float) or score != score:
            raise bad_request(f"{where}.score must be a number", param=f"{where}.score")
        static = item.get("static", False)
        if not isinstance(static, bool):
            raise bad_request(f"{where}.static must be true or false", param=f"{where}.static")
        docs.append(Document(str(doc_id), content, float(score), static))
    return docs


_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]|\w+")
_PERMUTATIONS = 64
_rng = np.random.default_rng(0x5EED)
_MUL = _rng.integers(1, 2**63, size=_PERMUTATIONS, dtype=np.uint64) | np.uint64(1)  # odd multipliers
_ADD = _rng.integers(0, 2**63, size=_PERMUTATIONS, dtype=np.uint64)
_SIGNATURES: OrderedDict[int, np.ndarray] = OrderedDict()
_SIGNATURES_MAX = 16_384
_signatures_lock = threading.Lock()


def _normalised(text: str) -> str:
    return " ".join(text.split()).casefold()


def minhash(text: str) -> np.ndarray:
    """A 64-value MinHash signature of the text's word 3-shingles (CJK characters count as words)."""
    key = hash(text)  # per-process cache: Python's salted string hash is enough and is cached on the string
    with _signatures_lock:
        cached = _SIGNATURES.get(key)
    if cached is not None:
        return cached
    words = _WORD.findall(text.casefold())
    shingles = {" ".join(words[i : i + 3]) for i in range(max(1, len(words) - 2))} or {""}
    values = np.fromiter(
        (zlib.crc32(s.encode("utf-8", "surrogatepass")) for s in shingles),  # stable across processes
        dtype=np.uint64,
        count=len(shingles),
    )
    with np.errstate(over="ignore"):  # multiply-shift hashing wraps around 2**64 on purpose
        hashed = values[None, :] * _MUL[:, None] + _ADD[:, None]
    signature = (hashed >> np.uint64(32)).min(axis=1).astype(np.uint32)
    with _signatures_lock:
        _SIGNATURES[key] = signature
        while len(_SIGNATURES) > _SIGNATURES_MAX:
            _SIGNATURES.popitem(last=False)
    return signature


def dedupe(docs: list[Document], near_duplicate: float) -> tuple[list[Document], list[Document]]:
    """Drop exact copies (after whitespace/case normalisation) and near copies, keeping the best-scored one.

    Returns (kept in descending score order, removed).
    """
    ranked = sorted(docs, key=lambda d: -d.score)
    seen: set[str] = set()
    unique: list[Document] = []
    removed: list[Document] = []
    for doc in ranked:
        norm = _normalised(doc.content)
        if norm in seen:
            removed.append(doc)
        else:
            seen.add(norm)
            unique.append(doc)
    if len(unique) < 2:
        return unique, removed
    signatures = np.stack([minhash(d.content) for d in unique])
    agree = np.count_nonzero(signatures[:, None, :] == signatures[None, :, :], axis=2)
    # Agreeing MinHash values estimate the Jaccard similarity of the shingle sets.
    close = (agree >= near_duplicate * _PERMUTATIONS).tolist()
    kept_idx: list[int] = []
    for i in range(len(unique)):
        row = close[i]
        if any(row[j] for j in kept_idx):
            removed.append(unique[i])
        else:
            kept_idx.append(i)
    return [unique[i] for i in kept_idx], removed
