"""Loader for `tests/data/semantic_eval.jsonl`, the in-house evaluation set that resembles real traffic.

Tune thresholds and word lists on `split="tune"` only; `split="holdout"` is for reporting (see tests/data/README.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson

EVAL_PATH = Path(__file__).resolve().parent.parent / "data" / "semantic_eval.jsonl"
KINDS = ("reword", "near_repeat", "negation", "swap", "number", "scope")
SPLITS = ("tune", "holdout")


@dataclass(frozen=True, slots=True)
class EvalPair:
    a: str  # the cached question
    b: str  # the new question
    same: bool  # True: a cache may answer b with a's answer
    kind: str  # one of KINDS
    lang: str  # en | zh
    split: str  # tune | holdout


def load_eval(split: str | None = None, path: Path = EVAL_PATH) -> list[EvalPair]:
    """All pairs in file order, or only those of one split (a typo in `split` raises rather than returning [])."""
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS} or None, not {split!r}")
    pairs = [EvalPair(**orjson.loads(line)) for line in path.read_bytes().splitlines() if line.strip()]
    return [p for p in pairs if split is None or p.split == split]
