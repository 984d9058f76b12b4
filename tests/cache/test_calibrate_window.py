"""`cache calibrate` and a pair that does not fit the embedding window: a miss, as in the gateway, never verified
or judged, and the other pairs' table unchanged. Real embedder, real verifier."""

from __future__ import annotations

from pathlib import Path

from gateway.cache.calibrate import Calibration, calibrate, load_pairs, main, score, similarities, window_fits
from gateway.cache.config import JudgeConfig, SemanticConfig
from gateway.cache.embedder import MiniLMEmbedder
from tests.cache.test_calibrate import PAIRS, write

# Past the window's 4,096 characters; the same text on both sides, so the verifier (were it run) would accept it
# and a judge band reaching down to 0 would (were it asked) serve it.
HUGE_TEXT = " ".join(f"How do I configure the backup schedule for server {i} in the west region?" for i in range(80))
HUGE = {"a": HUGE_TEXT, "b": HUGE_TEXT + "?", "same": True, "kind": "huge"}


def run(path: Path, embedder: MiniLMEmbedder, asked: list[str]) -> Calibration:
    """The command's computation (main() does exactly this), with a scripted judge that serves all it is asked."""
    async def judge(cached: str, new: str) -> bool:
        asked.append(new)
        return True

    pairs = load_pairs(path)
    config = SemanticConfig(judge=JudgeConfig(backend="small", model="m", threshold=0.0))
    return calibrate(pairs, embedder, config, max_wrong=0.0, judge=judge, fits=window_fits(pairs))


def test_a_pair_past_the_window_is_a_miss_and_the_rest_of_the_table_is_unchanged(
        tmp_path: Path, embedder: MiniLMEmbedder) -> None:
    asked_before: list[str] = []
    asked_after: list[str] = []
    before = run(write(tmp_path, PAIRS, "plain.jsonl"), embedder, asked_before)
    after = run(write(tmp_path, [*PAIRS[:2], HUGE, *PAIRS[2:]], "huge.jsonl"), embedder, asked_after)
    assert asked_after == asked_before and asked_before  # the judge was asked the same pairs, never the huge one
    assert len(after.rows) == len(before.rows)
    for old, new in zip(before.rows, after.rows, strict=True):
        assert new.threshold == old.threshold
        # the huge pair counts as one more should-hit pair, and as never served
        assert (new.served_same, new.same) == (old.served_same, old.same + 1)
        assert (new.served_different, new.different, new.wrong) == (old.served_different, old.different, old.wrong)


def test_the_huge_pair_is_scored_as_an_overflow_without_a_verdict(tmp_path: Path, embedder: MiniLMEmbedder) -> None:
    pairs = load_pairs(write(tmp_path, [HUGE, *PAIRS]))
    fits = window_fits(pairs)
    assert fits == [False] + [True] * len(PAIRS)
    huge, *rest = score(pairs, similarities(pairs, embedder), fits)
    assert (huge.similarity, huge.verified, huge.reason, huge.fits) == (0.0, False, "overflow", False)
    assert all(r.fits for r in rest)
    alone = score(pairs[1:], similarities(pairs[1:], embedder), fits[1:])
    assert rest == alone  # the other pairs' scores do not depend on the huge one


def test_the_command_counts_the_huge_pair_as_a_miss(tmp_path: Path, capsys) -> None:
    assert main(["--pairs", str(write(tmp_path, PAIRS, "plain.jsonl")), "--max-wrong", "0"]) == 0
    plain = capsys.readouterr().out
    assert main(["--pairs", str(write(tmp_path, [*PAIRS, HUGE], "huge.jsonl")), "--max-wrong", "0"]) == 0
    huge = capsys.readouterr().out
    assert "7 pairs (4 should hit, 3 must not)" in huge
    # every row serves the same pairs: only the should-hit count (3 -> 4) and so the recall change
    plain_rows = [line for line in plain.splitlines() if line.lstrip().startswith("0.")]
    huge_rows = [line for line in huge.splitlines() if line.lstrip().startswith("0.")]
    assert len(huge_rows) == len(plain_rows) == 15
    for p, h in zip(plain_rows, huge_rows, strict=True):
        p_th, _p_recall, p_wrong, p_same, p_diff, *p_mark = p.split()
        h_th, _h_recall, h_wrong, h_same, h_diff, *h_mark = h.split()
        assert (h_th, h_wrong, h_diff, h_mark) == (p_th, p_wrong, p_diff, p_mark)
        assert h_same == p_same.replace("/3", "/4")
