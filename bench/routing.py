"""Prefix-aware routing benchmark: the same multi-turn workload through the gateway with
`weighted`, `least_loaded` and `prefix_aware` routing, in one run; per strategy the share of prompt tokens
the fleet had to prefill (from the answers' `usage.prompt_tokens_details.cached_tokens`) and the requests
per replica.

    python bench/routing.py --fleet fakes     # 4 fake vLLM-like replicas with LRU prefix caches (seconds)
    python bench/routing.py --fleet engine    # 3 bundled-engine replicas (urls:, KV cache 96 MiB each) on CPU

fakes: two dozen users over three shared system prompts, six turns each, eight turns in flight; each fake
keeps --capacity (200) blocks of 16 tokens (tests/fakes/prefix_cache_server.py) and prefills one request at a time.
engine: 12 users over 4 shared system prompts, 4 turns each, at concurrency 1 and 4 (--concurrency), SmolLM2-135M
replicas spawned by this script (`llm-gateway engine`, one torch thread each), the gateway in this process. On
2 cores a strategy takes about a minute at C=4 and two at C=1: under the shared lock, run one concurrency at a
time (and at C=1 prefix_aware on its own, `--strategies prefix_aware`) to stay under five minutes a run.
The route's strategy picks the engine pool's replica (weighted: uniformly at random). --choice-log FILE writes
why each prefix-aware request went where (gateway.routing.prefix at DEBUG).
Replicas start afresh for every strategy, so no strategy inherits another's caches.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import aiohttp  # noqa: E402
import openai  # noqa: E402

from gateway.embedded_redis import EmbeddedRedis  # noqa: E402
from tests.fakes.prefix_cache_server import PrefixCacheServer, run_conversations  # noqa: E402
from tests.helpers import ServerThread, free_port  # noqa: E402

STRATEGIES = ("weighted", "least_loaded", "prefix_aware")
ENGINE_MODEL = "smollm2-135m"


def gateway_policy(urls: list[str], strategy: str, kind: str, model: str, extra: str, capacity_tokens: int = 0) -> str:
    if kind == "engine":
        urls_yaml = ", ".join(f"'{u}'" for u in urls)
        backends = f"  pool: {{type: engine, model: {ENGINE_MODEL}, urls: [{urls_yaml}]{extra}}}\n"
        names = "pool"
    else:
        backends = "".join(f"  r{i}: {{type: openai, base_url: '{u}/v1', api_key: k, "
                           f"options: {{prefix_cache_tokens: {capacity_tokens}}}}}\n" for i, u in enumerate(urls))
        names = ", ".join(f"r{i}" for i in range(len(urls)))
    return (f"backends:\n{backends}routes:\n  - match: {{model: {model}}}\n    backends: [{names}]\n"
            f"    routing: {{strategy: {strategy}}}\n    timeout_s: 600\n")


def start_gateway(policy_text: str, data_dir: str) -> tuple[ServerThread, EmbeddedRedis]:
    """The gateway in this process, on a private redis-server under `data_dir` (started here, as
    `llm-gateway serve` would: a Gateway only connects to a URL)."""
    from gateway.app import create_app
    from gateway.config.loader import parse_policy

    text = policy_text + f"redis: {{url: embedded}}\nserver: {{data_dir: '{data_dir}'}}\n"
    policy = parse_policy(text, "bench-routing.yaml")
    redis = EmbeddedRedis(Path(data_dir)).start()
    try:
        return ServerThread(lambda: create_app(policy, redis_url=redis.url)).start(), redis
    except BaseException:
        redis.stop()  # its own session: it would outlive the bench
        raise


async def drive(url: str, model: str, workload: dict, max_tokens: int) -> list[dict]:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="bench", max_retries=0, timeout=900)

    async def chat(messages: list[dict]) -> tuple[str, dict, str]:
        extra = {"temperature": 0, "ignore_eos": True} if model == ENGINE_MODEL else {}
        raw = await client.chat.completions.with_raw_response.create(
            model=model, messages=messages, max_tokens=max_tokens, extra_body=extra or None)
        completion = raw.parse()
        return completion.choices[0].message.content or "", completion.usage.model_dump(), raw.headers["x-backend"]

    try:
        return await run_conversations(chat, **workload)
    finally:
        await client.close()


# ---- engine replicas ----------------------------------------------------------------------------------------

def spawn_engines(n: int, kv: str, threads: int) -> tuple[list[subprocess.Popen], list[str]]:
    procs, urls = [], []
    for i in range(n):
        port = free_port()
        cmd = [sys.executable, "-m", "engine", "--model", ENGINE_MODEL, "--port", str(port),
               "--kv-cache-memory", kv, "--num-threads", str(threads), "--log-level", "warning"]
        core = str(i % max(os.cpu_count() or 1, 1))
        procs.append(subprocess.Popen(["taskset", "-c", core, *cmd], cwd=ROOT, stdout=subprocess.DEVNULL))
        urls.append(f"http://127.0.0.1:{port}")
    return procs, urls


async def wait_healthy(urls: list[str], limit_s: float = 300) -> None:
    deadline = time.monotonic() + limit_s
    async with aiohttp.ClientSession() as s:
        for u in urls:
            while True:
                try:
                    async with s.get(u + "/health") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"engine replica {u} did not start")
                await asyncio.sleep(0.5)


async def engine_stats(urls: list[str]) -> list[dict[str, float]]:
    """Per replica, from its own /metrics: requests, prompt tokens, prefix-cache hits, preemptions, KV blocks."""
    wanted = {"engine_ttft_seconds_count": "requests", "engine_prompt_tokens_total": "prompt",
              "engine_prefix_cache_hits_total": "hits", "engine_preemptions_total": "preemptions",
              "engine_kv_cache_total_blocks": "blocks"}
    out = []
    async with aiohttp.ClientSession() as s:
        for u in urls:
            async with s.get(u + "/metrics") as r:
                text = await r.text()
            values: dict[str, float] = dict.fromkeys(wanted.values(), 0.0)
            for line in text.splitlines():
                if line.startswith("#") or " " not in line:
                    continue
                name, value = line.rsplit(" ", 1)
                key = wanted.get(name.split("{")[0])
                if key:
                    values[key] += float(value)
            out.append(values)
    return out


# ---- one strategy -------------------------------------------------------------------------------------------

def summarise(strategy: str, records: list[dict], seconds: float) -> dict:
    prompt = sum(r["usage"]["prompt_tokens"] for r in records)
    cached = sum((r["usage"].get("prompt_tokens_details") or {}).get("cached_tokens") or 0 for r in records)
    per_backend: dict[str, int] = {}
    for r in records:
        per_backend[r["backend"]] = per_backend.get(r["backend"], 0) + 1
    return {"strategy": strategy, "requests": len(records), "prompt": prompt, "prefilled": prompt - cached,
            "share": (prompt - cached) / max(prompt, 1), "seconds": seconds, "per_backend": per_backend}


async def run_strategy(args: argparse.Namespace, strategy: str, concurrency: int, tmp: str) -> dict:
    procs: list[subprocess.Popen] = []
    servers: list[ServerThread] = []
    try:
        if args.fleet == "engine":
            procs, urls = spawn_engines(3, args.kv_cache, args.engine_threads)
            await wait_healthy(urls)
            model, workload, max_tokens = ENGINE_MODEL, {"users": 12, "prompts": 4, "turns": 4, "concurrency": concurrency,
                                                         "system_words": args.system_words, "user_words": 20}, 16
            extra = f", options: {{load_weight: {args.load_weight}}}" if args.load_weight is not None else ""
        else:
            fakes = [PrefixCacheServer(args.capacity, prefill_s_per_token=0.00005) for _ in range(4)]
            servers = [ServerThread(lambda f=f: f.app).start() for f in fakes]
            urls = [s.url for s in servers]
            model, workload, max_tokens = "fleet-model", {"users": 24, "prompts": 3, "turns": 6, "concurrency": concurrency,
                                                         "system_words": 150, "user_words": 25}, 16
            extra = ""
        text = gateway_policy(urls, strategy, args.fleet, model, extra, args.capacity * 16)
        if args.fleet != "engine" and args.load_weight is not None and strategy == "prefix_aware":
            text = text.replace("strategy: prefix_aware", f"strategy: prefix_aware, load_weight: {args.load_weight}")
        gw, redis = await asyncio.to_thread(start_gateway, text, tmp)
        try:
            started = time.perf_counter()
            records = await drive(gw.url, model, workload, max_tokens)
            out = summarise(strategy, records, time.perf_counter() - started)
            out["concurrency"] = concurrency
            if args.fleet == "engine":
                stats = await engine_stats(urls)
                out["per_backend"] = {f"e{i}": int(st["requests"]) for i, st in enumerate(stats)}  # requests each
                out["engine"] = stats
        finally:
            try:
                await asyncio.to_thread(gw.stop)
            finally:
                await asyncio.to_thread(redis.stop)
        return out
    finally:
        for s in servers:
            s.stop()
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fleet", choices=("fakes", "engine"), default="fakes")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--concurrency", default=None,
                    help="comma-separated concurrencies, each run with every strategy (default: engine 1,4; fakes 8)")
    ap.add_argument("--kv-cache", default="96MiB")
    ap.add_argument("--capacity", type=int, default=200, help="fakes: blocks of 16 tokens each caches")
    ap.add_argument("--engine-threads", type=int, default=1)
    ap.add_argument("--system-words", type=int, default=200)
    ap.add_argument("--load-weight", type=float, default=None, help="override the routing default")
    ap.add_argument("--choice-log", default=None,
                    help="write the prefix routers' choice log (why each request went where) to this file")
    args = ap.parse_args()
    import logging
    import tempfile

    if args.choice_log:
        handler = logging.FileHandler(args.choice_log, mode="w")
        handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
        for name in ("gateway.routing.prefix", "gateway.routing.approx"):
            logging.getLogger(name).addHandler(handler)
            logging.getLogger(name).setLevel(logging.DEBUG)
    concurrencies = [int(c) for c in (args.concurrency or ("1,4" if args.fleet == "engine" else "8")).split(",")]
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for concurrency in concurrencies:
            for strategy in args.strategies.split(","):
                if args.choice_log:
                    logging.getLogger("gateway.routing").debug("=== %s concurrency %d", strategy, concurrency)
                results.append(await run_strategy(args, strategy, concurrency, tmp))
                r = results[-1]
                detail = ""
                if "engine" in r:
                    detail = "  hits/preemptions/blocks: " + ", ".join(
                        f"{int(st['hits'])}/{int(st['preemptions'])}/{int(st['blocks'])}" for st in r["engine"])
                print(f"C={concurrency} {strategy:13s} prefilled {r['prefilled']:7d} of {r['prompt']:7d} prompt tokens "
                      f"(share {r['share']:.3f})  {r['seconds']:6.1f}s  per replica: {r['per_backend']}{detail}",
                      flush=True)
    for concurrency in concurrencies:
        runs = [r for r in results if r["concurrency"] == concurrency]
        base = next((r for r in runs if r["strategy"] == "weighted"), None)
        for r in runs:
            loads = list(r["per_backend"].values())
            spread = max(loads) / max(min(loads), 1) if loads else 0
            versus = f"prefills {r['prefilled'] / max(base['prefilled'], 1):.2f}x of weighted; " if base else ""
            print(f"C={concurrency} {r['strategy']:13s} {versus}busiest/idlest replica {spread:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
