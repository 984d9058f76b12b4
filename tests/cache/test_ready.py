"""Ready means working: `/ready` is 503 (reason named) until the semantic cache can serve, and answers that
arrive while the model loads are stored, not dropped. A real `llm-gateway serve` process, real MiniLM, real
Redis, openai SDK as client."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx

from gateway.cache import stage as stage_module
from gateway.cache.embedder import CACHE_ENV, cache_dir, failure_file, graph_file, model_dir, shared_embedder
from tests.cache.gateway_helpers import ask, policy, semantic_ready, settle
from tests.cache.test_fail_open import COMPLETION, ctx, make_stage, no_model
from tests.gateway.test_serve import wait_ready
from tests.helpers import free_port


class Url:
    """Just enough of a ServerThread for gateway_helpers.ask (it needs `.url`)."""

    def __init__(self, url: str) -> None:
        self.url = url


def readiness(url: str) -> tuple[int, list[str]]:
    response = httpx.get(url + "/ready", timeout=10)
    return response.status_code, response.json().get("reasons", [])


@contextlib.contextmanager
def model_load_held(graphs: Path) -> Iterator[Callable[[], None]]:
    """An empty graph directory whose build lock this test holds: a gateway pointed at it (CACHE_ENV) stays at
    "model loading" until release() copies the graphs in and unlocks, so the load is slow on any machine (a
    fast one loads the cached graphs before the test's first /ready, which made the check a race)."""
    shared_embedder()  # the graphs of the suite's cache directory, made or loaded
    source = cache_dir()
    weights = model_dir()
    fp32 = graph_file(graphs, weights, "fp32")
    fd = os.open(fp32.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)

    def release() -> None:
        for precision in ("fp32", "int8"):
            kept = graph_file(source, weights, precision)
            for path in (kept, failure_file(kept)):
                if path.exists():
                    shutil.copy(path, graphs / path.name)
        fcntl.flock(fd, fcntl.LOCK_UN)

    try:
        yield release
    finally:
        os.close(fd)


def test_a_near_repeat_asked_as_soon_as_ready_is_a_semantic_hit(tmp_path: Path, fake_openai, serve_gateway,
                                                                redis_url: str) -> None:
    fake, up = fake_openai
    earlier = serve_gateway(policy(up.url))  # an entry another process stored before this one starts
    semantic_ready(earlier)
    ask(earlier, "Why is the sky blue?")
    settle(earlier)

    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(policy(up.url) + f"""
redis: {{url: "{redis_url}", timeout_ms: 250}}
server: {{data_dir: "{tmp_path}"}}
""")
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    port = free_port()
    with model_load_held(graphs) as release:
        proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--policy", str(policy_file),
                                 "--port", str(port), "--log-level", "WARNING"], env={**os.environ, CACHE_ENV: str(graphs)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        gw = Url(f"http://127.0.0.1:{port}")
        try:
            wait_ready(gw.url, proc, timeout=120)  # /health: the process listens; the model is still loading
            assert readiness(gw.url) == (503, ["semantic cache model loading"])
            # Answered by the backend meanwhile; its semantic entry waits for the model instead of being dropped.
            completion, headers = ask(gw, "How many legs does a spider have?")
            assert headers["x-cache"] == "MISS"
            release()
            status, seen = 503, []
            give_up = time.monotonic() + 300  # a hang guard (a model that never loads), not a speed check
            while status != 200:
                assert proc.poll() is None, proc.stderr.read().decode()[-3000:] if proc.stderr else ""
                assert time.monotonic() < give_up, seen[-1:]
                status, reasons = readiness(gw.url)
                seen.append(reasons)
            # At once, no settling: both the entry loaded from Redis and the one stored during the load serve.
            completion, headers = ask(gw, "why is the sky blue")
            assert headers["x-cache"] == "HIT-SEMANTIC"
            assert completion.choices[0].message.content == "echo: Why is the sky blue?"
            completion, headers = ask(gw, "how many legs does a spider have")
            assert headers["x-cache"] == "HIT-SEMANTIC"
            assert completion.choices[0].message.content == "echo: How many legs does a spider have?"
            assert all(r and all(x.startswith("semantic cache") for x in r) for r in seen[:-1]), seen
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0


async def test_a_model_that_failed_to_load_is_named_by_ready(redis_url: str) -> None:
    stage, policy_, client = await make_stage(redis_url, no_model)
    try:
        stage.start(True)
        assert stage.readiness() == ["semantic cache model loading"]
        assert not await stage.worker.wait_ready_or_load()
        (reason,) = stage.readiness()
        assert reason.startswith("semantic cache model failed to load") and "model files missing" in reason
    finally:
        await stage.close()
        await client.aclose()


async def test_answers_waiting_for_the_model_are_bounded_and_then_stored(redis_url: str, monkeypatch) -> None:
    gate = threading.Event()

    def gated_model():  # the real model, loading until the test lets it finish
        gate.wait(120)
        return shared_embedder()

    monkeypatch.setattr(stage_module, "MAX_BACKLOG", 2)
    stage, policy_, client = await make_stage(redis_url, gated_model)
    try:
        stage.start(True)
        questions = ["What is a leap year?", "How do magnets work?", "Why do cats purr?"]
        for i, question in enumerate(questions):
            c = ctx(policy_, question, f"r{i}")
            assert await stage.before(c) is None
            await stage.after(c, COMPLETION)
        assert stage.readiness() == ["semantic cache model loading"]
        gate.set()
        await stage.semantic.synced.wait()
        await stage.drain()
        assert stage.readiness() == []
        metrics = stage._stores
        assert metrics.labels("semantic", "stored")._value.get() == 2
        assert metrics.labels("semantic", "dropped")._value.get() == 1
        assert stage.counts[("semantic", "unavailable")] == 3
        c = ctx(policy_, "what is a leap year", "r9")
        assert await stage.before(c) is not None and c.response_headers["X-Cache"] == "HIT-SEMANTIC"
    finally:
        gate.set()
        await stage.close()
        await client.aclose()

