"""Context-economy benchmark.

1. Assembly: a 100k-token conversation with 50 retrieved documents, fitted into gpt-4o's window (128k, a
   quarter reserved for output, so about a quarter of the history must go). The first call (nothing memoised:
   a fresh counter, every message tokenised) is the baseline; memoised calls are reported against it.
   Target: <= 5 ms memoised.
2. Engine (`--engine`): a 20-turn conversation through the gateway to the bundled engine (SmolLM2-135M,
   in-process), once with cache-friendly ordering and once without, on fresh gateways; prints the engine's
   prefix-cache hit rate and the mean TTFT of each run, the unordered run being the baseline.

    python bench/context.py [--repeat 50] [--engine] [--turns 20]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from gateway.context import compress  # noqa: E402
from gateway.context.budget import finish, plan, split_conversation  # noqa: E402
from gateway.context.compress import Document  # noqa: E402
from gateway.context.config import parse_context_config  # noqa: E402
from gateway.context.tokens import TiktokenCounter  # noqa: E402

SENTENCES = [
    "The gateway counts tokens exactly before it forwards a request.",
    "缓存命中时，网关会跳过后端调用并直接返回结果。",
    "def handler(request): return await pipeline.run(request)",
    "Latency matters: every millisecond of overhead is paid on every request 🚀.",
    "Budget assembly keeps the system prompt and the query whole.",
]


def conversation(target_tokens: int, counter: TiktokenCounter) -> list[dict]:
    messages = [{"role": "system", "content": "You are a precise assistant. You must cite the documents."}]
    total, i = 0, 0
    while total < target_tokens:
        body = " ".join(SENTENCES[(i + k) % len(SENTENCES)] for k in range(40))
        message = {"role": "user" if i % 2 == 0 else "assistant", "content": f"[{i}] {body}"}
        total += counter.count_message(message)
        messages.append(message)
        i += 1
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": "Given all that, what should we do next?"})
    return messages


def documents(n: int) -> list[Document]:
    """Distinct documents of about 300 tokens (random sentences over a 2,000-word vocabulary), 3 static."""
    rng = random.Random(1)
    vocabulary = [f"{rng.choice('bcdfghklmnprstvz')}{rng.choice('aeiou')}{rng.choice('lmnrst')}{k}" for k in range(2000)]
    docs = []
    for i in range(n):
        sentences = [" ".join(rng.choices(vocabulary, k=12)).capitalize() + "." for _ in range(20)]
        docs.append(Document(f"doc-{i}", " ".join(sentences), score=1 - i / n, static=i < 3))
    return docs


def assemble(counter: TiktokenCounter, messages: list[dict], docs: list[Document]):
    config = parse_context_config({"budget": {"strategy": "balanced"}}, "bench")
    assert config is not None
    window = 128_000
    reserved = int(window * config.budget.split.output)
    p = plan(counter, config, window, reserved, split_conversation(messages), docs, None, messages)
    return finish(p, None)


def bench_assembly(repeat: int) -> None:
    probe = TiktokenCounter("o200k_base")
    messages = conversation(100_000, probe)
    docs = documents(50)
    conversation_tokens = probe.count_messages(messages)

    first_times = []
    for _ in range(3):  # cold: a fresh counter (empty memo) and no cached document signatures
        counter = TiktokenCounter("o200k_base")
        compress._SIGNATURES.clear()
        t0 = time.perf_counter()
        result = assemble(counter, messages, docs)
        first_times.append(time.perf_counter() - t0)
    warm = []
    for _ in range(repeat):
        copy = [dict(m) for m in messages]  # a new request with the same content, as parsed from the wire
        t0 = time.perf_counter()
        result = assemble(counter, copy, docs)
        warm.append(time.perf_counter() - t0)
    first = statistics.median(first_times)
    memo = statistics.median(warm)
    r = result.report
    print(f"assembly: conversation {conversation_tokens} tokens in {len(messages)} messages, {len(docs)} documents")
    print(f"  result: {r.total} prompt tokens (window {r.window}, output {r.reserved_output}), "
          f"documents {r.documents} ({r.documents_kept} kept), history {r.history}, dropped {r.messages_dropped} "
          f"messages, saved {r.saved}")
    print(f"  first call (baseline)   : {first * 1000:8.2f} ms  (median of {len(first_times)})")
    print(f"  memoised                : {memo * 1000:8.2f} ms  (median of {repeat}; p95 "
          f"{sorted(warm)[int(0.95 * (len(warm) - 1))] * 1000:.2f} ms)")
    print(f"  memoised / first        : {memo / first:8.4f}  ({first / memo:.0f}x faster; target <= 5 ms: "
          f"{'met' if memo <= 0.005 else 'NOT met'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--engine", action="store_true", help="also run the ordering on/off engine workload")
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    bench_assembly(args.repeat)
    if args.engine:
        from bench.context_engine import bench_engine

        bench_engine(args.turns)


if __name__ == "__main__":
    main()
