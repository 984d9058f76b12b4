"""A bounded soak: a fixed request rate through the gateway for `--duration` seconds with faults injected.

    python bench/soak.py [--duration 600] [--rate 100] [--stall-every 30] [--stall-ms 2000]

Layout (2 cores): the fake upstream (tests/fakes/openai_server.py), a private redis-server and this load
generator share core 0; the gateway (one worker, `llm-gateway serve`) runs alone on core 1. The mix, chosen
by request number: plain chat (40%), chat on an exact-cache route (10%), streams (30%), streams the upstream
cuts mid-way (10%), streams the client drops after the first event (10%). Every `--stall-every` seconds Redis
stalls for `--stall-ms` (`CLIENT PAUSE ... ALL`): rate limits, cache lookups and stores all time out meanwhile.

Every response is checked: a 200 JSON answer parses and carries the expected text; a 200 stream carries the
expected text and ends with `data: [DONE]`, or (a cut upstream) ends with an in-band `data: {"error": ...}`;
any other status is an OpenAI error envelope. Anything else is `garbled`; a request that got no complete
response (other than the ones the client drops on purpose) is `lost`. The gateway's RSS is sampled after the
warm-up, at the middle and at the end. Exits 1 when anything was lost or garbled or the gateway died.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadgen import Connection, install_uvloop  # noqa: E402
from bench.overhead import free_port, spawn, wait_port  # noqa: E402

PATH = "/v1/chat/completions"
CUT_MARK = "[cut]"  # the fake upstream drops a stream whose prompt carries this after CUT_AFTER events
CUT_AFTER = 4
TIMEOUT_S = 30.0
IDLE_S = 5.0  # keep-alive connections idle longer are not reused (the gateway closes them after 15 s)
KINDS = ("plain",) * 4 + ("cached",) + ("stream",) * 3 + ("cut",) + ("drop",)


def policy(upstream_port: int, redis_url: str, data_dir: str) -> str:
    return f"""
redis: {{url: "{redis_url}", timeout_ms: 5}}
server: {{data_dir: "{data_dir}"}}
tenants:
  - {{name: soak, api_keys: [bench], limits: {{rpm: 1000000, tpm: 100000000}}}}
backends:
  up: {{type: openai, base_url: "http://127.0.0.1:{upstream_port}/v1", max_inflight: 256, max_queued: 256}}
routes:
  - match: {{model: soak-model}}
    backends: [up]
  - match: {{model: soak-cached}}
    backends: [up]
    cache: {{exact: {{ttl: 3600}}}}
"""


def request_for(i: int) -> tuple[str, bytes, str]:
    """(kind, body, the answer text expected) of request number i."""
    kind = KINDS[i % len(KINDS)]
    text = "the cached question" if kind == "cached" else f"soak request {i} alpha beta gamma delta epsilon"
    if kind == "cut":
        text += " " + CUT_MARK
    body = {"model": "soak-cached" if kind == "cached" else "soak-model",
            "messages": [{"role": "user", "content": text}], "stream": kind in ("stream", "cut", "drop")}
    if kind == "cached":
        body["temperature"] = 0  # the exact cache stores deterministic requests only
    return kind, orjson.dumps(body), "echo: " + text


# ---- the fake upstream (its own process) ---------------------------------------------------------------------

def serve_upstream(port: int) -> None:
    from aiohttp import web

    from tests.fakes.openai_server import FakeOpenAI

    class SoakUpstream(FakeOpenAI):
        """The test suite's fake, cutting the streams whose prompt asks for it (a per-request fault, so
        the other streams in flight at the same time are not cut)."""

        async def send_events(self, request: web.Request, resp: web.StreamResponse, events: list[bytes]) -> bool:
            if CUT_MARK.encode() not in await request.read():  # the body aiohttp already read (cached)
                return await super().send_events(request, resp, events)
            for event in events[:CUT_AFTER]:
                await resp.write(event)
            assert request.transport is not None
            request.transport.close()  # no terminal event, no chunk terminator
            return False

    install_uvloop()
    fake = SoakUpstream()
    fake.record = False
    fake.delay_per_chunk = 0.002  # streams last long enough for drops and stalls to land mid-stream
    web.run_app(fake.app, host="127.0.0.1", port=port, print=None, access_log=None)


# ---- the client side -----------------------------------------------------------------------------------------

class SoakConnection(Connection):
    """loadgen's keep-alive connection, reading whole bodies, each request with its own body."""

    def __init__(self, url: str) -> None:
        super().__init__(url, PATH, b"")
        self._head = self.request[: self.request.index(b"Content-Length:")]
        self.used = time.monotonic()

    def with_body(self, body: bytes) -> SoakConnection:
        self.request = self._head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
        return self

    async def exchange(self, drop_after_first: bool) -> tuple[int, bytes]:
        """One request; (status, body). With drop_after_first, returns after the first chunk of the body
        (the caller closes the connection: a client that leaves mid-stream)."""
        assert self.reader and self.writer
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        body = bytearray()
        if b"transfer-encoding: chunked" in lower:
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).strip(), 16)
                body += (await self.reader.readexactly(size + 2))[:-2]
                if size == 0 or (drop_after_first and body):
                    break
        else:
            i = lower.index(b"content-length:")
            body += await self.reader.readexactly(int(lower[i + 15:lower.index(b"\r\n", i)]))
        return status, bytes(body)


def judge(kind: str, status: int, body: bytes, expected: str) -> str:
    """The outcome of one response: ok, inband_error, error_<status>, or garbled_<why>."""
    if status != 200:
        try:
            err = orjson.loads(body)["error"]
            assert isinstance(err["message"], str) and "type" in err
        except Exception:
            return f"garbled_envelope_{status}"
        return f"error_{status}"
    if kind in ("plain", "cached"):
        try:
            answer = orjson.loads(body)
        except orjson.JSONDecodeError:
            return "garbled_json"
        return "ok" if answer["choices"][0]["message"]["content"] == expected else "garbled_content"
    events = [e for e in body.decode("utf-8", "replace").split("\n\n") if e.strip()]
    if not events or not all(e.startswith("data: ") for e in events):
        return "garbled_sse"
    text = []
    for event in events[:-1]:
        chunk = orjson.loads(event[6:])
        for choice in chunk.get("choices") or []:
            text.append((choice.get("delta") or {}).get("content") or "")
    last = events[-1][6:]
    if last == "[DONE]":
        return "ok" if "".join(text) == expected else "garbled_content"
    try:
        error = orjson.loads(last)["error"]
        assert isinstance(error["message"], str)
    except Exception:
        return "garbled_unterminated"
    return "inband_error" if expected.startswith("".join(text)) else "garbled_content"


async def one(url: str, i: int, outcomes: Counter, idle: list[SoakConnection]) -> None:
    kind, body, expected = request_for(i)
    drop = kind == "drop"
    conn = None
    while idle and not drop:
        conn = idle.pop()
        if time.monotonic() - conn.used < IDLE_S:
            break
        conn.close()  # the gateway may close it any moment now (server.header_timeout_s): not a loss to count
        conn = None
    conn = (conn or SoakConnection(url)).with_body(body)
    try:
        async with asyncio.timeout(TIMEOUT_S):
            if conn.writer is None:
                await conn.open()
            status, data = await conn.exchange(drop)
    except (OSError, asyncio.IncompleteReadError, ValueError, TimeoutError) as e:
        outcomes[f"{kind}:lost_{type(e).__name__}"] += 1
        conn.close()
        return
    if drop:
        conn.close()  # the client leaves after the first event
        outcomes[f"{kind}:dropped" if status == 200 else f"{kind}:{judge(kind, status, data, expected)}"] += 1
        return
    outcomes[f"{kind}:{judge(kind, status, data, expected)}"] += 1
    conn.used = time.monotonic()
    idle.append(conn)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def stall_redis(redis_url: str, every_s: float, stall_ms: int, stalls: list[float]) -> None:
    import redis.asyncio as aioredis

    admin = aioredis.Redis.from_url(redis_url)
    try:
        while True:
            await asyncio.sleep(every_s)
            await admin.execute_command("CLIENT", "PAUSE", stall_ms, "ALL")  # ends by itself after stall_ms
            stalls.append(time.monotonic())
    finally:
        await admin.aclose()


async def soak(url: str, gw_pid: int, redis_url: str, args: argparse.Namespace) -> dict:
    outcomes: Counter = Counter()
    idle: list[SoakConnection] = []
    for i in range(200):  # warm-up: connections, the exact-cache entry, the gateway's own pools
        await one(url, i * len(KINDS), outcomes, idle)
    outcomes.clear()
    rss = {"start": rss_kib(gw_pid)}
    stalls: list[float] = []
    staller = asyncio.create_task(stall_redis(redis_url, args.stall_every, args.stall_ms, stalls))
    tasks: set[asyncio.Task] = set()
    n = int(args.rate * args.duration)
    start = time.perf_counter()
    skipped = 0
    for i in range(n):
        delay = start + i / args.rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if i == n // 2:
            rss["middle"] = rss_kib(gw_pid)
        if len(tasks) >= args.max_inflight:
            skipped += 1  # the generator's own bound: never sent, so neither answered nor lost
            continue
        task = asyncio.create_task(one(url, i, outcomes, idle))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    staller.cancel()
    await asyncio.sleep(0.5)
    rss["end"] = rss_kib(gw_pid)
    for c in idle:
        c.close()
    return {"outcomes": outcomes, "sent": n - skipped, "skipped": skipped, "elapsed": elapsed, "rss_kib": rss,
            "redis_stalls": len(stalls)}


def metrics_lines(url: str) -> list[str]:
    import urllib.request

    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    wanted = ("gateway_rate_limit_fallbacks_total", "gateway_redis_errors_total", "gateway_upstream_errors_total",
              "gateway_requests_total", "gateway_cache_lookups_total", "gateway_cache_stores_total")
    return [line for line in text.splitlines() if line.startswith(wanted) and not line.endswith(" 0.0")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load (default 600)")
    parser.add_argument("--rate", type=float, default=100.0, help="requests per second offered")
    parser.add_argument("--stall-every", type=float, default=30.0, help="seconds between Redis stalls")
    parser.add_argument("--stall-ms", type=int, default=2000, help="length of each Redis stall")
    parser.add_argument("--max-inflight", type=int, default=512, help="the generator's bound on open requests")
    parser.add_argument("--upstream", type=int, help=argparse.SUPPRESS)  # internal: serve the fake on this port
    args = parser.parse_args()
    if args.upstream:
        serve_upstream(args.upstream)
        return
    from gateway.embedded_redis import redis_server_binary

    os.sched_setaffinity(0, {0})
    install_uvloop()
    up_port, redis_port, gw_port = free_port(), free_port(), free_port()
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            procs.append(spawn([redis_server_binary(), "--port", str(redis_port), "--bind", "127.0.0.1", "--save",
                                "", "--appendonly", "no", "--dir", tmp], 0))
            procs.append(spawn([sys.executable, "bench/soak.py", "--upstream", str(up_port)], 0))
            (Path(tmp) / "policy.yaml").write_text(policy(up_port, redis_url, tmp))
            log = open(Path(tmp) / "gateway.log", "wb")  # noqa: SIM115 (closed with the directory)
            gw = subprocess.Popen(["taskset", "-c", "1", sys.executable, "-m", "gateway.cli", "serve", "--policy",
                                   str(Path(tmp) / "policy.yaml"), "--port", str(gw_port), "--log-level", "WARNING"],
                                  stdout=log, stderr=log)
            procs.append(gw)
            for port in (redis_port, up_port, gw_port):
                wait_port(port)
            url = f"http://127.0.0.1:{gw_port}"
            result = asyncio.run(soak(url, gw.pid, redis_url, args))
            alive = gw.poll() is None
            metrics = metrics_lines(url) if alive else []
            log.close()
            log_text = (Path(tmp) / "gateway.log").read_text(errors="replace")
            warnings = (log_text.count("WARNING"), log_text.count("rate limits decided by this process alone"))
        finally:
            for p in procs:
                p.terminate()
                p.wait(10)
    report(result, alive, metrics, warnings, args)


def report(
    result: dict, alive: bool, metrics: list[str], warnings: tuple[int, int], args: argparse.Namespace
) -> None:
    outcomes: Counter = result["outcomes"]
    answered = sum(outcomes.values())
    lost = sum(v for k, v in outcomes.items() if ":lost" in k)
    garbled = sum(v for k, v in outcomes.items() if ":garbled" in k)
    rss = result["rss_kib"]
    print(f"soak: {args.duration:.0f}s at {args.rate:.0f} req/s offered, Redis stalled {args.stall_ms} ms every "
          f"{args.stall_every:.0f}s ({result['redis_stalls']} stalls); {result['sent']} sent in "
          f"{result['elapsed']:.1f}s, {result['skipped']} not sent (generator bound)")
    for key, value in sorted(outcomes.items()):
        print(f"  {key:32} {value:8}")
    print(f"responses {answered} of {result['sent']} sent; lost {lost}; garbled {garbled}; gateway alive: {alive}")
    print(f"gateway RSS MiB: start {rss['start'] / 1024:.1f}, middle {rss.get('middle', 0) / 1024:.1f}, "
          f"end {rss['end'] / 1024:.1f}; WARNING lines in its log: {warnings[0]}, of them about local limit "
          f"decisions: {warnings[1]}")
    for line in metrics:
        print("  " + line)
    if lost or garbled or not alive or answered != result["sent"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
