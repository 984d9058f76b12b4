"""Speculative decoding with n-gram prompt lookup (vLLM's `ngram` method).

Proposals: the last n tokens of a sequence (prompt + output, n from prompt_lookup_max down to prompt_lookup_min)
are looked up earlier in the same sequence; the tokens that followed their latest earlier occurrence become up to
K draft tokens. Copy-heavy outputs (quoting, code edits, lists) then verify several tokens per forward pass.

Verification: the draft rides in the sequence's step as extra query positions (one forward over K+1 positions, the
bottom-right causal mask the chunked-prefill path already uses), giving the target distribution after the last
real token and after each draft token. Greedy rows accept the longest draft prefix equal to the argmax and add
the argmax after it, so greedy output is the same as without speculation. Sampled rows use the rejection rule
with a point-mass draft q = 1{d}: draft token d_i is accepted with probability min(1, p_i(d_i) / q(d_i)) = p_i(d_i);
on the first rejection the replacement is drawn from norm(max(0, p_i - q)) = p_i without d_i, and when every draft
token is accepted one more token is drawn from p_K; each emitted token is then distributed as p (Leviathan et al.
2023, Chen et al. 2023).

KV of rejected positions was written into slots past the sequence's accepted length: those slots are rewritten
before they are read (the next step writes its tokens at the same positions), and a block only enters the prefix
cache once its accepted tokens fill it, so rejected KV never reaches a reader.
"""

from __future__ import annotations

import numpy as np
import torch

from engine.sampler import processed_probs
from engine.sampling_params import SamplingParams


def propose_ngram(token_ids: list[int] | np.ndarray, min_n: int, max_n: int, k: int) -> list[int]:
    """Up to k tokens that followed the latest earlier occurrence of the sequence's last n tokens (longest n
    first); [] when no suffix of length min_n..max_n occurs earlier."""
    tokens = np.asarray(token_ids, dtype=np.int64)
    length = len(tokens)
    if k < 1:
        return []
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        suffix = tokens[length - n:]
        # windows starting at 0 .. length-n-1: every earlier occurrence (the suffix itself excluded)
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:length - 1], n)
        hits = np.flatnonzero((windows == suffix).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return tokens[start:start + k].tolist()
    return []


def verify(logits: torch.Tensor, draft: list[int], params: SamplingParams,
           generator: torch.Generator | None) -> list[int]:
    """logits [len(draft) + 1, V] (row i: the target after draft[:i]) -> the tokens to emit: the accepted draft
    prefix and one token after it (a correction or the bonus), so between 1 and len(draft) + 1 tokens."""
    if params.temperature == 0.0:
        target = logits.argmax(dim=-1).tolist()
        accepted = 0
        while accepted < len(draft) and draft[accepted] == target[accepted]:
            accepted += 1
        return draft[:accepted] + [target[accepted]]
    probs = processed_probs(logits, [params] * logits.shape[0]).cpu()
    uniform = torch.rand(len(draft), generator=generator)
    out: list[int] = []
    for i, token in enumerate(draft):
        if uniform[i].item() < probs[i, token].item():
            out.append(token)
            continue
        residual = probs[i].clone()
        residual[token] = 0.0
        if residual.sum() <= 0:  # p_i was a point mass on the rejected token: impossible unless rounding
            residual = probs[i]
        out.append(int(torch.multinomial(residual, 1, generator=generator)))
        return out
    out.append(int(torch.multinomial(probs[len(draft)], 1, generator=generator)))
    return out
