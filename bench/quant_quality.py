"""Quality cost of `--quantization int8` against fp32 (same weights): greedy agreement and perplexity.

    python bench/quant_quality.py [--tokens 64] [--threads 2]

- greedy agreement: per prompt, the tokens int8 produces before its first difference from fp32 (greedy decoding
  turns one flip into a different continuation, so tokens after it are not comparable), summed over prompts;
- perplexity of both models on a fixed English text (FIXED_TEXT), from one prefill's logits.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import orjson  # noqa: E402
import torch  # noqa: E402

from bench.gpu_check import agreement, engine_prompt_logits  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.llm_engine import LLMEngine  # noqa: E402
from engine.sampling_params import SamplingParams  # noqa: E402

CHATS = [
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain how a paged KV cache works in an inference engine.",
    "List three fruits and their colours.",
    "Tell me a story about a robot who learns to paint.",
    "How do I reverse a list in Python?",
    "What causes the seasons on Earth?",
    "Give me three tips for a job interview.",
]
FIXED_TEXT = (
    "The water cycle describes how water moves between the oceans, the atmosphere and the land. Heat from the "
    "sun evaporates water from the surface of seas and lakes, and plants release water vapour through their "
    "leaves. As the warm, moist air rises it cools, and the vapour condenses into tiny droplets that form "
    "clouds. When the droplets grow heavy enough they fall as rain or snow. Some of this water soaks into the "
    "ground and feeds rivers and underground stores, while the rest runs off the surface back to the sea, "
    "where the cycle begins again. Over thousands of years this constant movement shapes valleys, carries "
    "nutrients to farmland and supports every living thing on the planet."
)


def perplexity(engine: LLMEngine, ids: list[int]) -> float:
    with torch.inference_mode():
        logits = engine_prompt_logits(engine, ids, all_positions=True)
    logp = logits[:-1].log_softmax(dim=-1).gather(1, torch.tensor(ids[1:]).unsqueeze(1))
    return math.exp(-float(logp.mean()))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    report: dict = {"tokens": args.tokens, "prompts": len(CHATS)}
    outs = {}
    for q in ("none", "int8"):
        engine = LLMEngine(EngineConfig(num_threads=args.threads, quantization=q, kv_cache_memory=64 * 2**20))
        prompts = [engine.tokenizer.apply_chat_template([{"role": "user", "content": c}]) for c in CHATS]
        params = SamplingParams(temperature=0.0, max_tokens=args.tokens, ignore_eos=True)
        outs[q] = [r.token_ids for r in engine.generate(prompts, params)]
        report[f"perplexity_{q}"] = round(perplexity(engine, engine.tokenizer.encode(FIXED_TEXT)), 3)
    first, frac = agreement(outs["int8"], outs["none"])
    report["first_token_agreement"] = first
    report["greedy_prefix_agreement"] = round(frac, 3)
    report["identical_prompts"] = sum(a == b for a, b in zip(outs["int8"], outs["none"], strict=True))
    print(orjson.dumps(report).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
