"""`llm-gateway bench`: load test an OpenAI-compatible server (the gateway or an engine replica).

Closed loop (C requests always in flight) or open loop (--rate R requests/s, whatever the latency). Reports
TTFT and TPOT (streams), latency P50/P95/P99, output tokens/s, RPS, errors by kind and the X-Cache verdicts.
`run_load(LoadConfig)` is the same engine for bench/ scripts.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO
from urllib.parse import urlsplit

import aiohttp
import orjson

from gateway.backends.engine_options import DEFAULT_MODEL
from gateway.loadtest_workloads import BUILTIN, Body, WorkloadError, make_workload

ENDPOINTS = {"messages": "/v1/chat/completions", "prompt": "/v1/completions", "input": "/v1/embeddings"}


@dataclass(slots=True)
class LoadConfig:
    url: str
    workload: Callable[[int], Body]
    requests: int = 100
    concurrency: int = 8
    rate: float | None = None  # open loop: requests started per second
    stream: bool = False
    model: str | None = None  # set on bodies that have none (or on all, with override_model)
    override_model: bool = False
    api_key: str | None = None
    timeout_s: float = 300.0
    progress: TextIO | None = None


@dataclass(slots=True)
class Sample:
    ok: bool
    latency: float
    ttft: float | None = None
    tpot: float | None = None
    output_tokens: int = 0
    error: str | None = None
    cache: str | None = None


@dataclass(slots=True)
class LoadReport:
    samples: list[Sample]
    duration_s: float
    error_examples: dict[str, str] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        ok = [s for s in self.samples if s.ok]
        tokens = sum(s.output_tokens for s in ok)
        dur = max(self.duration_s, 1e-9)
        return {
            "requests": len(self.samples),
            "ok": len(ok),
            "errors": dict(Counter(s.error for s in self.samples if not s.ok)),
            "error_examples": self.error_examples,
            "duration_s": round(self.duration_s, 4),
            "rps": round(len(ok) / dur, 3),
            "output_tokens": tokens,
            "output_tokens_per_s": round(tokens / dur, 2),
            "latency_ms": _dist([s.latency for s in ok]),
            "ttft_ms": _dist([s.ttft for s in ok if s.ttft is not None]),
            "tpot_ms": _dist([s.tpot for s in ok if s.tpot is not None]),
            "x_cache": dict(Counter(s.cache for s in ok if s.cache)),
        }


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _dist(seconds: list[float]) -> dict[str, float] | None:
    if not seconds:
        return None
    v = sorted(x * 1000 for x in seconds)
    return {
        "p50": round(percentile(v, 50), 3), "p95": round(percentile(v, 95), 3), "p99": round(percentile(v, 99), 3),
        "mean": round(sum(v) / len(v), 3), "max": round(v[-1], 3),
    }


class Progress:
    """A one-line bar redrawn on a terminal; plain lines at each 10% otherwise (logs, CI)."""

    def __init__(self, out: TextIO | None, total: int) -> None:
        self.out, self.total, self.done, self.errors = out, total, 0, 0
        self.tty = bool(out is not None and out.isatty())
        self.started = time.perf_counter()
        self.last_draw = 0.0
        self.last_decile = -1

    def update(self, sample: Sample) -> None:
        self.done += 1
        self.errors += not sample.ok
        if self.out is None:
            return
        now = time.perf_counter()
        decile = self.done * 10 // max(self.total, 1)
        if self.tty and (now - self.last_draw >= 0.1 or self.done == self.total):
            self.last_draw = now
            self.out.write("\r" + self.line(now) + ("\n" if self.done == self.total else ""))
            self.out.flush()
        elif not self.tty and decile != self.last_decile:
            self.last_decile = decile
            self.out.write(self.line(now) + "\n")
            self.out.flush()

    def line(self, now: float) -> str:
        frac = self.done / max(self.total, 1)
        bar = "#" * int(frac * 30)
        rps = self.done / max(now - self.started, 1e-9)
        return f"[{bar:<30}] {self.done}/{self.total} {frac:4.0%} {rps:7.1f} req/s  errors {self.errors}"


async def run_load(cfg: LoadConfig) -> LoadReport:
    base = cfg.url.rstrip("/")
    base = base[:-3] if base.endswith("/v1") else base
    headers = {"Content-Type": "application/json"}
    if cfg.api_key:
        headers["Authorization"] = f"Bearer {cfg.api_key}"
    limit = 0 if cfg.rate else cfg.concurrency  # open loop must not queue behind a pool limit
    connector = aiohttp.TCPConnector(limit=limit, force_close=False)
    timeout = aiohttp.ClientTimeout(total=cfg.timeout_s)
    progress = Progress(cfg.progress, cfg.requests)
    samples: list[Sample] = []
    examples: dict[str, str] = {}

    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as session:

        async def one(i: int) -> None:
            sample = await _request(session, base, _prepare(cfg, cfg.workload(i)), examples)
            samples.append(sample)
            progress.update(sample)

        started = time.perf_counter()
        if cfg.rate:
            tasks = []
            for i in range(cfg.requests):
                delay = started + i / cfg.rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                tasks.append(asyncio.create_task(one(i)))
            await asyncio.gather(*tasks)
        else:
            counter = iter(range(cfg.requests))

            async def worker() -> None:
                for i in counter:  # a shared iterator: each index is taken by exactly one worker
                    await one(i)

            await asyncio.gather(*(worker() for _ in range(min(cfg.concurrency, cfg.requests))))
        duration = time.perf_counter() - started
    return LoadReport(samples, duration, examples)


def _prepare(cfg: LoadConfig, body: Body) -> Body:
    body = dict(body)
    if cfg.model and (cfg.override_model or "model" not in body):
        body["model"] = cfg.model
    if "input" not in body:
        body["stream"] = cfg.stream
        if cfg.stream:
            body["stream_options"] = {"include_usage": True}
    return body


async def _request(session: aiohttp.ClientSession, base: str, body: Body, examples: dict[str, str]) -> Sample:
    path = next((p for k, p in ENDPOINTS.items() if k in body), ENDPOINTS["messages"])
    start = time.perf_counter()

    def fail(kind: str, message: str) -> Sample:
        examples.setdefault(kind, message[:300])
        return Sample(False, time.perf_counter() - start, error=kind)

    try:
        async with session.post(base + path, data=orjson.dumps(body)) as resp:
            cache = resp.headers.get("X-Cache")
            if resp.status >= 400:
                return fail(f"http_{resp.status}", (await resp.text())[:300])
            if body.get("stream"):
                return await _read_stream(resp, start, cache, fail)
            data = await resp.json(loads=orjson.loads, content_type=None)
            usage = data.get("usage") or {}
            return Sample(True, time.perf_counter() - start, output_tokens=int(usage.get("completion_tokens") or 0),
                          cache=cache)
    except TimeoutError:
        return fail("timeout", "request exceeded the timeout")
    except aiohttp.ClientConnectionError as e:
        return fail("connect", str(e) or type(e).__name__)
    except (aiohttp.ClientError, ValueError) as e:
        return fail("protocol", str(e) or type(e).__name__)


async def _read_stream(
    resp: aiohttp.ClientResponse, start: float, cache: str | None, fail: Callable[[str, str], Sample]
) -> Sample:
    first: float | None = None
    chunks = 0
    usage_tokens: int | None = None
    done = False
    async for raw in resp.content:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            done = True
            break
        event = orjson.loads(payload)
        if "error" in event:
            return fail("stream_error", str(event["error"].get("message", event["error"])))
        for choice in event.get("choices") or ():
            text = (choice.get("delta") or {}).get("content") or choice.get("text")
            if text or (choice.get("delta") or {}).get("tool_calls"):
                chunks += 1
                if first is None:
                    first = time.perf_counter()
        if event.get("usage"):
            usage_tokens = int(event["usage"].get("completion_tokens") or 0)
    end = time.perf_counter()
    if not done:
        return fail("stream_cut", "the stream ended without data: [DONE]")
    tokens = usage_tokens if usage_tokens is not None else chunks
    ttft = (first - start) if first is not None else None
    tpot = (end - first) / (tokens - 1) if first is not None and tokens > 1 else None
    return Sample(True, end - start, ttft=ttft, tpot=tpot, output_tokens=tokens, cache=cache)


def format_table(s: dict[str, Any]) -> str:
    rows = [
        f"requests      {s['requests']}  (ok {s['ok']}, errors {s['requests'] - s['ok']})",
        f"duration      {s['duration_s']:.2f} s",
        f"throughput    {s['rps']:.2f} req/s   {s['output_tokens_per_s']:.1f} output tok/s "
        f"({s['output_tokens']} tokens)",
        "",
        f"{'ms':<10}{'p50':>10}{'p95':>10}{'p99':>10}{'mean':>10}{'max':>10}",
    ]
    for label, key in (("latency", "latency_ms"), ("TTFT", "ttft_ms"), ("TPOT", "tpot_ms")):
        d = s[key]
        if d is None:
            rows.append(f"{label:<10}{'-':>10}{'-':>10}{'-':>10}{'-':>10}{'-':>10}")
        else:
            rows.append(f"{label:<10}" + "".join(f"{d[k]:>10.2f}" for k in ("p50", "p95", "p99", "mean", "max")))
    if s["x_cache"]:
        rows += ["", "X-Cache       " + ", ".join(f"{k} {v}" for k, v in sorted(s["x_cache"].items()))]
    for kind, count in sorted(s["errors"].items()):
        rows.append(f"error {kind:<14} {count}  e.g. {s['error_examples'].get(kind, '')[:120]}")
    return "\n".join(rows)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llm-gateway bench", description="Load test an OpenAI-compatible server.")
    p.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8080 (with or without /v1)")
    p.add_argument("--concurrency", "-c", type=int, default=8, help="requests in flight (closed loop)")
    p.add_argument("--requests", "-n", type=int, default=100, help="total requests")
    p.add_argument("--rate", type=float, help="open loop: start this many requests per second instead")
    p.add_argument("--stream", action="store_true", help="stream responses (measures TTFT and TPOT)")
    p.add_argument("--workload", default="chat-short", help=f"{', '.join(BUILTIN)}, or a JSONL file of bodies")
    p.add_argument("--model", help=f"model for bodies without one (default {DEFAULT_MODEL}); given, it overrides all")
    p.add_argument("--max-tokens", type=int, help="override max_tokens of every request")
    p.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY"), help="Bearer key (default $OPENAI_API_KEY)")
    p.add_argument("--timeout", type=float, default=300.0, help="per-request timeout in seconds")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return p


def main(argv: list[str]) -> int:
    """Exit 0 when every request succeeded, 1 when some failed, 2 on bad arguments."""
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("concurrency", "requests"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.rate is not None and args.rate <= 0:
        parser.error("--rate must be > 0")
    parts = urlsplit(args.url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        parser.error(f"--url must be an http:// or https:// URL, got {args.url!r}")
    try:
        workload = make_workload(args.workload, args.max_tokens)
    except WorkloadError as e:
        parser.error(str(e))
    cfg = LoadConfig(
        url=args.url, workload=workload, requests=args.requests, concurrency=args.concurrency, rate=args.rate,
        stream=args.stream, model=args.model or DEFAULT_MODEL, override_model=args.model is not None,
        api_key=args.api_key, timeout_s=args.timeout, progress=None if args.no_progress else sys.stderr,
    )
    summary = asyncio.run(run_load(cfg)).summary()
    if args.json:
        sys.stdout.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(format_table(summary))
    return 0 if summary["ok"] == summary["requests"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
