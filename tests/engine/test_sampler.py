"""Sampler: greedy, temperature, top-k, top-p, min-p, seeds; SamplingParams validation."""

from __future__ import annotations

import pytest
import torch

from engine.sampler import sample
from engine.sampling_params import SamplingParams

LOGITS = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]])


def draw(params: SamplingParams, n: int = 2000, seed: int = 0) -> torch.Tensor:
    """Token counts over n seeded draws."""
    generator = torch.Generator().manual_seed(seed)
    counts = torch.zeros(LOGITS.shape[1])
    for _ in range(n):
        (token,) = sample(LOGITS, [params], [generator]).token_ids
        counts[token] += 1
    return counts


def test_greedy_is_argmax_per_row() -> None:
    logits = torch.tensor([[0.1, 3.0, 0.2], [5.0, 0.0, 1.0]])
    params = [SamplingParams(temperature=0.0)] * 2
    assert sample(logits, params, [None, None]).token_ids == [1, 0]


def test_temperature_one_follows_softmax() -> None:
    counts = draw(SamplingParams(temperature=1.0))
    expected = LOGITS.softmax(-1)[0] * counts.sum()
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    assert chi2 < 25.0  # 5 degrees of freedom; fails for a wrong distribution (e.g. greedy or uniform)


def test_top_k_top_p_min_p_restrict_support() -> None:
    assert set(draw(SamplingParams(top_k=2), 400).nonzero().flatten().tolist()) == {0, 1}
    probs = LOGITS.softmax(-1)[0]  # ~[0.57, 0.21, 0.13, 0.08, ...]
    assert set(draw(SamplingParams(top_p=0.7), 400).nonzero().flatten().tolist()) == {0, 1}
    assert draw(SamplingParams(top_p=0.01), 50)[0] == 50
    allowed = {i for i in range(6) if probs[i] >= 0.2 * probs.max()}
    assert set(draw(SamplingParams(min_p=0.2), 400).nonzero().flatten().tolist()) == allowed


def test_mixed_batch_keeps_each_rows_rule_and_seeded_rows_are_reproducible() -> None:
    logits = LOGITS.repeat(3, 1)
    params = [SamplingParams(temperature=0.0), SamplingParams(temperature=1.5, seed=1), SamplingParams(temperature=1.5)]
    runs = []
    for _ in range(2):
        generators = [None, torch.Generator().manual_seed(11), None]
        runs.append([sample(logits, params, generators).token_ids[:2] for _ in range(20)])
    assert all(row[0] == 0 for row in runs[0])
    assert runs[0] == runs[1]
    assert len({row[1] for row in runs[0]}) > 1


def test_logprobs_only_for_rows_that_ask() -> None:
    result = sample(LOGITS.repeat(2, 1), [SamplingParams(temperature=0.0, logprobs=2), SamplingParams(temperature=0.0)],
                    [None, None])
    first, second = result.logprobs
    assert second is None
    assert first["token_id"] == 0 and [t for t, _ in first["top_logprobs"]] == [0, 1]
    assert first["logprob"] == pytest.approx(LOGITS.log_softmax(-1)[0, 0].item())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"min_p": 2.0}, "min_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"stop": [""]}, "stop"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
        ({"logprobs": 21}, "logprobs"),
        ({"n": 0}, "n must"),
    ],
)
def test_sampling_params_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs).validate()


def test_valid_params_and_single_stop_string() -> None:
    params = SamplingParams(stop="END", top_k=-1, max_tokens=None)  # type: ignore[arg-type]
    params.validate()
    assert params.stop == ["END"] and not params.top_k_enabled
