"""OpenAI chat requests -> Anthropic Messages requests, and Anthropic answers -> OpenAI chat completions.

Prompt caching: `cache_control` on OpenAI content parts, on a whole message (it lands on that message's last
block) and on tools (top level, LiteLLM's convention, or inside `function`) is carried to the matching
Anthropic block exactly as given. Sampling parameters Anthropic lacks (seed, penalties, logit_bias) are
dropped; what would change the answer's shape (n > 1, logprobs, response_format json) is refused with a 400.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from gateway.backends.upstream import openai_error_envelope
from gateway.errors import error_body

STOP_REASONS = {
    "end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop", "max_tokens": "length",
    "model_context_window_exceeded": "length", "tool_use": "tool_calls", "refusal": "content_filter",
}
IMAGE_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}
DROPPED = {"seed", "frequency_penalty", "presence_penalty", "logit_bias", "service_tier", "store", "metadata",
           "prediction", "top_logprobs", "reasoning_effort", "modalities", "audio", "web_search_options"}


class TranslationError(Exception):
    """The OpenAI request cannot be said in the Messages API; answered as a 400."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


def to_anthropic(body: dict, model: str | None, default_max_tokens: int) -> dict:
    """The Messages API body for an OpenAI chat body (without `stream`; the caller sets it)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise TranslationError("'messages' must be an array", "messages")
    system: list[dict] = []
    out_messages: list[dict] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise TranslationError(f"messages[{i}] must be an object", f"messages[{i}]")
        role = msg.get("role")
        if role in ("system", "developer"):
            system.extend(_with_message_cache(_text_blocks(msg.get("content"), f"messages[{i}].content"), msg))
        elif role == "user":
            _append(out_messages, "user", _with_message_cache(_user_blocks(msg.get("content"), i), msg))
        elif role == "assistant":
            _append(out_messages, "assistant", _with_message_cache(_assistant_blocks(msg, i), msg))
        elif role == "tool":
            _append(out_messages, "user", _with_message_cache([_tool_result(msg, i)], msg))
        else:
            raise TranslationError(f"role {role!r} is not supported by the anthropic backend",
                                   f"messages[{i}].role")
    out: dict[str, Any] = {"model": model or body.get("model"), "max_tokens": _max_tokens(body, default_max_tokens),
                           "messages": [_compact(m) for m in out_messages]}
    if system:
        plain = len(system) == 1 and "cache_control" not in system[0]
        out["system"] = system[0]["text"] if plain else system
    _sampling(body, out)
    _tools(body, out)
    _refuse_unsupported(body)
    return out


def _append(messages: list[dict], role: str, blocks: list[dict]) -> None:
    """Consecutive same-role messages merge into one (Anthropic alternates user/assistant turns)."""
    if not blocks:
        return
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": blocks})


def _compact(message: dict) -> dict:
    blocks = message["content"]
    if len(blocks) == 1 and blocks[0]["type"] == "text" and "cache_control" not in blocks[0]:
        return {"role": message["role"], "content": blocks[0]["text"]}
    return message


def _with_message_cache(blocks: list[dict], msg: dict) -> list[dict]:
    cache_control = msg.get("cache_control")
    if cache_control is not None and blocks:
        blocks[-1]["cache_control"] = cache_control
    return blocks


def _text_block(text: str, part: dict | None = None) -> dict:
    block: dict[str, Any] = {"type": "text", "text": text}
    if part is not None and part.get("cache_control") is not None:
        block["cache_control"] = part["cache_control"]
    return block


def _text_blocks(content: object, param: str) -> list[dict]:
    if content is None:
        return []
    if isinstance(content, str):
        return [_text_block(content)] if content else []
    if not isinstance(content, list):
        raise TranslationError(f"{param} must be a string or an array of parts", param)
    blocks = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in ("text", "refusal"):
            raise TranslationError(f"{param}[{j}] must be a text part here", f"{param}[{j}]")
        text = part.get("text") if part["type"] == "text" else part.get("refusal")
        if not isinstance(text, str):
            raise TranslationError(f"{param}[{j}] has no text", f"{param}[{j}]")
        if text:
            blocks.append(_text_block(text, part))
    return blocks


def _user_blocks(content: object, i: int) -> list[dict]:
    param = f"messages[{i}].content"
    if not isinstance(content, list):
        return _text_blocks(content, param)
    blocks = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            blocks.extend(_text_blocks([part], param))
        elif kind == "image_url":
            blocks.append(_image_block(part, f"{param}[{j}]"))
        elif kind == "file":
            blocks.append(_document_block(part, f"{param}[{j}]"))
        else:
            raise TranslationError(f"content part type {kind!r} is not supported by the anthropic backend",
                                   f"{param}[{j}]")
    return blocks


def _data_url(url: str, param: str) -> tuple[str, str]:
    header, sep, data = url.partition(",")
    if not sep or not header.endswith(";base64"):
        raise TranslationError("data URLs must be base64 encoded (data:<type>;base64,...)", param)
    return header[len("data:"): -len(";base64")], data


def _image_block(part: dict, param: str) -> dict:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str) or not url:
        raise TranslationError("image_url.url must be a non-empty string", param)
    if url.startswith("data:"):
        media_type, data = _data_url(url, param)
        if media_type not in IMAGE_TYPES:
            raise TranslationError(f"image type {media_type!r} is not supported by the anthropic backend "
                                   f"(jpeg, png, gif, webp)", param)
        source: dict[str, str] = {"type": "base64", "media_type": media_type, "data": data}
    elif url.startswith(("http://", "https://")):
        source = {"type": "url", "url": url}
    else:
        raise TranslationError("image_url.url must be an http(s) or data: URL", param)
    block: dict[str, Any] = {"type": "image", "source": source}
    if part.get("cache_control") is not None:
        block["cache_control"] = part["cache_control"]
    return block


def _document_block(part: dict, param: str) -> dict:
    file = part.get("file") if isinstance(part.get("file"), dict) else {}
    data_url = file.get("file_data")
    if not isinstance(data_url, str) or not data_url.startswith("data:"):
        raise TranslationError("file parts need file_data as a base64 data: URL (file_id is not supported by "
                               "the anthropic backend)", param)
    media_type, data = _data_url(data_url, param)
    if media_type != "application/pdf":
        raise TranslationError(f"file type {media_type!r} is not supported by the anthropic backend (pdf)", param)
    block: dict[str, Any] = {"type": "document", "source": {"type": "base64", "media_type": media_type,
                                                            "data": data}}
    if part.get("cache_control") is not None:
        block["cache_control"] = part["cache_control"]
    return block


def _assistant_blocks(msg: dict, i: int) -> list[dict]:
    blocks = _text_blocks(msg.get("content"), f"messages[{i}].content")
    calls = msg.get("tool_calls") or []
    if not isinstance(calls, list):
        raise TranslationError("tool_calls must be an array", f"messages[{i}].tool_calls")
    for j, call in enumerate(calls):
        param = f"messages[{i}].tool_calls[{j}]"
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not fn.get("name") or not call.get("id"):
            raise TranslationError("a tool call needs id and function.name", param)
        args = fn.get("arguments") or "{}"
        try:
            parsed = orjson.loads(args) if isinstance(args, str) else args
        except orjson.JSONDecodeError:
            raise TranslationError("tool call arguments must be a JSON object", param + ".function.arguments") from None
        if not isinstance(parsed, dict):
            raise TranslationError("tool call arguments must be a JSON object", param + ".function.arguments")
        blocks.append({"type": "tool_use", "id": call["id"], "name": fn["name"], "input": parsed})
    return blocks


def _tool_result(msg: dict, i: int) -> dict:
    call_id = msg.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise TranslationError("tool messages need tool_call_id", f"messages[{i}].tool_call_id")
    content = msg.get("content")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
    if isinstance(content, str):
        block["content"] = content
    else:
        blocks = _text_blocks(content, f"messages[{i}].content")
        if blocks:
            block["content"] = blocks
    return block


def _max_tokens(body: dict, default: int) -> int:
    value = body.get("max_completion_tokens")
    if value is None:
        value = body.get("max_tokens")
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise TranslationError("max_tokens must be a positive integer", "max_tokens")
    return value


def _sampling(body: dict, out: dict) -> None:
    for key in ("temperature", "top_p", "top_k"):
        if body.get(key) is not None:
            out[key] = body[key]
    stop = body.get("stop")
    if isinstance(stop, str):
        out["stop_sequences"] = [stop]
    elif isinstance(stop, list) and stop:
        out["stop_sequences"] = stop
    if isinstance(body.get("user"), str):
        out["metadata"] = {"user_id": body["user"]}


def _tools(body: dict, out: dict) -> None:
    tools = body.get("tools")
    if tools:
        converted = []
        for k, tool in enumerate(tools):
            fn = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
            if not isinstance(fn, dict) or not fn.get("name"):
                raise TranslationError("only function tools with a name are supported by the anthropic backend",
                                       f"tools[{k}]")
            item: dict[str, Any] = {"name": fn["name"]}
            if fn.get("description"):
                item["description"] = fn["description"]
            item["input_schema"] = fn.get("parameters") or {"type": "object", "properties": {}}
            cache_control = tool.get("cache_control", fn.get("cache_control"))
            if cache_control is not None:
                item["cache_control"] = cache_control
            converted.append(item)
        out["tools"] = converted
    choice = _tool_choice(body.get("tool_choice"))
    if body.get("parallel_tool_calls") is False and (choice or {}).get("type") != "none":
        choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
    if choice is not None:
        out["tool_choice"] = choice


def _tool_choice(choice: object) -> dict | None:
    if choice is None:
        return None
    if choice in ("auto", "none"):
        return {"type": choice}
    if choice == "required":
        return {"type": "any"}
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict) and choice["function"].get("name"):
        return {"type": "tool", "name": choice["function"]["name"]}
    raise TranslationError("tool_choice must be auto, none, required or a named function", "tool_choice")


def _refuse_unsupported(body: dict) -> None:
    if (body.get("n") or 1) != 1:
        raise TranslationError("n > 1 is not supported by the anthropic backend", "n")
    if body.get("logprobs"):
        raise TranslationError("logprobs are not supported by the anthropic backend", "logprobs")
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
        raise TranslationError(f"response_format {fmt.get('type')!r} is not supported by the anthropic backend",
                               "response_format")


# ---- answers -------------------------------------------------------------------------------------------


def usage_to_openai(usage: object) -> dict:
    """Anthropic's input_tokens excludes cache reads and writes; OpenAI's prompt_tokens includes them."""
    u = usage if isinstance(usage, dict) else {}
    read = int(u.get("cache_read_input_tokens") or 0)
    written = int(u.get("cache_creation_input_tokens") or 0)
    prompt = int(u.get("input_tokens") or 0) + read + written
    completion = int(u.get("output_tokens") or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": read, "cache_write_tokens": written}}


def from_anthropic(message: dict) -> dict:
    """An OpenAI `chat.completion` for an Anthropic `message`."""
    texts: list[str] = []
    calls: list[dict] = []
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            calls.append(tool_call(block, orjson.dumps(block.get("input") or {}).decode()))
    out_message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None,
                                   "refusal": None}
    if calls:
        out_message["tool_calls"] = calls
    return {
        "id": message.get("id") or "msg", "object": "chat.completion", "created": int(time.time()),
        "model": message.get("model"),
        "choices": [{"index": 0, "message": out_message, "logprobs": None,
                     "finish_reason": STOP_REASONS.get(str(message.get("stop_reason")), "stop")}],
        "usage": usage_to_openai(message.get("usage")),
    }


def tool_call(block: dict, arguments: str) -> dict:
    return {"id": block.get("id"), "type": "function", "function": {"name": block.get("name"), "arguments": arguments}}


ERROR_STATUS = {"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
                "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "api_error": 500,
                "overloaded_error": 503}


def anthropic_error(raw: object) -> tuple[str, str] | None:
    """(type, message) of an Anthropic error body `{"type": "error", "error": {"type", "message"}}`."""
    if isinstance(raw, dict) and isinstance(raw.get("error"), dict):
        err = raw["error"]
        return str(err.get("type") or "api_error"), str(err.get("message") or "")
    return None


def anthropic_error_envelope(status: int, raw: bytes) -> dict:
    """Anthropic's error body as OpenAI's envelope (other bodies: the generic conversion)."""
    try:
        parsed = orjson.loads(raw) if raw else None
    except orjson.JSONDecodeError:
        parsed = None
    found = anthropic_error(parsed)
    if found is None:
        return openai_error_envelope(status, raw)
    kind, message = found
    return error_body(message or f"anthropic answered HTTP {status}", kind)
