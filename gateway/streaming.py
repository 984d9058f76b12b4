"""SSE framing, stream assembly (chunks -> one chat.completion) and replay (one completion -> chunks)."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import orjson

from gateway.deadline import retrieve

DONE_EVENT = b"data: [DONE]\n\n"


def sse_event(chunk: dict) -> bytes:
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


class _ChoiceState:
    __slots__ = ("index", "role", "content", "refusal", "tool_calls", "finish_reason", "logprobs", "text",
                 "reasoning", "thinking_blocks")

    def __init__(self, index: int) -> None:
        self.index = index
        self.role = "assistant"
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.text: list[str] = []  # legacy completions
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.logprobs: list[dict] | None = None
        # Reasoning models' extras (vLLM/DeepSeek `reasoning_content`, LiteLLM's signed `thinking_blocks` from
        # Anthropic): kept, so a cached or assembled answer still has them and a client can send them back.
        self.reasoning: list[str] = []
        self.thinking_blocks: list[Any] = []


class StreamAssembler:
    """Folds `chat.completion.chunk` (or legacy `text_completion`) chunks into the equivalent complete body.

    `complete` is true only once the handler called `finish()` (the upstream sent its terminal event) and
    every choice seen carries a finish_reason: a cut stream is never complete, so it is never cached.
    """

    def __init__(self) -> None:
        self._choices: dict[int, _ChoiceState] = {}
        self._meta: dict[str, Any] = {}
        self._usage: dict | None = None
        self._finished = False
        self.chunks = 0

    def add(self, chunk: dict) -> None:
        self.chunks += 1
        if not self._meta:
            self._meta = {k: chunk.get(k) for k in ("id", "created", "model", "system_fingerprint", "object")}
        usage = chunk.get("usage")
        if usage:
            self._usage = usage
        for ch in chunk.get("choices") or ():
            idx = ch.get("index", 0)
            st = self._choices.get(idx)
            if st is None:
                st = self._choices[idx] = _ChoiceState(idx)
            delta = ch.get("delta")
            if delta is not None:
                self._add_delta(st, delta)
            elif "text" in ch:
                st.text.append(ch["text"] or "")
            if ch.get("logprobs"):
                lp = ch["logprobs"]
                if st.logprobs is None:
                    st.logprobs = []
                st.logprobs.append(lp)
            if ch.get("finish_reason"):
                st.finish_reason = ch["finish_reason"]

    @staticmethod
    def _add_delta(st: _ChoiceState, delta: dict) -> None:
        if delta.get("role"):
            st.role = delta["role"]
        if delta.get("content"):
            st.content.append(delta["content"])
        if delta.get("refusal"):
            st.refusal.append(delta["refusal"])
        reasoning = delta.get("reasoning_content")
        if reasoning and isinstance(reasoning, str):
            st.reasoning.append(reasoning)
        blocks = delta.get("thinking_blocks")
        if blocks and isinstance(blocks, list):  # each delta carries whole blocks (signature included)
            st.thinking_blocks.extend(blocks)
        for tc in delta.get("tool_calls") or ():
            slot = st.tool_calls.setdefault(
                tc.get("index", 0), {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            )
            if tc.get("id"):
                slot["id"] = tc["id"]
            if tc.get("type"):
                slot["type"] = tc["type"]
            fn = tc.get("function") or {}
            if fn.get("name"):
                slot["function"]["name"] += fn["name"]
            if fn.get("arguments"):
                slot["function"]["arguments"] += fn["arguments"]

    def finish(self) -> None:
        self._finished = True

    @property
    def complete(self) -> bool:
        return self._finished and bool(self._choices) and all(c.finish_reason for c in self._choices.values())

    def result(self) -> dict:
        legacy = self._meta.get("object") == "text_completion"
        choices = []
        for idx in sorted(self._choices):
            st = self._choices[idx]
            lp = _merge_logprobs(st.logprobs)
            if legacy:
                choices.append({"index": idx, "text": "".join(st.text), "logprobs": lp, "finish_reason": st.finish_reason})
                continue
            message: dict[str, Any] = {"role": st.role, "content": "".join(st.content) if st.content else None}
            if st.refusal:
                message["refusal"] = "".join(st.refusal)
            if st.reasoning:
                message["reasoning_content"] = "".join(st.reasoning)
            if st.thinking_blocks:
                message["thinking_blocks"] = st.thinking_blocks
            if st.tool_calls:
                message["tool_calls"] = [st.tool_calls[i] for i in sorted(st.tool_calls)]
            choices.append({"index": idx, "message": message, "logprobs": lp, "finish_reason": st.finish_reason})
        body: dict[str, Any] = {
            "id": self._meta.get("id"),
            "object": "text_completion" if legacy else "chat.completion",
            "created": self._meta.get("created"),
            "model": self._meta.get("model"),
            "choices": choices,
        }
        if self._meta.get("system_fingerprint"):
            body["system_fingerprint"] = self._meta["system_fingerprint"]
        if self._usage is not None:
            body["usage"] = self._usage
        return body


def _merge_logprobs(parts: list[dict] | None) -> dict | None:
    if not parts:
        return None
    merged: dict[str, list] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, list):
                merged.setdefault(key, []).extend(value)
    return merged


def completion_to_chunks(completion: dict, include_usage: bool) -> list[dict]:
    """A complete chat.completion (or legacy text_completion) replayed as the chunks a live stream would have
    carried: one with the whole content, one with the finish reason per choice, then usage when asked."""
    legacy = completion.get("object") == "text_completion"
    base = {
        "id": completion.get("id"),
        "object": "text_completion" if legacy else "chat.completion.chunk",
        "created": completion.get("created"),
        "model": completion.get("model"),
    }
    if completion.get("system_fingerprint"):
        base["system_fingerprint"] = completion["system_fingerprint"]
    chunks: list[dict] = []
    for choice in completion.get("choices") or ():
        idx = choice.get("index", 0)
        if legacy:  # OpenAI's legacy stream: `text` pieces in text_completion objects, no delta
            chunks.append({**base, "choices": [{"index": idx, "text": choice.get("text") or "",
                                                "logprobs": choice.get("logprobs"), "finish_reason": None}]})
            chunks.append({**base, "choices": [{"index": idx, "text": "", "logprobs": None,
                                                "finish_reason": choice.get("finish_reason")}]})
            continue
        msg = choice.get("message") or {}
        delta: dict[str, Any] = {"role": msg.get("role", "assistant"), "content": msg.get("content") or ""}
        if msg.get("refusal"):
            delta["refusal"] = msg["refusal"]
        for extra in ("reasoning_content", "thinking_blocks"):  # replayed as one delta, like the content
            if msg.get(extra):
                delta[extra] = msg[extra]
        if msg.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **tc} for i, tc in enumerate(msg["tool_calls"])]
        chunks.append({**base, "choices": [{"index": idx, "delta": delta, "logprobs": choice.get("logprobs"),
                                            "finish_reason": None}]})
        chunks.append({**base, "choices": [{"index": idx, "delta": {}, "logprobs": None,
                                            "finish_reason": choice.get("finish_reason")}]})
    if include_usage and completion.get("usage") is not None:
        chunks.append({**base, "choices": [], "usage": completion["usage"]})
    return chunks


class Writable(Protocol):
    """An open streamed response: aiohttp's StreamResponse, or the pipeline's Exchange on either server."""

    async def write(self, data: bytes) -> None: ...

    async def write_eof(self, data: bytes = b"") -> None: ...


class CoalescingWriter:
    """Sends SSE events in as few socket writes as possible: events that arrive within one event-loop tick
    (usually all those parsed from one upstream read) leave together, in order, and no later than that tick.

    A write whose drain is pending (a slow client) is awaited before more is queued, so memory stays bounded.
    """

    def __init__(self, response: Writable) -> None:
        self.response = response
        self.parts: list[bytes] = []
        self.loop = asyncio.get_running_loop()
        self._last: asyncio.Future | None = None

    async def add(self, data: bytes) -> None:
        last = self._last
        if last is not None:
            await last  # pending: wait for the drain; failed: re-raises it (the client is gone)
        self.parts.append(data)
        if len(self.parts) == 1:
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        if not self.parts:
            return
        data = b"".join(self.parts)
        self.parts.clear()
        # response.write puts the bytes on the transport synchronously and only suspends to drain (a slow
        # client), so it is stepped here by hand: a Task per flush only when it does suspend.
        coro = self.response.write(data)
        try:
            waiting = coro.send(None)
        except StopIteration:
            self._last = None
            return
        except Exception as e:  # the client is gone: the next add() raises it
            coro.close()
            failed = self.loop.create_future()
            failed.set_exception(e)
            failed.add_done_callback(retrieve)
            self._last = failed
            return
        if waiting is not None:
            waiting._asyncio_future_blocking = False  # taken over, as a Task would, so it can be awaited again
        self._last = asyncio.ensure_future(_resume(coro, waiting))
        # A failed write means the client is gone; the handler learns it from its own next write or cancellation.
        self._last.add_done_callback(retrieve)

    async def close(self, tail: bytes = b"") -> None:
        """Flush everything (plus `tail`), end the response (one write: the last bytes and the chunked
        terminator together) and wait until it is written."""
        if self._last is not None:
            await self._last
        data = b"".join(self.parts) + tail
        self.parts.clear()
        await self.response.write_eof(data)


async def _resume(coro: Any, waiting: Any) -> None:
    """Run a coroutine that `_flush` stepped once and that suspended on `waiting` (a future) to its end."""
    try:
        while True:
            try:
                if waiting is None:  # a bare yield: just let the loop turn
                    await asyncio.sleep(0)
                else:
                    await waiting
            except asyncio.CancelledError:
                if waiting is None or not waiting.cancelled():
                    raise  # this task itself was cancelled
            except Exception:  # the coroutine reads the outcome itself when resumed
                pass
            waiting = coro.send(None)
    except StopIteration:
        pass
    finally:
        coro.close()
