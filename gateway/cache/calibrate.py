"""Calibration of the semantic layer on labelled question pairs: `llm-gateway cache calibrate`.

Each pair goes through the gateway's own lookup path: both texts in near-repeat form (`keys.semantic_text`),
embedded by the same model, the cosine compared with a threshold, the verifier, and, when the route names one,
the judge for candidates between the judge's threshold and the route's. For every threshold of a sweep it
reports recall (the share of should-hit pairs served) and the wrong-answer rate (the share of must-not-hit
pairs served), and picks the threshold that serves the most should-hits within a wrong-answer budget.

Pair file: JSON Lines, one object per line, `{"a": "cached question", "b": "new question", "same": true}`
(`same`: whether the answer to `a` answers `b`). Other fields (`kind`, `lang`, `split`, ...) are kept for
breakdowns and otherwise ignored; blank lines are skipped.

    llm-gateway cache calibrate --pairs FILE.jsonl [--max-wrong 0.01] [--policy FILE] [--route MODEL]

Exit status: 0 with a best threshold, 1 when no threshold keeps within the budget, 2 on a malformed pair
file, policy or arguments (the message names the file and line).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import orjson

from gateway.cache.keys import semantic_text
from gateway.cache.verifier import verify

if TYPE_CHECKING:
    from gateway.cache.config import SemanticConfig

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
    reason: str | None  # the verifier's, when it turned the pair down; "overflow" for a pair that does not fit
    fits: bool = True  # both texts fit the embedding window (else never a semantic hit, never verified or judged)


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


def score(pairs: Sequence[LabelledPair], sims: np.ndarray, fits: Sequence[bool] | None = None) -> list[PairResult]:
    """The verifier's verdict on each pair (the new question as the query). A pair whose text does not fit
    the embedding window (`fits[i]` False) is never a semantic hit in the gateway: scored as similarity 0, and
    not verified. The gateway never verifies such a text either, and the verifier's cost grows faster than the
    length (a 43k-character pair of common words ran past 300 s) for a verdict that could not count."""
    out = []
    for i, (pair, sim) in enumerate(zip(pairs, sims, strict=True)):
        if fits is not None and not fits[i]:
            out.append(PairResult(pair, 0.0, False, "overflow", fits=False))
            continue
        verdict = verify(semantic_text(pair.b), semantic_text(pair.a))
        out.append(PairResult(pair, float(sim), verdict.ok, verdict.reason))
    return out


def window_fits(pairs: Sequence[LabelledPair]) -> list[bool]:
    """Whether both texts of each pair fit the embedding window, as the gateway decides it."""
    from gateway.cache.window import minilm_window

    window = minilm_window()
    fit_a = window.fits([semantic_text(p.a) for p in pairs])
    fit_b = window.fits([semantic_text(p.b) for p in pairs])
    return [x and y for x, y in zip(fit_a, fit_b, strict=True)]


@dataclass(frozen=True, slots=True)
class Calibration:
    rows: list[Row]
    best: Row | None
    current: Row | None  # the route's own threshold, when it is one of the sweep's
    judged: int  # pairs asked to the judge


def calibrate(pairs: Sequence[LabelledPair], encoder: Encoder, semantic: SemanticConfig, max_wrong: float,
              thresholds: Sequence[float] = DEFAULT_THRESHOLDS, judge: JudgeFn | None = None,
              fits: Sequence[bool] | None = None, judge_close: Callable[[], Any] | None = None) -> Calibration:
    """The gateway's lookup decision on every pair, per threshold: the route's `verify` setting, and its judge
    (when `judge` is given and the route names one) between the judge's threshold and each swept threshold."""
    thresholds = sorted({*thresholds, semantic.threshold})
    results = score(pairs, similarities(pairs, encoder), fits)
    judged: dict[int, bool] | None = None
    judge_threshold = semantic.judge.threshold if semantic.judge is not None else None
    if judge is not None and judge_threshold is not None:
        judged = run_judge(results, judge, judge_threshold, max(thresholds), semantic.verify, judge_close)
    rows = sweep(results, thresholds, semantic.verify, judged, judge_threshold)
    current = next((r for r in rows if abs(r.threshold - semantic.threshold) < 1e-9), None)
    return Calibration(rows, best(rows, max_wrong), current, len(judged or {}))


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
            if not r.fits or (use_verifier and not r.verified):
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
                      top: float, use_verifier: bool = True) -> dict[int, bool]:
    """Ask the judge about every pair (that the verifier passed) in the band the gateway would ask it about;
    never about a pair that does not fit the window, which the gateway never looks up (even were the band to
    start at similarity 0)."""
    verdicts: dict[int, bool] = {}
    for i, r in enumerate(results):
        if r.fits and (r.verified or not use_verifier) and judge_threshold <= r.similarity < top:
            answer = judge(semantic_text(r.pair.a), semantic_text(r.pair.b))
            if inspect.isawaitable(answer):
                answer = await answer
            verdicts[i] = bool(getattr(answer, "same", answer))
    return verdicts


def run_judge(results: Sequence[PairResult], judge: JudgeFn, judge_threshold: float, top: float,
              use_verifier: bool = True, close: Callable[[], Any] | None = None) -> dict[int, bool]:
    """judge_pairs on a fresh event loop; `close` (a coroutine function) runs on the same loop at the end."""
    async def run() -> dict[int, bool]:
        try:
            return await judge_pairs(results, judge, judge_threshold, top, use_verifier)
        finally:
            if close is not None:
                await close()

    return asyncio.run(run())


def format_table(rows: Sequence[Row], chosen: Row | None = None) -> str:
    lines = ["threshold  recall  wrong   served same  served different",
             "---------  ------  ------  -----------  ----------------"]
    for r in rows:
        mark = "  <- best" if chosen is not None and r.threshold == chosen.threshold else ""
        lines.append(f"{r.threshold:9.2f}  {r.recall:6.3f}  {r.wrong:6.3f}  {r.served_same:5d}/{r.same:<5d}  "
                     f"{r.served_different:5d}/{r.different:<5d}{mark}")
    return "\n".join(lines)


# ---- the command -------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llm-gateway cache calibrate",
        description="Recall and wrong-answer rate per semantic threshold on labelled question pairs, through "
                    "the gateway's own lookup path (normalise, embed, threshold, verifier, judge).")
    parser.add_argument("--pairs", required=True, help='JSON Lines: {"a": cached, "b": new, "same": true|false}')
    parser.add_argument("--max-wrong", type=float, default=0.01,
                        help="wrong-answer budget: share of same=false pairs that may be served (default 0.01)")
    parser.add_argument("--policy", help="policy YAML whose route settings to use (default: built-in defaults)")
    parser.add_argument("--route", metavar="MODEL", help="the model whose route to use (default: the first "
                                                         "route with a semantic section)")
    return parser


class _ArgumentError(Exception):
    pass


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0.0 <= args.max_wrong <= 1.0:
        parser.error(f"--max-wrong must be between 0 and 1, got {args.max_wrong}")
    try:
        pairs = load_pairs(args.pairs)
        policy, semantic, route_name = _route_settings(args.policy, args.route)
    except (PairsFileError, _ArgumentError) as e:
        print(f"llm-gateway cache calibrate: {e}", file=sys.stderr)
        return 2
    from gateway.cache.embedder import shared_embedder

    try:  # a bad precision or backend in the environment: a usage error (2), not "no threshold" (1)
        embedder = shared_embedder()
    except ValueError as e:
        print(f"llm-gateway cache calibrate: {e}", file=sys.stderr)
        return 2
    judge_text = "none"
    judge = closer = None
    if semantic.judge is not None and policy is not None:
        judge, closer = _policy_judge(policy, semantic.judge)
        judge_text = (f"{semantic.judge.model} on {semantic.judge.backend}, from {semantic.judge.threshold:.2f}, "
                      f"P(yes) >= {semantic.judge.min_confidence}")
    result = calibrate(pairs, embedder, semantic, args.max_wrong, judge=judge, fits=window_fits(pairs),
                       judge_close=closer)
    same = sum(p.same for p in pairs)
    print(f"{len(pairs)} pairs ({same} should hit, {len(pairs) - same} must not) from {args.pairs}")
    print(f"route: {route_name}; verifier {'on' if semantic.verify else 'off'}; judge: {judge_text}"
          + (f" ({result.judged} pairs asked)" if result.judged else ""))
    print()
    print(format_table(result.rows, result.best))
    print()
    if result.current is not None:
        print(f"route's threshold {semantic.threshold:.2f}: recall {result.current.recall:.3f}, "
              f"wrong answers {result.current.wrong:.3f}")
    if result.best is None:
        print(f"no threshold keeps wrong answers within {args.max_wrong:.3f}")
        return 1
    print(f"best threshold within {args.max_wrong:.3f} wrong answers: {result.best.threshold:.2f} "
          f"(recall {result.best.recall:.3f}, wrong answers {result.best.wrong:.3f})")
    return 0


def _route_settings(policy_path: str | None, model: str | None) -> tuple[Any, SemanticConfig, str]:
    from gateway.cache.config import SemanticConfig
    from gateway.config.errors import PolicyError

    if policy_path is None:
        if model is not None:
            raise _ArgumentError("--route needs --policy")
        return None, SemanticConfig(), "built-in defaults"
    from gateway.config.loader import load_policy

    try:
        policy = load_policy(policy_path)
    except (PolicyError, OSError) as e:
        errors = getattr(e, "errors", None) or [e]
        raise _ArgumentError("; ".join(str(err) for err in errors)) from e
    if model is not None:
        route = policy.route_for(model)
        if route is None:
            raise _ArgumentError(f"no route of {policy_path} matches model {model!r}")
    else:
        route = next((r for r in policy.routes if r.cache is not None and r.cache.semantic is not None), None)
        if route is None:
            raise _ArgumentError(f"no route of {policy_path} has a semantic cache")
    if route.cache is None or route.cache.semantic is None:
        raise _ArgumentError(f"the route for {route.model!r} in {policy_path} has no semantic cache")
    return policy, route.cache.semantic, f"{route.model} ({policy_path})"


def _policy_judge(policy: Any, config: Any) -> tuple[JudgeFn, Callable[[], Any]]:
    """The route's judge, on the backend the policy names, as the gateway builds it."""
    from gateway.backends import build_backend
    from gateway.cache.judge import Judge
    from gateway.metrics import Metrics

    backend_config = policy.backends[config.backend]
    backend = build_backend(backend_config, Metrics())
    started = False

    async def ask(cached: str, new: str) -> bool:
        nonlocal started
        if not started:
            await backend.start()
            started = True
        verdict = await Judge(config, lambda: backend, logprobs=backend_config.type != "anthropic").same_answer(
            cached, new)
        return verdict.same

    async def close() -> None:
        if started:
            await backend.close()

    return ask, close
