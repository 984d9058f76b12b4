"""The labelled pair sets of the semantic cache (tests/data/) and their recall / false-hit evaluation.

`semantic_pairs.jsonl` was written alongside the verifier (in-sample); `semantic_pairs_holdout.jsonl` was
written after the verifier's word lists were frozen and never used to tune them (out-of-sample).
A pair "hits" when its cosine similarity reaches the threshold and, with the verifier on, the verifier accepts
it; both texts go through the gateway's path (near-repeat form, `keys.semantic_text`, then the embedding).
The set that resembles real traffic, with its tune / holdout split, is `semantic_eval.jsonl` (eval_set.py). Recall is the share of same-meaning pairs that hit; the false-hit rate is the share of look-alike traps
that hit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from gateway.cache.keys import semantic_text
from gateway.cache.verifier import verify

DATA = Path(__file__).resolve().parent.parent / "data"
IN_SAMPLE = DATA / "semantic_pairs.jsonl"
HOLDOUT = DATA / "semantic_pairs_holdout.jsonl"


@dataclass(frozen=True, slots=True)
class Pair:
    a: str
    b: str
    same: bool
    kind: str  # paraphrase | near_repeat | negation | number | date | entity | scope
    lang: str  # en | zh


@dataclass(frozen=True, slots=True)
class Score:
    recall: float
    false_hit: float
    positives: int
    negatives: int


def load_pairs(path: Path) -> list[Pair]:
    return [Pair(**orjson.loads(line)) for line in path.read_bytes().splitlines() if line.strip()]


def similarities(pairs: list[Pair], encode) -> np.ndarray:
    """Cosine similarity of each pair with `encode(list[str]) -> unit vectors`, in batches of 64."""
    def embed(texts: list[str]) -> np.ndarray:
        return np.concatenate([encode(texts[i:i + 64]) for i in range(0, len(texts), 64)])

    return (embed([semantic_text(p.a) for p in pairs]) * embed([semantic_text(p.b) for p in pairs])).sum(axis=1)


def evaluate(pairs: list[Pair], sims: np.ndarray, threshold: float, use_verifier: bool,
             lang: str | None = None) -> Score:
    pos = neg = pos_hit = neg_hit = 0
    for pair, sim in zip(pairs, sims, strict=True):
        if lang is not None and pair.lang != lang:
            continue
        hit = sim >= threshold and (not use_verifier or verify(pair.b, pair.a).ok)
        if pair.same:
            pos += 1
            pos_hit += hit
        else:
            neg += 1
            neg_hit += hit
    return Score(pos_hit / max(pos, 1), neg_hit / max(neg, 1), pos, neg)


def table(pairs: list[Pair], sims: np.ndarray, thresholds: tuple[float, ...] = (0.85, 0.9, 0.95)) -> str:
    rows = ["| threshold | lang | recall (raw) | false hits (raw) | recall (verified) | false hits (verified) |",
            "|---|---|---|---|---|---|"]
    for th in thresholds:
        for lang in ("en", "zh", None):
            raw = evaluate(pairs, sims, th, False, lang)
            ver = evaluate(pairs, sims, th, True, lang)
            rows.append(f"| {th:.2f} | {lang or 'all'} | {raw.recall:.3f} | {raw.false_hit:.3f} | "
                        f"{ver.recall:.3f} | {ver.false_hit:.3f} |")
    return "\n".join(rows)
