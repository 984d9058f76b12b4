"""Batched sampling: greedy, temperature, top-k, top-p, min-p, per-request seeds, logprobs.

Random rows use the exponential race (argmax of p / Exp(1)), an exact categorical draw without a
sort or multinomial; a seeded row draws its noise from its own generator, so its output does not
depend on which other requests share the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.sampling_params import SamplingParams


@dataclass
class SampleResult:
    token_ids: list[int]
    logprobs: list[dict | None]  # per row: {"token_id", "logprob", "top_logprobs": [[id, logprob], ...]}
    spec_token_ids: list[list[int]] = field(default_factory=list)  # per speculating sequence: tokens to emit


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator | None]) -> SampleResult:
    """logits: [B, V] float32, one row per sequence that needs a next token."""
    greedy = [p.temperature == 0.0 for p in params]
    if all(greedy):
        tokens = logits.argmax(dim=-1)
    else:
        tokens = _sample_random(logits, params, generators)
        if any(greedy):
            greedy_rows = torch.tensor(greedy, device=logits.device)
            tokens = torch.where(greedy_rows, logits.argmax(dim=-1), tokens)
    token_list = tokens.tolist()
    return SampleResult(token_list, _logprobs(logits, params, token_list))


def _sample_random(logits: torch.Tensor, params: list[SamplingParams],
                   generators: list[torch.Generator | None]) -> torch.Tensor:
    probs = processed_probs(logits, params)
    vocab = logits.shape[1]
    noise = torch.empty_like(probs).exponential_()
    for row, generator in enumerate(generators):
        if generator is not None:
            noise[row] = torch.empty(vocab).exponential_(generator=generator).to(device=probs.device)
    return (probs / noise).argmax(dim=-1)


def processed_probs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """The distribution each row samples from: temperature, then top-k / top-p, then min-p (also what
    speculative decoding's rejection rule compares draft tokens against)."""
    device = logits.device
    temps = torch.tensor([p.temperature if p.temperature > 0 else 1.0 for p in params], device=device)
    scaled = logits / temps.unsqueeze(1)
    vocab = logits.shape[1]
    if any(p.top_k > 0 for p in params) or any(p.top_p < 1.0 for p in params):
        scaled = _top_k_top_p(scaled, params, vocab)
    if any(p.min_p > 0 for p in params):
        min_p = torch.tensor([p.min_p for p in params], device=device).unsqueeze(1)
        probs = scaled.softmax(dim=-1)
        scaled = scaled.masked_fill(probs < probs.max(dim=-1, keepdim=True).values * min_p, float("-inf"))
    return scaled.softmax(dim=-1)


def _top_k_top_p(scaled: torch.Tensor, params: list[SamplingParams], vocab: int) -> torch.Tensor:
    sorted_logits, order = scaled.sort(dim=-1, descending=True)
    ranks = torch.arange(vocab, device=scaled.device).unsqueeze(0)
    k = torch.tensor([p.top_k if p.top_k > 0 else vocab for p in params], device=scaled.device).unsqueeze(1)
    sorted_logits = sorted_logits.masked_fill(ranks >= k, float("-inf"))
    top_p = torch.tensor([p.top_p for p in params], device=scaled.device).unsqueeze(1)
    probs = sorted_logits.softmax(dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    sorted_logits = sorted_logits.masked_fill(mass_before >= top_p, float("-inf"))  # the first token always stays
    return torch.full_like(scaled, float("-inf")).scatter(1, order, sorted_logits)


def _logprobs(logits: torch.Tensor, params: list[SamplingParams], tokens: list[int]) -> list[dict | None]:
    wanted = [i for i, p in enumerate(params) if p.logprobs is not None]
    out: list[dict | None] = [None] * len(params)
    if not wanted:
        return out
    rows = torch.tensor(wanted, device=logits.device)
    logp = logits[rows].log_softmax(dim=-1)
    chosen = logp.gather(1, torch.tensor([tokens[i] for i in wanted], device=logits.device).unsqueeze(1))
    max_k = max(params[i].logprobs or 0 for i in wanted)
    top_vals, top_ids = logp.topk(max_k, dim=-1) if max_k else (logp[:, :0], logp[:, :0].long())
    chosen_l, vals_l, ids_l = chosen.squeeze(1).tolist(), top_vals.tolist(), top_ids.tolist()
    for j, i in enumerate(wanted):
        k = params[i].logprobs or 0
        out[i] = {"token_id": tokens[i], "logprob": chosen_l[j],
                  "top_logprobs": [[ids_l[j][m], vals_l[j][m]] for m in range(k)]}
    return out
