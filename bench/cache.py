"""Cache benchmark: what a hit costs, end to end, against a miss measured in the same run.

A fake OpenAI upstream that takes 50 ms (own process, core 0) sits behind the gateway (own process, core 1),
on a private real Redis. The raw keep-alive load generator (bench/loadgen.py) drives it.

1. Baseline: misses through the gateway on an uncached route (the upstream's 50 ms plus the gateway), C=8.
2. Exact hits, C=8: P50 / P99 (target P50 <= 1 ms, P99 <= 3 ms).
3. Semantic hits, C=1, with `--entries` (default 100k) entries in the scope of the query: the index is filled
   directly in the gateway process (real embeddings of a few questions stored through the cache, plus
   synthetic neighbours of real sentence embeddings), not through HTTP. Target P50 <= 10 ms.
4. Semantic-hit throughput at C=64 with micro-batching on, then off (a fresh gateway). The route's lookup
   deadline is raised to 10 s: without batching, 64 queued lookups wait longer than the default 500 ms, and
   the phase would time misses instead of hits.
5. Embed only, on the gateway's core with nothing else running: ms per encode call at batch 1 and 32, the torch
   runner (the reference), the plain ONNX export (before the transformer fusions and huge pages), the fused
   fp32 graph (LLM_GATEWAY_EMBED_PRECISION=fp32, the default before int8) and the int8 graph the gateway runs now.
Each semantic phase reports where the time went (embedding per batch, FAISS search, verifier, Redis fetch),
from the gateway's own counters; replay (completion -> JSON body / SSE chunks) is timed in this process.

    python bench/cache.py [--entries 100000] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LLM_GATEWAY_EMBED_THREADS", "1")

import httpx  # noqa: E402
import orjson  # noqa: E402

from bench.loadgen import Result, closed_loop, install_uvloop, percentile  # noqa: E402

ADMIN = "bench-admin"
STORED = "How do I reset my password?"
QUERY = "how do i reset my password"  # a near repeat: same meaning, different string (exact layer is off)
CHAT = "/v1/chat/completions"


def body(model: str, text: str) -> dict:
    return {"model": model, "messages": [{"role": "user", "content": text}], "temperature": 0}


def policy(upstream_port: int, data_dir: str, redis_url: str) -> str:
    return f"""
redis: {{url: "{redis_url}", timeout_ms: 50}}
server: {{data_dir: "{data_dir}", admin_keys: [{ADMIN}]}}
backends:
  up: {{type: openai, base_url: "http://127.0.0.1:{upstream_port}/v1"}}
routes:
  - match: {{model: fake-model}}
    backends: [up]
    cache: {{exact: {{ttl: 3600, store: always}}}}
  - match: {{model: fake-model-2}}
    backends: [up]
  - match: {{model: sem-model}}
    backends: [up]
    cache: {{exact: false, semantic: {{threshold: 0.9, ttl: 3600, max_entries: 1000000, lookup_timeout_ms: 10000}}}}
"""


# ---- the gateway process --------------------------------------------------------------------------------------


def serve(args: argparse.Namespace) -> None:
    """Run the gateway, fill the semantic scope of QUERY, print READY, serve until killed."""
    install_uvloop()
    asyncio.run(_serve(args, Path(args.policy).read_text()))


async def _serve(args: argparse.Namespace, policy_text: str) -> None:
    from aiohttp import web

    from gateway.app import create_app
    from gateway.appkeys import GATEWAY
    from gateway.config.loader import parse_policy

    pol = parse_policy(policy_text, args.policy)
    app = create_app(pol)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.port).start()
    stage = app[GATEWAY].cache
    stage.worker.batching = not args.no_batching
    await stage.semantic.synced.wait()
    await fill(stage, pol, args.entries)
    print("READY", flush=True)
    await asyncio.Event().wait()


async def fill(stage, pol, entries: int) -> None:
    import numpy as np

    from gateway.cache.index import EntryMeta
    from gateway.cache.keys import namespace_id, semantic_query
    from tests.cache.labelled import IN_SAMPLE, load_pairs

    route = pol.route_for("sem-model")
    ns = namespace_id("default", "sem-model")
    template = body("sem-model", STORED)
    scope = semantic_query("default", route.index, route.model, route.cache.version, template).scope
    # Real entries, stored the way a miss stores them (embedding, Redis, events stream, local index).
    sentences = sorted({t for p in load_pairs(IN_SAMPLE) for t in (p.a, p.b)} - {QUERY})
    completion = {"id": "x", "object": "chat.completion", "created": 0, "model": "sem-model",
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "Use the reset link."},
                               "finish_reason": "stop"}],
                  "usage": {"prompt_tokens": 8, "completion_tokens": 5, "total_tokens": 13}}
    for text in [STORED, *sentences[:20]]:
        q = semantic_query("default", route.index, route.model, route.cache.version, body("sem-model", text))
        await stage.semantic.store("default", "sem-model", ns, q, completion, route.cache.semantic, None)
    # Synthetic neighbours of real sentence embeddings (cosine ~0.8 to their base): clustered like real traffic.
    bases = np.concatenate([await stage.worker.run(stage.worker.encode, sentences[i:i + 64])
                            for i in range(0, len(sentences), 64)])
    rng = np.random.default_rng(0)
    vectors = bases[rng.integers(0, len(bases), entries)] + rng.normal(0, 0.04, (entries, bases.shape[1]))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    metas = [EntryMeta(f"synthetic-{i}", ns, scope, f"synthetic question {i}", time.time(), time.time() + 3600)
             for i in range(entries)]
    t0 = time.perf_counter()
    await stage.worker.run(stage.worker.indexes.add_many, metas, vectors)
    index = stage.worker.indexes.scopes[scope]
    print(f"filled scope with {len(index)} entries ({index.kind}) in {time.perf_counter() - t0:.1f}s",
          file=sys.stderr, flush=True)


def embed_only(rounds: int) -> None:
    """Print {runner: {batch: ms per encode call}} as JSON: rounds interleave the runners (so drift from other
    load hits both alike) and the median round counts."""
    from statistics import median

    from gateway.cache import embedder as em
    from tests.cache.labelled import IN_SAMPLE, load_pairs

    texts = sorted({t for p in load_pairs(IN_SAMPLE) for t in (p.a, p.b)})
    batches = {1: [QUERY], 32: texts[:32]}
    plain = em.MiniLMEmbedder(backend="torch")  # its tokenizer, with the plain export's session as the runner
    plain._forward = em._run_session(em._session(em.export_onnx(em.model_dir(), plain._tokens, fuse=False)))
    runners = {"torch": em.MiniLMEmbedder(backend="torch"), "onnx plain": plain,
               "onnx fp32": em.MiniLMEmbedder(precision="fp32"), "onnx int8": em.MiniLMEmbedder(precision="int8")}
    samples: dict[str, dict[int, list[float]]] = {name: {n: [] for n in batches} for name in runners}
    for embedder in runners.values():
        for batch in batches.values():
            embedder.encode(batch)  # the first pass allocates
    for _ in range(rounds):
        for name, embedder in runners.items():
            for n, batch in batches.items():
                calls = 40 if n == 1 else 4
                t0 = time.perf_counter()
                for _ in range(calls):
                    embedder.encode(batch)
                samples[name][n].append((time.perf_counter() - t0) / calls * 1000)
    print(orjson.dumps({name: {str(n): median(v) for n, v in per.items()} for name, per in samples.items()}).decode())


# ---- the driver -------------------------------------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(cmd: list[str], core: int, **kw) -> subprocess.Popen:
    return subprocess.Popen(["taskset", "-c", str(core), *cmd], cwd=ROOT, **kw)


def start_gateway(policy_path: Path, port: int, entries: int, batching: bool) -> subprocess.Popen:
    cmd = [sys.executable, "bench/cache.py", "serve", "--policy", str(policy_path), "--port", str(port),
           "--entries", str(entries)]
    if not batching:
        cmd.append("--no-batching")
    proc = spawn(cmd, 1, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "READY" not in line:
        proc.kill()
        raise RuntimeError(f"gateway did not start: {line!r}")
    return proc


def timings(url: str) -> dict:
    """The gateway's cumulative semantic timings, with its semantic lookup results folded in."""
    stats = httpx.get(url + "/admin/cache/stats", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
    process = stats.json()["process"]
    semantic = process["lookups"].get("semantic", {})
    return {**process["timings"], "hits": semantic.get("hit", 0), "lookups": sum(semantic.values())}


def exact_lookup_ms(url: str) -> float:
    """Mean exact-layer lookup time (the Redis GET through the guard) from the gateway's /metrics."""
    total = count = 0.0
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith('gateway_cache_lookup_seconds_sum{layer="exact"}'):
            total = float(line.split()[-1])
        elif line.startswith('gateway_cache_lookup_seconds_count{layer="exact"}'):
            count = float(line.split()[-1])
    return total / count * 1000 if count else float("nan")


def parts(before: dict, after: dict) -> str:
    d = {k: after[k] - before[k] for k in ("batches", "texts", "verified", "fetched", "embed_s", "search_s",
                                          "verify_s", "fetch_s", "hits", "lookups")}
    per = lambda s, n: s / n * 1000 if n else float("nan")  # noqa: E731
    return (f"embed {per(d['embed_s'], d['batches']):.2f} ms/batch (mean batch {d['texts'] / max(d['batches'], 1):.1f}), "
            f"search {per(d['search_s'], d['texts']):.3f} ms, verify {per(d['verify_s'], d['verified']):.3f} ms, "
            f"fetch {per(d['fetch_s'], d['fetched']):.3f} ms per lookup; hits {d['hits']}/{d['lookups']}")


def ms(r: Result, q: float) -> float:
    return percentile(r.latencies, q) * 1000


def replay_cost(n: int) -> tuple[float, float]:
    """Microseconds to turn a stored completion into a JSON body, and into SSE chunks."""
    from gateway.streaming import completion_to_chunks, sse_event

    completion = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "word " * 200},
                               "finish_reason": "stop", "logprobs": None}],
                  "usage": {"prompt_tokens": 20, "completion_tokens": 200, "total_tokens": 220}}
    t0 = time.perf_counter()
    for _ in range(n):
        orjson.dumps({**completion, "id": "chatcmpl-2", "created": 2})
    t1 = time.perf_counter()
    for _ in range(n):
        b"".join(sse_event(c) for c in completion_to_chunks(completion, True))
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd")
    s = sub.add_parser("serve")
    s.add_argument("--policy", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--entries", type=int, default=100_000)
    s.add_argument("--no-batching", action="store_true")
    e = sub.add_parser("embed")
    e.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.cmd == "serve":
        serve(args)
        return
    if args.cmd == "embed":
        embed_only(args.rounds)
        return
    run(args)


def run(args: argparse.Namespace) -> None:
    from tests.helpers import RedisServer

    os.sched_setaffinity(0, {0})
    scale = 4 if args.quick else 1
    redis = RedisServer().start()
    up_port, gw_port = free_port(), free_port()
    procs = [spawn([sys.executable, "bench/serve_fake.py", str(up_port), "0.05"], 0)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            policy_path = Path(tmp) / "policy.yaml"
            policy_path.write_text(policy(up_port, tmp, redis.url))
            gw = start_gateway(policy_path, gw_port, args.entries, batching=True)
            procs.append(gw)
            url = f"http://127.0.0.1:{gw_port}"
            miss_body = orjson.dumps(body("fake-model-2", "hello there"))
            exact_body = orjson.dumps(body("fake-model", "hello there"))
            sem_body = orjson.dumps(body("sem-model", QUERY))

            asyncio.run(closed_loop(url, CHAT, exact_body, 8, 200))  # warm-up; the first one stores
            miss = asyncio.run(closed_loop(url, CHAT, miss_body, 8, 400 // scale))
            exact = asyncio.run(closed_loop(url, CHAT, exact_body, 8, 4000 // scale))
            exact1 = asyncio.run(closed_loop(url, CHAT, exact_body, 1, 2000 // scale))
            exact_ms = exact_lookup_ms(url)
            asyncio.run(closed_loop(url, CHAT, sem_body, 1, 20))  # warm-up
            t_before = timings(url)
            sem1 = asyncio.run(closed_loop(url, CHAT, sem_body, 1, 300 // scale))
            t_c1 = timings(url)
            sem64 = asyncio.run(closed_loop(url, CHAT, sem_body, 64, 1280 // scale))
            t_c64 = timings(url)
            gw.kill()
            gw.wait()
            redis.flushall()
            gw = start_gateway(policy_path, gw_port, args.entries, batching=False)
            procs.append(gw)
            asyncio.run(closed_loop(url, CHAT, sem_body, 8, 20))
            t_off = timings(url)
            sem64_off = asyncio.run(closed_loop(url, CHAT, sem_body, 64, 1280 // scale))
            t_off_after = timings(url)
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
        redis.stop()

    embed = subprocess.run(["taskset", "-c", "1", sys.executable, "bench/cache.py", "embed",
                            "--rounds", str(9 // scale)], cwd=ROOT, capture_output=True, text=True, check=True)
    embed_ms = orjson.loads(embed.stdout.strip().splitlines()[-1])
    json_us, sse_us = replay_cost(2000)
    errors = miss.errors + exact.errors + exact1.errors + sem1.errors + sem64.errors + sem64_off.errors
    print(f"\nentries in the semantic scope: {args.entries:,}; errors: {errors}")
    print(f"{'':44} {'P50 ms':>8} {'P99 ms':>8} {'RPS':>9} {'P50 vs miss':>12}")
    base = ms(miss, 50)
    for name, r in (("miss via gateway (baseline, 50 ms upstream) C=8", miss), ("exact hit C=8", exact), ("exact hit C=1", exact1),
                    ("semantic hit C=1", sem1), ("semantic hit C=64, batching on", sem64),
                    ("semantic hit C=64, batching off", sem64_off)):
        print(f"{name:44} {ms(r, 50):8.2f} {ms(r, 99):8.2f} {r.rps:9.1f} {base / ms(r, 50):11.1f}x")
    print(f"\nexact layer lookup (key + Redis GET via the guard): {exact_ms:.3f} ms mean")
    print(f"micro-batching at C=64: {sem64.rps / sem64_off.rps:.2f}x the hit throughput of one encode per lookup")
    print(f"semantic C=1 parts:           {parts(t_before, t_c1)}")
    print(f"semantic C=64 batching on:    {parts(t_c1, t_c64)}")
    print(f"semantic C=64 batching off:   {parts(t_off, t_off_after)}")
    print(f"replay: JSON body {json_us:.1f} us, SSE chunks (200-word answer) {sse_us:.1f} us")
    print("embed only, ms per encode call (gateway's core, nothing else running; median of interleaved rounds):")
    for n in ("1", "32"):
        torch_ms, plain_ms = embed_ms["torch"][n], embed_ms["onnx plain"][n]
        fp32_ms, int8_ms = embed_ms["onnx fp32"][n], embed_ms["onnx int8"][n]
        print(f"  batch {n:>2}: torch {torch_ms:7.2f}  onnx plain export {plain_ms:7.2f}  "
              f"onnx fused fp32 + huge pages {fp32_ms:7.2f}  onnx int8 (now) {int8_ms:7.2f}  "
              f"({fp32_ms / int8_ms:.2f}x fp32)")
    print("targets: exact P50 <= 1 ms, P99 <= 3 ms (C=8); semantic P50 <= 10 ms (C=1, 100k in scope)")


if __name__ == "__main__":
    main()
