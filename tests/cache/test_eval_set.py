"""Shape of the evaluation set: the split stays fixed and balanced, labels agree with kinds (no model needed)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.cache.eval_set import KINDS, SPLITS, load_eval

SAME_KINDS = {"reword", "near_repeat"}


def test_every_pair_is_well_formed() -> None:
    pairs = load_eval()
    assert len(pairs) >= 640
    assert len({(p.a, p.b) for p in pairs}) == len(pairs)
    for p in pairs:
        assert p.a.strip() and p.b.strip() and p.a != p.b
        assert p.kind in KINDS and p.lang in ("en", "zh") and p.split in SPLITS
        assert p.same == (p.kind in SAME_KINDS), p


def test_split_is_half_and_half_in_every_cell() -> None:
    cells = Counter((p.kind, p.lang, p.split) for p in load_eval())
    for kind in KINDS:
        for lang in ("en", "zh"):
            tune, holdout = cells[(kind, lang, "tune")], cells[(kind, lang, "holdout")]
            assert tune > 0 and abs(tune - holdout) <= 1, (kind, lang, tune, holdout)


def test_filters_by_split() -> None:
    tune, holdout = load_eval("tune"), load_eval("holdout")
    assert {p.split for p in tune} == {"tune"} and {p.split for p in holdout} == {"holdout"}
    assert len(tune) + len(holdout) == len(load_eval())
    with pytest.raises(ValueError):
        load_eval("train")
