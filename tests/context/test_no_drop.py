"""The no-drop rule on every backend type, property-based: over random conversations, windows and output limits,
the request the upstream receives carries the client's system prompt and final user turn verbatim, or the client
gets a 400 context_length_exceeded and the upstream nothing. (The engine backend is reached through `urls:`
pointing at a fake OpenAI-compatible replica, so its own tokenizer and template do the counting.)"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import orjson
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.context.test_stage import client
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import ServerThread

WORDS = ["alpha", "beta", "gamma", "令牌", "预算", "🎉", "def", "x=1;", "The", "quick.", "fox!", "\n", "3.14", "must",
         "never", "you may"]
MODELS = {"openai": ["gpt-4o", "mystery-model"], "anthropic": ["claude-opus-5-5", "claude-sonnet-4-5"],
          "engine": ["smollm2-135m"]}
WINDOWS = [None, 300, 1200, 5000]


def text(draw, low: int, high: int) -> str:
    return " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=low, max_size=high)))


@st.composite
def conversations(draw):
    nonce = draw(st.integers(0, 10**9))
    messages: list[dict] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": f"[system {nonce}] " + text(draw, 0, 400)})
    for i in range(draw(st.integers(0, 8))):
        messages.append({"role": "user", "content": text(draw, 1, 80)})
        if draw(st.integers(0, 3)) == 0:
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{i}", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}]})
            messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": text(draw, 1, 60)})
        messages.append({"role": "assistant", "content": text(draw, 1, 80)})
    messages.append({"role": "user", "content": f"[final {nonce}] " + text(draw, 0, 200)})
    docs = [{"id": f"d{k}", "content": text(draw, 1, 120), "score": draw(st.floats(0, 1)),
             "static": draw(st.booleans())} for k in range(draw(st.integers(0, 3)))]
    max_tokens = draw(st.one_of(st.none(), st.integers(1, 2000)))
    window = draw(st.sampled_from(WINDOWS))
    return messages, docs, max_tokens, window, draw(st.integers(0, 10))


def policy(kind: str, url: str, window: int | None) -> str:
    backend = {
        "openai": f'{{type: openai, base_url: "{url}/v1", api_key: k}}',
        "anthropic": f'{{type: anthropic, base_url: "{url}", api_key: k}}',
        "engine": f'{{type: engine, model: smollm2-135m, urls: ["{url}"]}}',
    }[kind]
    budget = f"{{context_window: {window}}}" if window else "{strategy: balanced}"
    return f"""
backends:
  up: {backend}
routes:
  - match: {{model: "*"}}
    backends: [up]
    budget: {budget}
    compression: {{conversation: {{keep_recent: 2}}}}
    ordering: {{enabled: true}}
"""


def anthropic_texts(body: dict) -> tuple[str, list[str]]:
    """(the system prompt's first block text, every text the turns carry) as Anthropic received them."""
    system = body.get("system")
    first = system if isinstance(system, str) else (system[0]["text"] if system else "")
    texts = [m["content"] if isinstance(m["content"], str) else b.get("text") for m in body["messages"]
             for b in (m["content"] if isinstance(m["content"], list) else [{}])]
    return first, [t for t in texts if t]


@pytest.fixture
def fake_replica() -> Iterator[tuple[FakeOpenAI, ServerThread]]:
    """A fake OpenAI-compatible server that also answers an engine replica's /health probe."""
    fake = FakeOpenAI()

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    fake.app.router.add_get("/health", health)
    with ServerThread(lambda: fake.app) as srv:
        yield fake, srv


@pytest.mark.parametrize("kind", ["openai", "anthropic", "engine"])
def test_system_prompt_and_final_user_turn_reach_the_upstream_or_the_client_gets_a_400(
        kind, fake_replica, fake_anthropic, serve_gateway) -> None:
    fake, up = fake_anthropic if kind == "anthropic" else fake_replica
    gateways: dict[int | None, object] = {}

    @settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                     HealthCheck.too_slow])
    @given(conversations())
    def check(case) -> None:
        messages, docs, max_tokens, window, pick = case
        if window not in gateways:
            gateways[window] = serve_gateway(policy(kind, up.url, window))
        model = MODELS[kind][pick % len(MODELS[kind])]
        fake.requests.clear()
        extra = {"max_tokens": max_tokens} if max_tokens else {}
        try:
            client(gateways[window]).chat.completions.create(model=model, messages=messages,
                                                             extra_body={"documents": docs}, **extra)
        except openai.BadRequestError as e:
            assert e.body["code"] == "context_length_exceeded", e.body
            assert not fake.requests
            return
        body = fake.last.body
        system = messages[0] if messages[0]["role"] == "system" else None
        final = messages[-1]
        if kind == "anthropic":
            first, texts = anthropic_texts(body)
            assert first == (system["content"] if system else first)
            assert not system or first  # present, not dropped
            assert final["content"] in texts
        else:
            sent = body["messages"]
            if system is not None:
                assert sent[0] == system
            assert sent[-1] == final
        assert orjson.dumps(body).count(b"[final ") == 1  # the final turn exactly once

    check()
