"""Engine RequestOutputs -> OpenAI response dicts and stream chunks (chat and completions).

Forced tool calls (`PreparedRequest.tool_call`) come back as `tool_calls`: a named function's output is
its arguments, streamed as argument deltas behind a first delta with the call's id and name; `required`
output ({"name", "arguments"} or an array of them) is read when the choice ends, then sent as one delta.
A grammar-complete call finishes with "tool_calls"; one cut by max_tokens keeps "length" (a named call's
arguments are then the partial JSON text; a cut array of parallel calls keeps its whole calls; a `required`
output cut before its first call is whole gives that call with its partial arguments, as a named one does).

With `tool_choice: "auto"` the output is free: `<tool_call>{"name", "arguments"}</tool_call>` blocks (the
format the text rendering of tools asks for, and Qwen/Hermes templates' own) naming given tools become
`tool_calls` and the rest stays content. Streamed, text is sent as it comes until a block starts; from there
it is held and read when the choice ends (sent as content if it is not a valid call).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from engine.llm_engine import RequestOutput
    from engine.serving.params import PreparedRequest, ToolCallMode
    from engine.tokenizer import Tokenizer


@dataclass(slots=True)
class _Choice:
    text: list[str] = field(default_factory=list)
    logprobs: list[dict] = field(default_factory=list)  # normalised: {token_id, logprob, top: [(id, lp)]}
    finish_reason: str | None = None
    output_tokens: int = 0
    text_len: int = 0  # characters streamed so far (completions' text_offset)
    call_id: str = ""  # a named tool call's id, once its first delta went out
    held: str = ""  # auto tool choice, streamed: text not sent yet (a possible or begun <tool_call> block)
    holding: bool = False  # a <tool_call> block has begun: hold the rest until the choice ends


TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)


def parse_auto_calls(text: str, names: tuple[str, ...]) -> tuple[str | None, list[dict]] | None:
    """(content outside the blocks or None, calls) when `text` holds only valid <tool_call> blocks naming
    given tools; None when it has none or one that is not a valid call (then it all stays content)."""
    calls = []
    for m in TOOL_CALL_BLOCK.finditer(text):
        try:
            body = json.loads(m.group(1))
        except ValueError:
            return None
        if not isinstance(body, dict) or body.get("name") not in names:
            return None
        calls.append(_call(body["name"], orjson.dumps(body.get("arguments", {})).decode()))
    if not calls:
        return None
    return TOOL_CALL_BLOCK.sub("", text).strip() or None, calls


def _open_prefix_len(text: str) -> int:
    """Length of the longest tail of `text` that could begin "<tool_call>" (held back while streaming)."""
    for k in range(min(len(TOOL_CALL_OPEN) - 1, len(text)), 0, -1):
        if TOOL_CALL_OPEN.startswith(text[-k:]):
            return k
    return 0


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def parse_tool_calls(mode: ToolCallMode, text: str) -> list[dict] | None:
    """The OpenAI tool_calls in a forced call's output (cut short: its whole calls, else the first one with its
    partial arguments), or None when not even the first call's name is known."""
    if mode.kind == "named":
        return [_call(mode.name or "", text)]
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        parsed = _complete_items(text) if mode.parallel else None
        if not parsed:
            partial = _partial_call(text, mode.names)
            return None if partial is None else [partial]
    items = parsed if isinstance(parsed, list) else [parsed]
    if not items or not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in items):
        return None
    return [_call(c["name"], orjson.dumps(c.get("arguments", {})).decode()) for c in items]


# The head of a `required` output's first call as its grammar writes it ({"name": ..., "arguments": ...}, in
# that order), cut anywhere: the name (maybe cut), whether it closed, and where the arguments begin.
_CALL_HEAD = re.compile(r'\s*\[?\s*\{\s*"name"\s*:\s*"(?P<name>[^"\\]*)(?P<closed>")?(?P<args>\s*,\s*"arguments"\s*:\s*)?')


def _partial_call(text: str, names: tuple[str, ...]) -> dict | None:
    """The first call of a `required` output cut before it was whole, with its arguments' JSON so far; named by
    the one tool its name (or the part of it written) fits, else None."""
    m = _CALL_HEAD.match(text)
    written, closed = (m["name"], bool(m["closed"])) if m else ("", False)
    fits = [n for n in names if n == written or not closed and n.startswith(written)]
    if len(fits) != 1:
        return None
    arguments = text[m.end():] if m and m["args"] else ""
    return _call(fits[0], arguments)


def _complete_items(text: str) -> list:
    """The whole items at the front of a JSON array cut short (max_tokens ran out mid-array)."""
    decoder = json.JSONDecoder()
    items: list = []
    pos = text.find("[") + 1
    if pos == 0:
        return items
    while True:
        while pos < len(text) and text[pos] in " ,\n":
            pos += 1
        try:
            item, pos = decoder.raw_decode(text, pos)
        except ValueError:
            return items
        items.append(item)


def _call(name: str, arguments: str, call_id: str = "") -> dict:
    return {"id": call_id or new_call_id(), "type": "function", "function": {"name": name, "arguments": arguments}}


def normalise_logprobs(entries: Iterable[Any] | None, token_ids: list[int]) -> list[dict]:
    """The engine's per-token logprob records as {token_id, logprob, top: [(id, lp), ...]}.

    Accepts either {"token_id", "logprob", "top_logprobs"} records or vLLM-style {token_id: logprob} maps
    (the sampled token is then `token_ids[i]`).
    """
    out: list[dict] = []
    for i, entry in enumerate(entries or ()):
        if isinstance(entry, dict) and "logprob" in entry:
            top_raw = entry.get("top_logprobs") or ()
            top = list(top_raw.items()) if isinstance(top_raw, dict) else [tuple(t) for t in top_raw]
            out.append({"token_id": int(entry["token_id"]), "logprob": float(entry["logprob"]),
                        "top": [(int(t), float(lp)) for t, lp in top]})
        else:
            tid = token_ids[i]
            ranked = sorted(((int(t), float(lp)) for t, lp in dict(entry).items()), key=lambda x: -x[1])
            lp = dict(ranked).get(tid, float("-inf"))
            out.append({"token_id": tid, "logprob": lp, "top": ranked})
    return out


def _tool_finish(finish: str | None) -> str | None:
    return "tool_calls" if finish == "stop" else finish


class ResponseBuilder:
    """Accumulates a request's outputs; makes the stream chunks as they come and the final response."""

    def __init__(self, prepared: PreparedRequest, tokenizer: Tokenizer, response_id: str, top_logprobs: int) -> None:
        self.prepared = prepared
        self.tokenizer = tokenizer
        self.id = response_id
        self.created = int(time.time())
        self.n = max(1, int(prepared.params.n))
        self.top_logprobs = top_logprobs
        self.choices: dict[int, _Choice] = {
            i: _Choice() for i in range(self.n * len(prepared.prompts))
        }
        self.prompt_tokens: dict[int, int] = {i: len(p) for i, p in enumerate(prepared.prompts)}
        self.cached_tokens: dict[int, int] = {}
        self._object = "chat.completion.chunk" if prepared.kind == "chat" else "text_completion"
        self._echo_pending = set(self.choices) if prepared.echo_texts else set()

    # --- accumulation -----------------------------------------------------------------------------------

    def add(self, prompt_index: int, out: RequestOutput) -> dict | None:
        """Record one output; returns the stream chunk it makes (None when it carries nothing)."""
        index = prompt_index * self.n + out.index
        choice = self.choices[index]
        self.prompt_tokens[prompt_index] = out.num_prompt_tokens
        self.cached_tokens[prompt_index] = max(self.cached_tokens.get(prompt_index, 0), out.num_cached_tokens)
        choice.output_tokens = out.num_output_tokens
        text = out.new_text or ""
        if index in self._echo_pending:
            self._echo_pending.discard(index)
            text = self.prepared.echo_texts[prompt_index] + text  # type: ignore[index]
        logprobs = normalise_logprobs(out.logprobs, out.new_token_ids) if self.prepared.logprobs else []
        offset = choice.text_len + (len(text) - len(out.new_text or ""))  # logprob tokens follow any echo
        choice.text.append(text)
        choice.text_len += len(text)
        choice.logprobs.extend(logprobs)
        finish = out.finish_reason if out.finished else None
        if finish is not None:
            choice.finish_reason = finish
        if self.prepared.tool_call is not None:
            return self._tool_chunk(index, choice, text, logprobs, finish)
        if not text and not logprobs and finish is None:
            return None
        return self._chunk(index, text, logprobs, finish, offset)

    def _auto_chunk(self, index: int, choice: _Choice, text: str, lp: dict | None, finish: str | None,
                    names: tuple[str, ...]) -> dict | None:
        held = choice.held + text
        send = ""
        if not choice.holding:
            start = held.find(TOOL_CALL_OPEN)
            if start >= 0:
                send, held, choice.holding = held[:start], held[start:], True
            else:
                keep = _open_prefix_len(held)
                send, held = held[: len(held) - keep], held[len(held) - keep:]
        choice.held = held
        delta: dict[str, Any] = {"content": send} if send else {}
        if finish is not None:
            parsed = parse_auto_calls(held, names) if choice.holding else None
            if parsed is None:
                delta = {"content": send + held} if send + held else {}
            else:
                after = parsed[0] or ""  # text between or after the blocks
                delta = {"content": send + after} if send + after else {}
                delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(parsed[1])]
                finish = _tool_finish(finish)
        if not delta and finish is None and lp is None:
            return None
        return self._envelope([{"index": index, "delta": delta, "logprobs": lp, "finish_reason": finish}])

    def _tool_chunk(self, index: int, choice: _Choice, text: str, logprobs: list[dict],
                    finish: str | None) -> dict | None:
        mode = self.prepared.tool_call
        assert mode is not None
        lp = {"content": self._chat_logprobs(logprobs)} if self.prepared.logprobs else None
        if mode.kind == "auto":
            return self._auto_chunk(index, choice, text, lp, finish, mode.names)
        if mode.kind == "named":
            if not text and finish is None and not logprobs:
                return None
            call: dict[str, Any] = {"index": 0, "function": {"arguments": text}}
            if not choice.call_id:  # the first delta of the call names it
                choice.call_id = new_call_id()
                call = {"index": 0, "id": choice.call_id, "type": "function",
                        "function": {"name": mode.name, "arguments": text}}
            delta = {"tool_calls": [call]} if text or call.get("id") else {}
            return self._envelope([{"index": index, "delta": delta, "logprobs": lp,
                                    "finish_reason": _tool_finish(finish)}])
        if finish is None:  # `required`: the call's name is only known once the JSON is whole
            return self._envelope([{"index": index, "delta": {}, "logprobs": lp, "finish_reason": None}]) \
                if logprobs else None
        full = "".join(choice.text)
        calls = parse_tool_calls(mode, full)
        # Cut before even a name: nothing to say (the grammar's JSON is not the client's content).
        delta = {"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]} if calls is not None else {}
        return self._envelope([{"index": index, "delta": delta, "logprobs": lp, "finish_reason": _tool_finish(finish)}])

    # --- stream chunks ----------------------------------------------------------------------------------

    def _envelope(self, choices: list[dict]) -> dict:
        chunk: dict[str, Any] = {"id": self.id, "object": self._object, "created": self.created,
                                 "model": self.prepared.model, "choices": choices}
        if self.prepared.include_usage:
            chunk["usage"] = None
        return chunk

    def role_chunks(self) -> list[dict]:
        """Chat streams open each choice with the assistant role."""
        if self.prepared.kind != "chat":
            return []
        mode = self.prepared.tool_call
        content = None if mode is not None and mode.kind != "auto" else ""
        return [self._envelope([{"index": i, "delta": {"role": "assistant", "content": content}, "logprobs": None,
                                 "finish_reason": None}]) for i in self.choices]

    def _chunk(self, index: int, text: str, logprobs: list[dict], finish: str | None, offset: int) -> dict:
        if self.prepared.kind == "chat":
            delta = {"content": text} if text else {}
            lp = {"content": self._chat_logprobs(logprobs)} if self.prepared.logprobs else None
            choice = {"index": index, "delta": delta, "logprobs": lp, "finish_reason": finish}
        else:
            lp = self._completion_logprobs(logprobs, offset) if self.prepared.logprobs else None
            choice = {"index": index, "text": text, "logprobs": lp, "finish_reason": finish}
        return self._envelope([choice])

    def usage(self) -> dict:
        prompt = sum(self.prompt_tokens.values())
        completion = sum(c.output_tokens for c in self.choices.values())
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": sum(self.cached_tokens.values())}}

    def usage_chunk(self) -> dict:
        return {"id": self.id, "object": self._object, "created": self.created, "model": self.prepared.model,
                "choices": [], "usage": self.usage()}

    # --- final response ---------------------------------------------------------------------------------

    def response(self) -> dict:
        choices = []
        for index, c in sorted(self.choices.items()):
            text = "".join(c.text)
            if self.prepared.kind == "chat":
                lp = {"content": self._chat_logprobs(c.logprobs)} if self.prepared.logprobs else None
                message: dict[str, Any] = {"role": "assistant", "content": text}
                finish = c.finish_reason
                mode = self.prepared.tool_call
                if mode is not None and mode.kind == "auto":
                    parsed = parse_auto_calls(text, mode.names)
                    if parsed is not None:
                        message = {"role": "assistant", "content": parsed[0], "tool_calls": parsed[1]}
                        finish = _tool_finish(finish)
                elif mode is not None:
                    calls = parse_tool_calls(mode, text)
                    message = {"role": "assistant", "content": None}  # never the grammar's JSON as content
                    if calls is not None:
                        message["tool_calls"] = calls
                        finish = _tool_finish(finish)
                choices.append({"index": index, "message": message, "logprobs": lp, "finish_reason": finish})
            else:
                echo = self.prepared.echo_texts[index // self.n] if self.prepared.echo_texts else ""
                lp = self._completion_logprobs(c.logprobs, len(echo)) if self.prepared.logprobs else None
                choices.append({"index": index, "text": text, "logprobs": lp, "finish_reason": c.finish_reason})
        return {"id": self.id, "object": "chat.completion" if self.prepared.kind == "chat" else "text_completion",
                "created": self.created, "model": self.prepared.model, "choices": choices, "usage": self.usage()}

    # --- logprob formats --------------------------------------------------------------------------------

    def _token_str(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id], skip_special_tokens=False)

    def _chat_logprobs(self, entries: list[dict]) -> list[dict]:
        out = []
        for e in entries:
            token = self._token_str(e["token_id"])
            top = [{"token": self._token_str(t), "logprob": lp, "bytes": list(self._token_str(t).encode())}
                   for t, lp in e["top"][: self.top_logprobs]]
            out.append({"token": token, "logprob": e["logprob"], "bytes": list(token.encode()), "top_logprobs": top})
        return out

    def _completion_logprobs(self, entries: list[dict], offset: int) -> dict:
        tokens, token_lps, tops, offsets = [], [], [], []
        for e in entries:
            token = self._token_str(e["token_id"])
            tokens.append(token)
            token_lps.append(e["logprob"])
            tops.append({self._token_str(t): lp for t, lp in e["top"][: self.top_logprobs]})
            offsets.append(offset)
            offset += len(token)
        return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}
