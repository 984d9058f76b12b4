"""Calibration of the semantic layer on labelled question pairs: `llm-gateway cache calibrate`.

Each pair goes through the gateway's own lookup path: both texts in near-repeat form (`keys.semantic_text`),
embedded by the same model, the cosine compared with a threshold, the verifier, and, when the route names one,
the judge for candidates between the judge's threshold and the route's. For every threshold of a sweep it
reports recall (the share of should-hit pairs served) and the wrong-answer rate (the share of must-not-hit
pairs served), and picks the threshold that serves the most should-hits within a wrong-answer budget.

Pair file: JSON Lines, one object per line, `{"a": "cached question", "b": "new question", "same": true}`
(`same`: whether the answer to `a` answers `b`). Other fields (`kind`, `lang`, `split`, ...) are kept for
breakdowns and otherwise ignored; blank lines are skipped.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import orjson

from gateway.cache.keys import semantic_text
from gateway.cache.verifier import verify

DEFAULT_THRESHOLDS = tuple(round(0.70 + 0.02 * i, 2) for i in range(15))  # 0.70 .. 0.98


class PairsFileError(ValueError):
    """A malformed pair file; `line` is 1-based (0 when the file as a whole is the problem)."""

    def __init__(self, path: str, line: int, message: str) -> None:
        self.path, self.line = path, line
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")


@dataclass(frozen=True, slots=True)
class LabelledPair:
    a: str  # the cached question
    b: str  # the new question
    same: bool  # may a's answer be served for b
    extra: dict[str, Any] = field(default_factory=dict)  # kind, lang, split ...


class Encoder(Protocol):
    def encode(self, texts: list[str]) -> np.ndarray: ...


# A judge: (cached question, new question) -> serve? May be async. The gateway's `Judge.same_answer` fits
# through `judge_from()`; tests inject scripted ones.
JudgeFn = Callable[[str, str], Any]


@dataclass(frozen=True, slots=True)
class PairResult:
    pair: LabelledPair
    similarity: float
    verified: bool
    reason: str | None  # the verifier's, when it turned the pair down


@dataclass(frozen=True, slots=True)
class Row:
    threshold: float
    recall: float
    wrong: float
    served_same: int
    served_different: int
    same: int
    different: int


def load_pairs(path: str | Path) -> list[LabelledPair]:
    """Read a pair file; raises PairsFileError naming the line of the first malformed record."""
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise PairsFileError(name, 0, f"cannot read: {e.strerror or e}") from e
    pairs = []
    for number, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            raise PairsFileError(name, number, f"not valid JSON ({e})") from e
        if not isinstance(record, dict):
            raise PairsFileError(name, number, 'expected an object {"a": ..., "b": ..., "same": true|false}')
        for key in ("a", "b"):
            value = record.get(key)
            if not isinstance(value, str) or not value.strip():
                raise PairsFileError(name, number, f'"{key}" must be a non-empty string')
        same = record.get("same")
        if not isinstance(same, bool):
            raise PairsFileError(name, number, f'"same" must be true or false, got {same!r}')
        extra = {k: v for k, v in record.items() if k not in ("a", "b", "same")}
        pairs.append(LabelledPair(record["a"], record["b"], same, extra))
    if not pairs:
        raise PairsFileError(name, 0, "no pairs in the file")
    if not any(p.same for p in pairs) or all(p.same for p in pairs):
        raise PairsFileError(name, 0, 'needs pairs of both labels ("same": true and "same": false)')
    return pairs


def similarities(pairs: Sequence[LabelledPair], encoder: Encoder, batch: int = 64) -> np.ndarray:
    """Cosine of each pair, both texts in the form the gateway embeds."""
    texts_a = [semantic_text(p.a) for p in pairs]
    texts_b = [semantic_text(p.b) for p in pairs]

    def embed(texts: list[str]) -> np.ndarray:
        return np.concatenate([encoder.encode(texts[i:i + batch]) for i in range(0, len(texts), batch)])

    return (embed(texts_a) * embed(texts_b)).sum(axis=1)


def score(pairs: Sequence[LabelledPair], sims: np.ndarray) -> list[PairResult]:
    out = []
    for pair, sim in zip(pairs, sims, strict=True):
        verdict = verify(semantic_text(pair.b), semantic_text(pair.a))  # query = new question
        out.append(PairResult(pair, float(sim), verdict.ok, verdict.reason))
    return out


def sweep(results: Sequence[PairResult], thresholds: Sequence[float] = DEFAULT_THRESHOLDS,
          use_verifier: bool = True, judged: dict[int, bool] | None = None,
          judge_threshold: float | None = None) -> list[Row]:
    """Recall and wrong-answer rate per threshold. With a judge, a pair scoring in [judge_threshold, threshold)
    that passed the verifier is served when `judged[index]` is True (the gateway's judge band)."""
    same = sum(r.pair.same for r in results)
    different = len(results) - same
    rows = []
    for th in thresholds:
        hit_same = hit_diff = 0
        for i, r in enumerate(results):
            if use_verifier and not r.verified:
                continue
            if r.similarity >= th:
                hit = True
            elif judged is not None and judge_threshold is not None and r.similarity >= judge_threshold:
                hit = judged.get(i, False)
            else:
                hit = False
            if hit and r.pair.same:
                hit_same += 1
            elif hit:
                hit_diff += 1
        rows.append(Row(th, hit_same / max(same, 1), hit_diff / max(different, 1), hit_same, hit_diff, same,
                        different))
    return rows


def best(rows: Sequence[Row], max_wrong: float) -> Row | None:
    """The row serving the most should-hits within the wrong-answer budget (the higher threshold on ties)."""
    within = [r for r in rows if r.wrong <= max_wrong + 1e-12]
    if not within:
        return None
    return max(within, key=lambda r: (r.recall, r.threshold))


async def judge_pairs(results: Sequence[PairResult], judge: JudgeFn, judge_threshold: float,
                      top: float) -> dict[int, bool]:
    """Ask the judge about every verified pair in the band the gateway would ask it about."""
    verdicts: dict[int, bool] = {}
    for i, r in enumerate(results):
        if r.verified and judge_threshold <= r.similarity < top:
            answer = judge(semantic_text(r.pair.a), semantic_text(r.pair.b))
            if inspect.isawaitable(answer):
                answer = await answer
            verdicts[i] = bool(getattr(answer, "same", answer))
    return verdicts


def run_judge(results: Sequence[PairResult], judge: JudgeFn, judge_threshold: float,
              top: float) -> dict[int, bool]:
    return asyncio.run(judge_pairs(results, judge, judge_threshold, top))


def format_table(rows: Sequence[Row], chosen: Row | None = None) -> str:
    lines = ["threshold  recall  wrong   served same  served different",
             "---------  ------  ------  -----------  ----------------"]
    for r in rows:
        mark = "  <- best" if chosen is not None and r.threshold == chosen.threshold else ""
        lines.append(f"{r.threshold:9.2f}  {r.recall:6.3f}  {r.wrong:6.3f}  {r.served_same:5d}/{r.same:<5d}  "
                     f"{r.served_different:5d}/{r.different:<5d}{mark}")
    return "\n".join(lines)
