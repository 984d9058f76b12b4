"""Semantic cache on a stream: how often the gateway serves a look-alike's answer, how often it serves a
rewording, and how well its own learning estimate tracks the truth.

An oracle upstream (aiohttp, this process, its own thread) answers every ask of the data set with that ask's own
answer text, looked up by the exact messages list; anything else is a 404 in OpenAI's error envelope. The
gateway runs as a subprocess (`python -m gateway.cli serve`, core 1 where there are two) on a private real
redis-server, with one route for model "oracle": `cache: {exact: false, semantic: {store: always, ...}}`, the
extra semantic keys coming from `--semantic-json`. The client (the official openai SDK, core 0) sends, round by
round, every ask of every family (or the first `--limit` families) in a fresh shuffled order, temperature 0.7,
a share of them streamed (`--stream-share`).

Truth: every answer text maps to its (family, class). A request served from the cache (X-Cache: HIT-*) is wrong
when the returned text belongs to another class than the ask's (an unknown text counts as wrong).
  trap ask          an ask whose family has another class with an ask sent earlier in the stream
  should-hit ask    the first sending of an ask while another ask of its own class was sent earlier
  explored          X-Cache-Explore: 1 (the gateway sent a would-be hit upstream to learn)
The cache's own estimate (`learning` in GET /admin/cache/stats: wrong_estimate, wrong_bound) is printed beside
the true wrong rate among served hits, per round and cumulatively; "-" where the gateway does not report it.

    python bench/semantic_stream.py [--data FILE] [--rounds 4] [--seed 0] [--limit N] [--stream-share 0.25]
        [--semantic-json '{"max_wrong": 0.01}'] [--port P] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import openai  # noqa: E402
from aiohttp import web  # noqa: E402

from tests.helpers import RedisServer, free_port  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parent / "data" / "stream_tune.jsonl"
ADMIN = "admin"
MODEL = "oracle"
ROUTE = "oracle"
KINDS = ("single", "multi")


# ---- the data ---------------------------------------------------------------------------------------------------


def messages_key(messages: list[dict[str, Any]]) -> str:
    """The oracle's lookup key: the messages' roles and contents as JSON (other fields a client or the gateway
    may add are ignored)."""
    return json.dumps([[m.get("role"), m.get("content")] for m in messages], ensure_ascii=False,
                      separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Ask:
    id: str  # family/class/ask
    family: str
    kind: str
    cls: int
    messages: list[dict[str, Any]]
    answer: str

    @property
    def key(self) -> str:
        return messages_key(self.messages)


def load_asks(path: Path, limit: int | None) -> list[Ask]:
    asks: list[Ask] = []
    with path.open(encoding="utf-8") as f:
        families = [json.loads(line) for line in f if line.strip()]
    for fam in families[:limit] if limit else families:
        for ci, cls in enumerate(fam["classes"]):
            for ai, ask in enumerate(cls["asks"]):
                asks.append(Ask(f"{fam['family']}/{ci}/{ai}", fam["family"], fam.get("kind", "single"), ci,
                                ask["messages"], ask["answer"]))
    keys = Counter(a.key for a in asks)
    if dup := [k for k, n in keys.items() if n > 1]:
        raise SystemExit(f"{len(dup)} message lists occur more than once in {path}; the oracle needs them unique")
    texts = Counter(a.answer for a in asks)
    if dup := [t for t, n in texts.items() if n > 1]:
        raise SystemExit(f"{len(dup)} answer texts occur more than once in {path}; truth needs them unique")
    return asks


# ---- the oracle upstream ----------------------------------------------------------------------------------------


class Oracle:
    """OpenAI's /v1/chat/completions answering each known messages list with its ask's answer (JSON or SSE)."""

    def __init__(self, asks: list[Ask]) -> None:
        self.answers = {a.key: a.answer for a in asks}
        self.kind_of = {a.key: a.kind for a in asks}
        self.calls = 0
        self.unknown = 0
        self.calls_by_kind: Counter[str] = Counter()
        self.app = web.Application()
        self.app.router.add_post("/v1/chat/completions", self.chat)
        self._n = 0

    def _id(self) -> str:
        self._n += 1
        return f"chatcmpl-oracle-{self._n}"

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.calls += 1
        try:
            body = await request.json()
            messages = body["messages"]
            key = messages_key(messages)
        except (ValueError, KeyError, TypeError, AttributeError):
            self.unknown += 1
            return _error(400, "body is not a chat completion request", "invalid_request_error")
        answer = self.answers.get(key)
        if answer is None:
            self.unknown += 1
            return _error(404, "the oracle has no answer for these messages", "not_found_error")
        self.calls_by_kind[self.kind_of[key]] += 1
        model = body.get("model", MODEL)
        usage = {"prompt_tokens": sum(len(str(m.get("content", "")).split()) for m in messages),
                 "completion_tokens": len(answer.split())}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        cid, created = self._id(), int(time.time())
        if not body.get("stream"):
            return web.json_response({
                "id": cid, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                             "finish_reason": "stop", "logprobs": None}],
                "usage": usage})
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            out: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            if include_usage:
                out["usage"] = None
            return _sse(out)

        events = [chunk({"role": "assistant", "content": ""})]
        words = answer.split(" ")
        events += [chunk({"content": w if i == len(words) - 1 else w + " "}) for i, w in enumerate(words)]
        events.append(chunk({}, "stop"))
        if include_usage:
            events.append(_sse({"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                                "choices": [], "usage": usage}))
        events.append(b"data: [DONE]\n\n")
        for event in events:
            await resp.write(event)
        await resp.write_eof()
        return resp


def _sse(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def _error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "param": None, "code": None}},
                             status=status)


class OracleServer:
    """The oracle on 127.0.0.1, served from its own event-loop thread."""

    def __init__(self, oracle: Oracle) -> None:
        self.oracle = oracle
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    def start(self) -> OracleServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)
        return self

    async def _start(self) -> None:
        self._runner = web.AppRunner(self.oracle.app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(10)
            self._runner = None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


# ---- the gateway ------------------------------------------------------------------------------------------------


def policy_text(oracle_url: str, redis_url: str, data_dir: str, semantic_extra: dict[str, Any]) -> str:
    """The policy as JSON (which is YAML)."""
    semantic: dict[str, Any] = {"store": "always", **semantic_extra}
    policy = {
        "redis": {"url": redis_url, "timeout_ms": 500},
        "server": {"admin_keys": [ADMIN], "data_dir": data_dir},
        "backends": {"oracle": {"type": "openai", "base_url": oracle_url + "/v1"}},
        "routes": [{"name": ROUTE, "match": {"model": MODEL}, "backends": ["oracle"],
                    "cache": {"exact": False, "semantic": semantic}}],
    }
    return json.dumps(policy, indent=2) + "\n"


def two_cores() -> bool:
    return hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2 and shutil.which("taskset") is not None


def start_gateway(policy_path: Path, port: int, log_path: Path, pin: bool) -> subprocess.Popen[bytes]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.setdefault("LLM_GATEWAY_EMBED_THREADS", "1")
    cmd = [sys.executable, "-m", "gateway.cli", "serve", "--policy", str(policy_path), "--port", str(port),
           "--log-level", "WARNING"]
    if pin:
        cmd = ["taskset", "-c", "1", *cmd]
    with log_path.open("wb") as log:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_ready(url: str, proc: subprocess.Popen[bytes], log_path: Path, timeout_s: float = 300) -> float:
    t0 = time.monotonic()
    last = ""
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"gateway exited with {proc.returncode}:\n{tail(log_path)}")
        try:
            r = httpx.get(url + "/ready", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=5)
            if r.status_code == 200:
                return time.monotonic() - t0
            last = r.text
        except httpx.HTTPError as e:
            last = repr(e)
        time.sleep(0.5)
    raise RuntimeError(f"gateway not ready after {timeout_s:.0f}s ({last}):\n{tail(log_path)}")


def tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def stop_process(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def cache_stats(url: str) -> dict[str, Any] | None:
    try:
        r = httpx.get(url + "/admin/cache/stats", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
        r.raise_for_status()
        return r.json()
    except (httpx.HTTPError, ValueError):
        return None


def learning_of(stats: dict[str, Any] | None) -> dict[str, Any] | None:
    """The route's entry of `learning` (the only route's when it is named otherwise)."""
    learning = (stats or {}).get("learning")
    if not isinstance(learning, dict) or not learning:
        return None
    entry = learning.get(ROUTE)
    if entry is None and len(learning) == 1:
        entry = next(iter(learning.values()))
    return entry if isinstance(entry, dict) else None


def semantic_lookups(stats: dict[str, Any] | None) -> dict[str, int]:
    lookups = ((stats or {}).get("process") or {}).get("lookups") or {}
    sem = lookups.get("semantic") or {}
    return {str(k): int(v) for k, v in sem.items()} if isinstance(sem, dict) else {}


# ---- the stream -------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Record:
    round: int
    ask: str
    kind: str
    stream: bool
    x_cache: str
    explored: bool
    served: bool
    wrong: bool
    trap: bool
    should_hit: bool
    returned: str | None  # "family/class" of the text, "unknown", or None on an error
    similarity: str | None
    error: str | None
    ms: float


def send(client: openai.OpenAI, ask: Ask, stream: bool) -> tuple[dict[str, str], str]:
    """One request; (response headers, assembled text)."""
    if not stream:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=ask.messages, temperature=0.7)  # type: ignore[arg-type]
        completion = raw.parse()
        return dict(raw.headers), completion.choices[0].message.content or ""
    with client.chat.completions.with_streaming_response.create(
            model=MODEL, messages=ask.messages, temperature=0.7, stream=True,  # type: ignore[arg-type]
            stream_options={"include_usage": True}) as resp:
        headers = dict(resp.headers)
        parts = [c.choices[0].delta.content or "" for c in resp.parse() if c.choices]
    return headers, "".join(parts)


def header(headers: dict[str, str], name: str) -> str | None:
    low = name.lower()
    return next((v for k, v in headers.items() if k.lower() == low), None)


@dataclass(slots=True)
class Tally:
    requests: int = 0
    errors: int = 0
    served: int = 0
    wrong: int = 0
    traps: int = 0
    wrong_on_traps: int = 0
    explored: int = 0
    should_hit: int = 0
    should_hit_served: int = 0
    should_hit_right: int = 0
    x_cache: Counter[str] = field(default_factory=Counter)

    def add(self, r: Record) -> None:
        self.requests += 1
        self.errors += r.error is not None
        self.served += r.served
        self.wrong += r.wrong
        self.traps += r.trap
        self.wrong_on_traps += r.wrong and r.trap
        self.explored += r.explored
        self.should_hit += r.should_hit
        self.should_hit_served += r.should_hit and r.served
        self.should_hit_right += r.should_hit and r.served and not r.wrong
        self.x_cache[r.x_cache] += 1

    def figures(self) -> dict[str, Any]:
        d = asdict(self)
        d["x_cache"] = dict(self.x_cache)
        d["wrong_per_trap"] = ratio(self.wrong, self.traps)
        d["wrong_per_served"] = ratio(self.wrong, self.served)
        d["exploration_share"] = ratio(self.explored, self.explored + self.served)
        d["should_hit_served_share"] = ratio(self.should_hit_served, self.should_hit)
        d["should_hit_recall"] = ratio(self.should_hit_right, self.should_hit)
        return d


def ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def num(x: object, digits: int = 4) -> str:
    return f"{x:.{digits}f}" if isinstance(x, int | float) and not isinstance(x, bool) else "-"


def run_stream(args: argparse.Namespace, asks: list[Ask], oracle: Oracle, url: str) -> dict[str, Any]:
    truth = {a.answer: (a.family, a.cls) for a in asks}
    order_rng, stream_rng = random.Random(args.seed), random.Random(args.seed + 1)
    client = openai.OpenAI(base_url=url + "/v1", api_key="bench", max_retries=0, timeout=120)
    sent_asks: set[str] = set()
    sent_classes: dict[str, set[int]] = {}
    records: list[Record] = []
    rounds: list[dict[str, Any]] = []
    cumulative = Tally()
    by_kind = {k: Tally() for k in KINDS}
    last_by_kind = {k: Tally() for k in KINDS}
    before = cache_stats(url)
    print(f"{'round':>5} {'req':>5} {'served':>6} {'wrong':>5} {'traps':>5} {'wrong/trap':>10} {'upstream':>8} "
          f"{'explored':>8} {'expl.share':>10} {'should-hit':>10} {'sh.served':>9} | "
          f"{'true w/s':>8} {'est':>7} {'bound':>7} | {'cum true':>8}", flush=True)
    for rnd in range(1, args.rounds + 1):
        order = list(asks)
        order_rng.shuffle(order)
        tally = Tally()
        round_kind = {k: Tally() for k in KINDS}
        calls0 = oracle.calls
        for ask in order:
            classes = sent_classes.setdefault(ask.family, set())
            trap = any(c != ask.cls for c in classes)
            should_hit = ask.id not in sent_asks and ask.cls in classes
            stream = stream_rng.random() < args.stream_share
            t0 = time.perf_counter()
            error = returned = similarity = None
            x_cache, explored, served, wrong = "ERROR", False, False, False
            try:
                headers, text = send(client, ask, stream)
                x_cache = header(headers, "X-Cache") or "-"
                explored = header(headers, "X-Cache-Explore") == "1"
                similarity = header(headers, "X-Cache-Similarity")
                served = x_cache.upper().startswith("HIT")
                owner = truth.get(text)
                returned = f"{owner[0]}/{owner[1]}" if owner else "unknown"
                wrong = served and owner != (ask.family, ask.cls)
            except openai.APIError as e:
                error = f"{type(e).__name__}: {getattr(e, 'status_code', '')} {e.message}"[:300]
            ms = (time.perf_counter() - t0) * 1000
            sent_asks.add(ask.id)
            classes.add(ask.cls)
            rec = Record(rnd, ask.id, ask.kind, stream, x_cache, explored, served, wrong, trap, should_hit,
                         returned, similarity, error, ms)
            records.append(rec)
            for t in (tally, cumulative, by_kind[ask.kind], round_kind[ask.kind]):
                t.add(rec)
        upstream = oracle.calls - calls0
        stats = cache_stats(url)
        learning = learning_of(stats)
        est = learning.get("wrong_estimate") if learning else None
        bound = learning.get("wrong_bound") if learning else None
        lookups = semantic_lookups(stats)
        lookups_before = semantic_lookups(before)
        lookups_delta = {k: v - lookups_before.get(k, 0) for k, v in lookups.items() if v - lookups_before.get(k, 0)}
        before = stats
        row = {"round": rnd, **tally.figures(), "upstream_calls": upstream,
               "cumulative_wrong_per_served": cumulative.figures()["wrong_per_served"],
               "learning": learning, "semantic_lookups": lookups_delta,
               "by_kind": {k: t.figures() for k, t in round_kind.items()}}
        rounds.append(row)
        last_by_kind = round_kind
        print(f"{rnd:>5} {tally.requests:>5} {tally.served:>6} {tally.wrong:>5} {tally.traps:>5} "
              f"{pct(ratio(tally.wrong, tally.traps), 2):>10} {upstream:>8} {tally.explored:>8} "
              f"{pct(ratio(tally.explored, tally.explored + tally.served)):>10} {tally.should_hit:>10} "
              f"{pct(ratio(tally.should_hit_served, tally.should_hit)):>9} | "
              f"{num(ratio(tally.wrong, tally.served)):>8} {num(est):>7} {num(bound):>7} | "
              f"{num(ratio(cumulative.wrong, cumulative.served)):>8}", flush=True)
        extra = [f"X-Cache {dict(sorted(tally.x_cache.items()))}", f"semantic lookups {lookups_delta or '-'}"]
        if tally.errors:
            extra.append(f"errors {tally.errors}")
        if learning:
            extra.append("learning " + " ".join(f"{k}={learning[k]}" for k in
                                                ("explored", "served", "observed", "disagreed", "max_wrong")
                                                if k in learning))
        print("      " + "; ".join(extra), flush=True)
    errors = Counter(r.error.split(":")[0] for r in records if r.error)
    totals = {"all": cumulative.figures(), **{k: t.figures() for k, t in by_kind.items()}}
    last = {"all": rounds[-1] if rounds else None, **{k: t.figures() for k, t in last_by_kind.items()}}
    upstream_by_kind = dict(oracle.calls_by_kind)
    for name, t in (("all", cumulative), *by_kind.items()):
        calls = oracle.calls - oracle.unknown if name == "all" else upstream_by_kind.get(name, 0)
        totals[name]["upstream_calls"] = calls
        # what the upstream saw beyond one call per request not served: exploration, or calls without the header
        totals[name]["upstream_beyond_unserved"] = calls - (t.requests - t.served - t.errors)
    print("\ntotals (all rounds; 'last' = the last round)")
    print(f"{'kind':>6} {'req':>6} {'served':>6} {'wrong':>5} {'traps':>6} {'wrong/trap':>10} {'last w/trap':>11} "
          f"{'should-hit':>10} {'recall':>7} {'sh.served':>9} {'upstream':>8} {'explored':>8} {'expl.share':>10} "
          f"{'w/served':>8}")
    for name in ("all", *KINDS):
        t = totals[name]
        lt = last[name]
        print(f"{name:>6} {t['requests']:>6} {t['served']:>6} {t['wrong']:>5} {t['traps']:>6} "
              f"{pct(t['wrong_per_trap'], 2):>10} {pct(lt['wrong_per_trap'] if lt else None, 2):>11} "
              f"{t['should_hit']:>10} {pct(t['should_hit_recall']):>7} {pct(t['should_hit_served_share']):>9} "
              f"{t['upstream_calls']:>8} {t['explored']:>8} {pct(t['exploration_share']):>10} "
              f"{num(t['wrong_per_served']):>8}")
    print(f"extra upstream calls due to exploration: {cumulative.explored} "
          f"(single {by_kind['single'].explored}, multi {by_kind['multi'].explored}); upstream calls beyond one "
          f"per unserved request: {totals['all']['upstream_beyond_unserved']}; oracle 404/400s: {oracle.unknown}")
    if errors:
        print(f"request errors: {dict(errors)}")
    final = cache_stats(url)
    return {"rounds": rounds, "totals": totals, "errors": dict(errors), "oracle_unknown": oracle.unknown,
            "final_learning": learning_of(final), "final_stats": final,
            "records": [asdict(r) for r in records]}


# ---- main -------------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="families, JSONL")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--limit", type=int, default=None, help="the first N families only")
    p.add_argument("--stream-share", type=float, default=0.25, help="share of requests sent with stream=True")
    p.add_argument("--semantic-json", default="{}", help="extra keys for the route's cache.semantic, as JSON")
    p.add_argument("--port", type=int, default=None, help="the gateway's port (default: a free one)")
    p.add_argument("--json", type=Path, default=None, help="write every figure here")
    args = p.parse_args(argv)
    try:
        args.semantic_extra = json.loads(args.semantic_json)
    except ValueError as e:
        p.error(f"--semantic-json is not JSON: {e}")
    if not isinstance(args.semantic_extra, dict):
        p.error("--semantic-json must be a JSON object")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@dataclass(slots=True)
class Procs:
    oracle: OracleServer | None = None
    redis: RedisServer | None = None
    gateway: subprocess.Popen[bytes] | None = None

    def stop(self) -> Iterator[str]:
        """Stop everything; yields what failed to stop cleanly."""
        for name, fn in (("gateway", lambda: stop_process(self.gateway)),
                         ("redis", lambda: self.redis.stop() if self.redis else None),
                         ("oracle", lambda: self.oracle.stop() if self.oracle else None)):
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - clean up the rest regardless
                yield f"{name}: {e!r}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    asks = load_asks(args.data, args.limit)
    pin = two_cores()
    if pin:
        os.sched_setaffinity(0, {0})  # this process: client and oracle; redis inherits it
    oracle = Oracle(asks)
    procs = Procs()
    families = len({a.family for a in asks})
    kinds = Counter(a.kind for a in {a.family: a for a in asks}.values())
    print(f"{args.data.name}: {families} families ({dict(kinds)}), {len(asks)} asks, {args.rounds} rounds, "
          f"seed {args.seed}, stream share {args.stream_share}, semantic {json.dumps(args.semantic_extra)}, "
          f"pinned {'gateway core 1, client core 0' if pin else 'no'}", flush=True)
    with tempfile.TemporaryDirectory(prefix="semantic-stream-") as tmp:
        try:
            procs.oracle = OracleServer(oracle).start()
            procs.redis = RedisServer().start()
            port = args.port or free_port()
            url = f"http://127.0.0.1:{port}"
            policy_path = Path(tmp) / "policy.yaml"
            policy_path.write_text(policy_text(procs.oracle.url, procs.redis.url, tmp, args.semantic_extra))
            log_path = Path(tmp) / "gateway.log"
            procs.gateway = start_gateway(policy_path, port, log_path, pin)
            ready_s = wait_ready(url, procs.gateway, log_path)
            print(f"gateway ready in {ready_s:.1f}s at {url}", flush=True)
            t0 = time.monotonic()
            result = run_stream(args, asks, oracle, url)
            wall = time.monotonic() - t0
            print(f"stream took {wall:.1f}s", flush=True)
            if procs.gateway.poll() is not None:
                print(f"gateway exited during the run ({procs.gateway.returncode}):\n{tail(log_path)}")
            log_text = tail(log_path, 40)
            if any(w in log_text for w in ("ERROR", "Traceback")):
                print(f"gateway log (tail):\n{log_text}")
        except RuntimeError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        finally:
            for problem in procs.stop():
                print(f"cleanup: {problem}", file=sys.stderr)
    if args.json:
        out = {"config": {"data": str(args.data), "rounds": args.rounds, "seed": args.seed, "limit": args.limit,
                          "stream_share": args.stream_share, "semantic": args.semantic_extra, "pinned": pin,
                          "families": families, "asks": len(asks), "wall_s": wall},
               **result}
        args.json.write_text(json.dumps(out, indent=1, ensure_ascii=False, default=str) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
