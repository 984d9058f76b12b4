"""One-command engine check for a GPU (or, with --quick, the CPU): prints one JSON line, exits 1 on a failure.

    python bench/gpu_check.py                      # CUDA when available, else CPU; about 3-8 minutes on one GPU
    python bench/gpu_check.py --device cpu --quick # a smaller run that fits a 2-core CPU in under 2 minutes

Checks, on SmolLM2-135M (the bundled GGUF), each a key of the JSON line:
- greedy_fp32: the engine's greedy output equals HF transformers' `generate` on the same GGUF, token for token
  (a batch of mixed lengths through the engine; HF one prompt at a time, unpadded);
- half precision (CUDA only): float16 and bfloat16 engines against the fp32 HF reference. Tolerance, stated:
  the first generated token equals fp32's for every prompt and, over all prompts, at least HALF_AGREEMENT of
  the tokens before the first divergence agree (greedy decoding amplifies one rounding flip into a different
  continuation, so later tokens are not comparable); the largest |logit| difference of the first step is reported;
- flash_attn (CUDA, when importable): block_size 256 selects the paged flash kernels (fp16 only: flash-attn has no
  fp32), compared with the torch path in fp16 by the same tolerance;
- cuda_graphs (CUDA): decode steps replayed from CUDA graphs give the same greedy tokens as --enforce-eager;
- speculative: n-gram speculation gives the HF tokens too, with its acceptance rate;
- prefix_hits: the same prompts again hit the prefix cache and still give the HF tokens;
- throughput: output tokens/s at batch 1 and batch 64 (random prompts, ignore_eos).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import orjson  # noqa: E402
import torch  # noqa: E402

from bench.engine import greedy, load_hf  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.layers.attention import flash_attn_available  # noqa: E402
from engine.llm_engine import LLMEngine  # noqa: E402

HALF_AGREEMENT = 0.5
CHATS = [
    "What is the capital of France?",
    "Write a short poem about the sea.",
    "Explain in detail how a paged KV cache works in an inference engine, step by step.",
    "Repeat this list exactly: apple, banana, cherry, apple, banana, cherry, apple, banana, cherry.",
]
TEXTS = ["def fibonacci(n):", "The history of the Roman Empire"]


def hf_reference(prompts: list[list[int]], new_tokens: int, device: torch.device) -> tuple[list[list[int]], Any]:
    """HF greedy continuations (fp32, one prompt at a time) and the model (for first-step logits)."""
    model = load_hf().to(device)
    outs = []
    with torch.inference_mode():
        for ids in prompts:
            x = torch.tensor([ids], device=device)
            y = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new_tokens,
                               min_new_tokens=new_tokens, do_sample=False, eos_token_id=None, pad_token_id=0)
            outs.append(y[0, len(ids):].tolist())
    return outs, model


def agreement(got: list[list[int]], want: list[list[int]]) -> tuple[bool, float]:
    """(every first token equal, fraction of tokens in the common greedy prefix)."""
    first = all(g[:1] == w[:1] for g, w in zip(got, want, strict=True))
    same = 0
    for g, w in zip(got, want, strict=True):
        for a, b in zip(g, w, strict=False):
            if a != b:
                break
            same += 1
    return first, same / max(1, sum(len(w) for w in want))


def run(engine: LLMEngine, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    return [r.token_ids for r in engine.generate(prompts, greedy(new_tokens))]


def first_step_logit_diff(engine: LLMEngine, hf_model: Any, prompt: list[int]) -> float:
    """max |engine logits - HF fp32 logits| at the prompt's last position (the engine's forward, no sampling)."""
    runner = engine.runner
    with torch.inference_mode():
        ref = hf_model(torch.tensor([prompt], device=runner.device)).logits[0, -1].float()
        got = engine_prompt_logits(engine, prompt)
    return float((got - ref).abs().max())


def engine_prompt_logits(engine: LLMEngine, prompt: list[int], all_positions: bool = False) -> torch.Tensor:
    """Last-position (or every position's) logits of `prompt` through the engine's own paged forward, written
    to a throwaway sequence's blocks: call it only on an idle engine that is about to be discarded."""
    from engine.layers.attention import PrefillChunk
    from engine.model_runner import ModelRunner

    runner: ModelRunner = engine.runner
    bs = runner.block_size
    blocks = list(range(-(-len(prompt) // bs)))  # the engine is idle here, so any blocks may be scribbled on
    slots = [blocks[p // bs] * bs + p % bs for p in range(len(prompt))]
    chunk = PrefillChunk(0, len(prompt), len(prompt), torch.tensor(blocks, device=runner.device))
    meta = runner._metadata(slots, [], [], [chunk])
    ids = torch.tensor(prompt, device=runner.device)
    pos = torch.arange(len(prompt), device=runner.device)
    hidden = runner.model(ids, pos, meta)
    return runner.model.compute_logits(hidden) if all_positions else runner.model.compute_logits(hidden[-1:])[0]


def throughput(engine: LLMEngine, batch: int, prompt_len: int, new_tokens: int, seed: int) -> float:
    rng = random.Random(seed)
    vocab = engine.tokenizer.vocab_size
    prompts = [[rng.randrange(100, vocab) for _ in range(prompt_len)] for _ in range(batch)]
    engine.generate([prompts[0][:8]], greedy(2))  # warm-up (allocations, CUDA lazy init)
    if engine.runner.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    results = engine.generate(prompts, greedy(new_tokens))
    if engine.runner.device.type == "cuda":
        torch.cuda.synchronize()
    return sum(len(r.token_ids) for r in results) / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="fewer prompts and tokens (CPU in under 2 minutes)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(orjson.dumps({"ok": False, "error": "CUDA is not available"}).decode())
        return 1
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    new_tokens = 16 if args.quick else 64
    started = time.perf_counter()
    report: dict[str, Any] = {"device": torch.cuda.get_device_name(0) if cuda else "cpu", "quick": args.quick,
                              "torch": torch.__version__, "threads": torch.get_num_threads(),
                              "new_tokens": new_tokens}
    failures: list[str] = []

    def base_config(**kw: Any) -> EngineConfig:
        kw.setdefault("kv_cache_memory", 64 * 2**20)
        kw.setdefault("gpu_memory_utilization", 0.1)  # several engines share the GPU in one run
        return EngineConfig(device=args.device, num_threads=args.threads, **kw)

    engine = LLMEngine(base_config())
    tok = engine.tokenizer
    chats = CHATS[:3] if args.quick else CHATS
    prompts = [tok.apply_chat_template([{"role": "user", "content": c}]) for c in chats]
    prompts += [tok.encode(t) for t in (TEXTS[:1] if args.quick else TEXTS)]
    reference, hf_model = hf_reference(prompts, new_tokens, device)

    got = run(engine, prompts, new_tokens)
    report["greedy_fp32"] = {"equal": got == reference, "prompts": len(prompts)}
    if got != reference:
        failures.append("greedy_fp32")

    hits_before = engine.stats().prefix_cache_hits
    again = run(engine, prompts, new_tokens)
    hit_tokens = engine.stats().prefix_cache_hits - hits_before
    report["prefix_hits"] = {"equal": again == reference, "hit_tokens": hit_tokens}
    if again != reference or hit_tokens == 0:
        failures.append("prefix_hits")

    speculative = LLMEngine(base_config(speculative="ngram", num_speculative_tokens=4))
    spec_out = run(speculative, prompts, new_tokens)
    stats = speculative.stats()
    report["speculative"] = {"equal": spec_out == reference, "draft_tokens": stats.spec_draft_tokens,
                             "acceptance_rate": round(stats.spec_acceptance_rate, 3)}
    if spec_out != reference or stats.spec_draft_tokens == 0:
        failures.append("speculative")
    del speculative

    if cuda:
        for dtype in ("float16", "bfloat16"):
            half = LLMEngine(base_config(dtype=dtype))
            first_ok, frac = agreement(run(half, prompts, new_tokens), reference)
            diff = first_step_logit_diff(half, hf_model, prompts[0])
            report[dtype] = {"first_token_equal": first_ok, "prefix_agreement": round(frac, 3),
                             "max_first_logit_diff": round(diff, 4), "tolerance": HALF_AGREEMENT}
            if not first_ok or frac < HALF_AGREEMENT:
                failures.append(dtype)
            del half
            torch.cuda.empty_cache()
        eager = LLMEngine(base_config(enforce_eager=True))
        graphs_ok = run(eager, prompts, new_tokens) == got and engine.runner.graphs is not None
        report["cuda_graphs"] = {"equal_to_eager": graphs_ok, "captured": engine.runner.graphs is not None}
        if not graphs_ok:
            failures.append("cuda_graphs")
        del eager
    else:
        report["float16"] = report["bfloat16"] = report["cuda_graphs"] = "skipped: CPU"

    if cuda and flash_attn_available():
        # block_size 256 on CUDA with flash-attn importable selects its paged kernels; fp16, as flash-attn has no fp32
        flash = LLMEngine(base_config(dtype="float16", block_size=256))
        flash_out = run(flash, prompts, new_tokens)
        torch16 = LLMEngine(base_config(dtype="float16"))
        first_ok, frac = agreement(flash_out, reference)
        report["flash_attn"] = {"backend": flash.runner.attention_backend, "first_token_equal": first_ok,
                                "prefix_agreement": round(frac, 3),
                                "prefix_agreement_with_torch_fp16": round(agreement(flash_out, run(
                                    torch16, prompts, new_tokens))[1], 3)}
        if flash.runner.attention_backend != "flash_attn" or not first_ok or frac < HALF_AGREEMENT:
            failures.append("flash_attn")
        del flash, torch16
        torch.cuda.empty_cache()
    else:
        report["flash_attn"] = "skipped: " + ("flash_attn not importable" if cuda else "CPU")

    del hf_model
    batch = 64
    report["throughput_tok_s"] = {
        "batch_1": round(throughput(engine, 1, 64, 32 if args.quick else 128, seed=1), 1),
        f"batch_{batch}": round(throughput(engine, batch, 32 if args.quick else 128, 8 if args.quick else 128,
                                           seed=2), 1),
    }
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["failures"] = failures
    report["ok"] = not failures
    print(orjson.dumps(report).decode(), flush=True)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
