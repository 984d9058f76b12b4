"""The fake OpenAI server speaks the wire format the official `openai` SDK expects, knobs included."""

from __future__ import annotations

import openai
import pytest

from tests.backends.conftest import API_KEY
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import ServerThread


@pytest.fixture
def client(openai_server: tuple[FakeOpenAI, ServerThread], fake_openai: FakeOpenAI) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=openai_server[1].url + "/v1", api_key=API_KEY, max_retries=0)


async def test_sdk_chat_and_stream(client: openai.AsyncOpenAI) -> None:
    answer = await client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "echo: hi" and answer.usage.total_tokens == 3
    stream = await client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}],
                                                  stream=True, stream_options={"include_usage": True})
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "echo: hi"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2


async def test_sdk_stream_tool_calls(client: openai.AsyncOpenAI) -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    stream = await client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "q"}],
                                                  tools=tools, stream=True)
    args = ""
    async for chunk in stream:
        for call in chunk.choices[0].delta.tool_calls or []:
            args += call.function.arguments or ""
    assert args == '{"text":"q"}'


async def test_sdk_embeddings_base64_and_models(client: openai.AsyncOpenAI, fake_openai: FakeOpenAI) -> None:
    emb = await client.embeddings.create(model="e", input="hello")  # the SDK asks for base64 and decodes it
    assert fake_openai.last.body["encoding_format"] == "base64"
    assert emb.data[0].embedding == pytest.approx(fake_openai.embed("hello"), rel=1e-6)
    assert [m.id async for m in client.models.list()] == ["fake-model", "fake-model-2"]


async def test_sdk_completions(client: openai.AsyncOpenAI) -> None:
    answer = await client.completions.create(model="fake-model", prompt="x y")
    assert answer.choices[0].text == "echo: x y"


@pytest.mark.parametrize(("status", "error"), [(400, openai.BadRequestError), (429, openai.RateLimitError),
                                               (503, openai.InternalServerError)])
async def test_sdk_sees_scripted_failures(client: openai.AsyncOpenAI, fake_openai: FakeOpenAI, status: int,
                                          error: type[Exception]) -> None:
    fake_openai.fail_next(1, status)
    with pytest.raises(error):
        await client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}])
    assert (await client.chat.completions.create(model="fake-model", messages=[
        {"role": "user", "content": "hi"}])).choices[0].message.content == "echo: hi"


async def test_sdk_wrong_key_is_401(openai_server: tuple[FakeOpenAI, ServerThread]) -> None:
    client = openai.AsyncOpenAI(base_url=openai_server[1].url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        await client.models.list()


async def test_missing_messages_is_400(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        await client.chat.completions.create(model="fake-model", messages=[])
    assert "messages" in str(e.value)
