"""What the gateway adds to a request, against a 30-line aiohttp pass-through measured in the same run.

    python bench/overhead.py [--quick]

The fake upstream and the load generator share core 0; the proxy under test (pass-through or gateway, one at
a time, caches off, one worker) runs alone on core 1. Prints added latency P50/P99 at C=1 (against direct
requests alternated with the proxy's own, so both see the same machine) and at a fixed offered rate (open loop), maximum RPS at C=64, streaming and not, and exact-cache hits at C=32 (a second route,
`fake-model-2`, with L1 on a private Redis that runs on core 0) against the pass-through's misses at C=32.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadgen import Result, closed_loop, install_uvloop, open_loop, percentile  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BODY = b'{"model":"fake-model","messages":[{"role":"user","content":"hello there, how are you?"}],"max_tokens":16}'
STREAM_BODY = BODY[:-1] + b',"stream":true}'
PATH = "/v1/chat/completions"
HIT_BODY = BODY.replace(b'"fake-model"', b'"fake-model-2"')[:-1] + b',"temperature":0}'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listening on {port}")


def spawn(cmd: list[str], core: int) -> subprocess.Popen:
    return subprocess.Popen(["taskset", "-c", str(core), *cmd], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def gateway_policy(upstream_port: int, data_dir: str, redis_url: str) -> str:
    return f"""
redis: {{url: "{redis_url}"}}
server: {{data_dir: "{data_dir}"}}
backends:
  up: {{type: openai, base_url: "http://127.0.0.1:{upstream_port}/v1"}}
routes:
  - match: {{model: fake-model}}
    backends: [up]
  - match: {{model: fake-model-2}}
    backends: [up]
    cache: {{exact: {{ttl: 3600}}}}
"""


C1_BLOCKS = 6


async def c1_beside_direct(url: str, direct: str, n: int) -> tuple[Result, Result]:
    """C=1 through the proxy and straight to the upstream, in alternating blocks of n / C1_BLOCKS requests:
    (proxy, direct). What the proxy adds is the difference of the two, so both are measured under the same
    conditions: this shared machine's speed drifts by more than the gateway's whole overhead within a run,
    and a baseline measured minutes earlier carries that drift into the figure."""
    proxy, upstream = Result(), Result()
    for _ in range(C1_BLOCKS):
        for target, into in ((direct, upstream), (url, proxy)):
            r = await closed_loop(target, PATH, BODY, 1, n // C1_BLOCKS)
            into.latencies += r.latencies
            into.errors += r.errors
            into.elapsed += r.elapsed
    return proxy, upstream


async def measure(url: str, quick: bool, hits: bool = False, direct: str | None = None) -> dict[str, Result]:
    """Every phase against `url`; with `direct` (the upstream's URL) C=1 alternates with it (`c1_direct`)."""
    n = 600 if quick else 3000
    await closed_loop(url, PATH, BODY, 8, n // 3)  # warm-up: connections, JIT-free but caches and pools
    if direct is None:
        c1 = {"c1": await closed_loop(url, PATH, BODY, 1, n)}
    else:
        proxy, upstream = await c1_beside_direct(url, direct, n)
        c1 = {"c1": proxy, "c1_direct": upstream}
    out = {
        **c1,
        "open": await open_loop(url, PATH, BODY, 1000, 2 if quick else 5),
        "max": await closed_loop(url, PATH, BODY, 64, 3 * n),
        "max_stream": await closed_loop(url, PATH, STREAM_BODY, 64, 3 * n),
        "c32": await closed_loop(url, PATH, BODY, 32, 3 * n),  # misses: the baseline for exact hits
    }
    if hits:
        await closed_loop(url, PATH, HIT_BODY, 1, 1)  # the miss that stores the entry
        out["c32_hit"] = await closed_loop(url, PATH, HIT_BODY, 32, 3 * n)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    os.sched_setaffinity(0, {0})
    install_uvloop()
    up_port, pt_port, gw_port = free_port(), free_port(), free_port()
    procs = [spawn([sys.executable, "bench/serve_fake.py", str(up_port)], 0)]
    results: dict[str, dict[str, Result]] = {}
    from tests.helpers import RedisServer

    # Redis is a service of its own, as in a deployment: on core 0 with the upstream and the load generator,
    # not on the gateway's core (an embedded Redis there would compete with the gateway it serves).
    redis = RedisServer().start()
    with tempfile.TemporaryDirectory() as tmp:
        policy = Path(tmp) / "policy.yaml"
        policy.write_text(gateway_policy(up_port, tmp, redis.url))
        try:
            wait_port(up_port)
            results["direct"] = asyncio.run(measure(f"http://127.0.0.1:{up_port}", args.quick))
            pt = spawn([sys.executable, "bench/passthrough.py", f"http://127.0.0.1:{up_port}", str(pt_port)], 1)
            procs.append(pt)
            wait_port(pt_port)
            direct = f"http://127.0.0.1:{up_port}"
            results["passthrough"] = asyncio.run(measure(f"http://127.0.0.1:{pt_port}", args.quick, direct=direct))
            pt.terminate()
            gw = spawn([sys.executable, "-m", "gateway.cli", "serve", "--policy", str(policy), "--port", str(gw_port),
                        "--log-level", "WARNING"], 1)
            procs.append(gw)
            wait_port(gw_port)
            results["gateway"] = asyncio.run(measure(f"http://127.0.0.1:{gw_port}", args.quick, hits=True,
                                                     direct=direct))
        finally:
            for p in procs:
                p.terminate()
                p.wait(10)
            redis.stop()
    report(results)


def report(results: dict[str, dict[str, Result]]) -> None:
    d, p, g = results["direct"], results["passthrough"], results["gateway"]

    def ms(r: Result, q: float) -> float:
        return percentile(r.latencies, q) * 1000

    rows = []
    for q in (50, 99):
        # "adds" at C=1: against the direct requests interleaved with that proxy's own (c1_beside_direct).
        rows.append((f"C=1 P{q} latency (ms)", ms(d["c1"], q), ms(p["c1"], q), ms(g["c1"], q),
                     ms(p["c1"], q) - ms(p["c1_direct"], q), ms(g["c1"], q) - ms(g["c1_direct"], q)))
    for q in (50, 99):
        rows.append((f"1,000 RPS offered P{q} latency (ms)", ms(d["open"], q), ms(p["open"], q), ms(g["open"], q),
                     ms(p["open"], q) - ms(d["open"], q), ms(g["open"], q) - ms(d["open"], q)))
    for phase, label in (("max", "max RPS C=64"), ("max_stream", "max RPS C=64 stream")):
        rows.append((label, d[phase].rps, p[phase].rps, g[phase].rps, float("nan"), float("nan")))
    print(f"{'':34} {'direct':>9} {'passthru':>9} {'gateway':>9} {'pt added':>9} {'gw added':>9}")
    for name, *vals in rows:
        print(f"{name:34} " + " ".join(f"{v:9.3f}" if v == v else f"{'':>9}" for v in vals))
    rows_c32 = (("max RPS C=32 (pass-through: misses)", d["c32"].rps, p["c32"].rps, g["c32"].rps),
                ("max RPS C=32, gateway exact hits", float("nan"), float("nan"), g["c32_hit"].rps))
    for name, *vals in rows_c32:
        print(f"{name:34} " + " ".join(f"{v:9.3f}" if v == v else f"{'':>9}" for v in vals))
    print(f"gateway/passthrough max RPS: {g['max'].rps / p['max'].rps:.2f}x, "
          f"stream {g['max_stream'].rps / p['max_stream'].rps:.2f}x, "
          f"exact hits C=32 vs pass-through misses {g['c32_hit'].rps / p['c32'].rps:.2f}x; "
          f"added P50 C=1: pass-through {ms(p['c1'], 50) - ms(p['c1_direct'], 50):.3f} ms, "
          f"gateway {ms(g['c1'], 50) - ms(g['c1_direct'], 50):.3f} ms "
          f"(direct P50 beside them: {ms(p['c1_direct'], 50):.3f} / {ms(g['c1_direct'], 50):.3f} ms; "
          f"against the first phase's direct P50 {ms(d['c1'], 50):.3f} ms: "
          f"{ms(p['c1'], 50) - ms(d['c1'], 50):.3f} / {ms(g['c1'], 50) - ms(d['c1'], 50):.3f} ms)")
    errors = {k: sum(r.errors for r in v.values()) for k, v in results.items()}
    print(f"errors: {errors}")


if __name__ == "__main__":
    main()
