"""Helpers of the cache's end-to-end tests: a policy with two tenants, SDK clients, the cache stage."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai

from gateway.appkeys import GATEWAY
from gateway.cache.stage import CacheStage
from tests.helpers import ServerThread

# The static path (threshold and verifier): the fake upstream echoes each question, so learning would mark
# every look-alike wrong in the background, racing the next ask. Learning has its own tests (test_learning.py).
SEMANTIC = "{exact: {ttl: 60}, semantic: {threshold: 0.9, ttl: 60, max_wrong: null}}"


def policy(upstream: str, cache: str = SEMANTIC, exact_only: str = "{exact: {ttl: 60}}") -> str:
    return f"""
tenants:
  - {{name: team-a, api_keys: [key-a]}}
  - {{name: team-b, api_keys: [key-b]}}
backends:
  up: {{type: openai, base_url: "{upstream}/v1", api_key: sk-up}}
routes:
  - match: {{model: fake-model}}
    backends: [up]
    cache: {cache}
  - match: {{model: fake-model-2}}
    backends: [up]
    cache: {exact_only}
"""


def client(srv: ServerThread, key: str = "key-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=key, max_retries=0)


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def ask(srv: ServerThread, text: str | list, key: str = "key-a", model: str = "fake-model",
        headers: dict[str, str] | None = None, **kw: Any):
    """A deterministic (temperature 0) non-streaming chat; returns (completion, headers)."""
    messages = user(text) if isinstance(text, str) else text
    kw.setdefault("temperature", 0)
    raw = client(srv, key).chat.completions.with_raw_response.create(
        model=model, messages=messages, extra_headers=headers or {}, **kw)
    return raw.parse(), raw.headers


def store(srv: ServerThread, text: str | list, key: str = "key-a", **kw: Any) -> None:
    """Ask once (a miss that the backend answers) and wait until its entries are stored."""
    ask(srv, text, key=key, **kw)
    settle(srv)


def stage(srv: ServerThread) -> CacheStage:
    assert srv.app is not None
    return srv.app[GATEWAY].cache


def settle(srv: ServerThread) -> None:
    """Wait for the background semantic stores of this gateway."""
    srv.call(stage(srv).drain(), timeout=120)


def semantic_ready(srv: ServerThread) -> None:
    """Wait until the model is loaded and the shared entries are loaded and followed."""
    srv.call(stage(srv).semantic.synced.wait(), timeout=180)


def admin(srv: ServerThread, method: str, path: str, key: str = "admin-key") -> httpx.Response:
    return httpx.request(method, srv.url + path, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def until(predicate, deadline_s: float = 30.0, every_s: float = 0.1):
    """Poll until predicate() is truthy (returns it) or the deadline passes (returns the last value)."""
    end = time.monotonic() + deadline_s
    value = predicate()
    while not value and time.monotonic() < end:
        time.sleep(every_s)
        value = predicate()
    return value
