"""Ordering on vs off on the bundled engine: prefix-cache hit rate and TTFT over a multi-turn conversation.

Each run gets a fresh gateway with an in-process engine (SmolLM2-135M, CPU, 2 threads), so both start with an
empty prefix cache. Every turn sends the system prompt, a static handbook document, three documents retrieved
for that turn and the growing history; the engine's own counters (engine_prefix_cache_queries_total /
engine_prefix_cache_hits_total on the gateway's /metrics) give the hit rate; TTFT is measured by the client.
Called from bench/context.py --engine.
"""

from __future__ import annotations

import random
import re
import statistics
import tempfile
import time

import httpx
from openai import OpenAI

from gateway.app import create_app
from gateway.config.loader import parse_policy
from tests.helpers import RedisServer, ServerThread

SYSTEM = (
    "You are the support assistant of a bicycle shop. You must answer from the documents. Never invent prices. "
    "Keep answers short and friendly."
)
HANDBOOK = " ".join(
    f"Handbook rule {i}: staff greet every customer, check the frame size, and log the repair ticket." for i in range(20)
)


def policy(redis_url: str, data_dir: str, ordering: bool) -> str:
    return f"""
redis: {{url: "{redis_url}"}}
server: {{data_dir: "{data_dir}"}}
backends:
  local: {{type: engine, model: smollm2-135m, options: {{device: cpu, num_threads: 2, max_model_len: 8192}}}}
routes:
  - match: {{model: smollm2-135m}}
    backends: [local]
    budget: {{context_window: 8192, max_output_tokens: 16}}
    ordering: {{enabled: {str(ordering).lower()}}}
"""


def metric(url: str, name: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def run(turns: int, ordering: bool, redis_url: str) -> tuple[float, list[float]]:
    data_dir = tempfile.mkdtemp(prefix="bench-context-")
    text = policy(redis_url, data_dir, ordering)
    with ServerThread(lambda: create_app(parse_policy(text, "bench-context.yaml"))) as srv:
        api = OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=300)
        rng = random.Random(3)
        messages: list[dict] = [{"role": "system", "content": SYSTEM}]
        ttfts: list[float] = []
        q0, h0 = metric(srv.url, "engine_prefix_cache_queries_total"), metric(srv.url, "engine_prefix_cache_hits_total")
        for turn in range(turns):
            messages.append({"role": "user", "content": f"Question {turn}: can you check order {rng.randint(1000, 9999)}?"})
            docs = [{"id": "handbook", "content": HANDBOOK, "score": 0.5, "static": True}]
            docs += [{"id": f"t{turn}-{k}", "score": rng.random(),
                      "content": f"Order note {turn}.{k}: the customer asked about part {rng.randint(1, 500)}."}
                     for k in range(3)]
            started = time.perf_counter()
            first = None
            reply = []
            stream = api.chat.completions.create(model="smollm2-135m", messages=messages, stream=True,
                                                 temperature=0, extra_body={"documents": docs})
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    first = first or time.perf_counter()
                    reply.append(chunk.choices[0].delta.content)
            ttfts.append((first or time.perf_counter()) - started)
            messages.append({"role": "assistant", "content": "".join(reply) or "ok"})
        queries = metric(srv.url, "engine_prefix_cache_queries_total") - q0
        hits = metric(srv.url, "engine_prefix_cache_hits_total") - h0
    return (hits / queries if queries else 0.0), ttfts


def bench_engine(turns: int) -> None:
    redis = RedisServer().start()
    try:
        off_rate, off_ttft = run(turns, False, redis.url)
        on_rate, on_ttft = run(turns, True, redis.url)
    finally:
        redis.stop()
    print(f"engine: {turns}-turn conversation, SmolLM2-135M on CPU, fresh engine per run")
    for label, rate, ttft in (("ordering off (baseline)", off_rate, off_ttft), ("ordering on", on_rate, on_ttft)):
        print(f"  {label:24}: prefix-cache hit rate {rate:6.1%}, TTFT mean {statistics.mean(ttft) * 1000:7.1f} ms, "
              f"median {statistics.median(ttft) * 1000:7.1f} ms")
    print(f"  on / off                : hit rate {on_rate / off_rate if off_rate else float('inf'):.2f}x, "
          f"TTFT mean {statistics.mean(on_ttft) / statistics.mean(off_ttft):.2f}x")
