"""OpenAI chat requests -> Anthropic Messages requests, and Anthropic answers -> OpenAI chat completions.

Prompt caching: `cache_control` on OpenAI content parts, on a whole message (it lands on that message's last
block) and on tools (top level, LiteLLM's convention, or inside `function`) is carried to the matching
Anthropic block exactly as given. Sampling parameters Anthropic lacks (seed, penalties, logit_bias) are
dropped; what would change the answer's shape (n > 1, logprobs, response_format json) is refused with a 400.

What Anthropic would reject is refused here first, with a 400 naming the parameter: temperature or top_p
outside [0, 1]; temperature together with top_p on the models that accept only one (ONE_SAMPLER_MODELS:
Opus 4.1 and later, Sonnet 4.5 and later, Haiku 4.5 and later, the 5-series); a request with no user or
assistant message (`messages: []` once system messages are lifted out); more than four cache_control
breakpoints, or a 1-hour one after a 5-minute one; thinking with sampling settings it forbids.

Extended thinking: OpenAI's `reasoning_effort` becomes `thinking: {type: enabled, budget_tokens}` with
REASONING_BUDGETS (minimal/low 1024, medium 2048, high 4096 tokens: LiteLLM's mapping; `none` turns it off);
LiteLLM's `thinking` extension is passed on as given. Thinking tokens count toward max_tokens: without a
client limit the request gets default_max_tokens + the budget; a client limit is kept and a reasoning_effort
budget is cut to fit under it. Answers carry the thinking text as `reasoning_content` and the signed blocks as
`thinking_blocks` (LiteLLM's field); assistant messages sent back with `thinking_blocks` return them to
Anthropic unchanged, first in the turn, so multi-turn and tool-loop conversations keep their signatures.
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
           "prediction", "top_logprobs", "modalities", "audio", "web_search_options"}
ONE_SAMPLER_MODELS = ("claude-opus-4-1", "claude-opus-4-5", "claude-opus-4-6", "claude-opus-4-7", "claude-opus-4-8",
                      "claude-sonnet-4-5", "claude-sonnet-4-6", "claude-haiku-4-5", "claude-opus-5",
                      "claude-sonnet-5", "claude-haiku-5", "claude-fable-5", "claude-mythos-5")
REASONING_BUDGETS = {"minimal": 1024, "low": 1024, "medium": 2048, "high": 4096}
MIN_THINKING_BUDGET = 1024  # Anthropic's floor for budget_tokens
MAX_BREAKPOINTS = 4


DEFAULT_MAX_TOKENS = 4096


def default_max_tokens(options: dict) -> int:
    """The max_tokens sent when the client sets none (Anthropic requires one): `options.default_max_tokens`."""
    value = options.get("default_max_tokens")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str) and value.strip().isdigit() and int(value) > 0:  # from a ${VAR} in the policy
        return int(value)
    return DEFAULT_MAX_TOKENS


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
    if not out_messages:
        raise TranslationError("the anthropic backend needs at least one user or assistant message with content "
                               "(system messages become the system prompt)", "messages")
    out: dict[str, Any] = {"model": model or body.get("model"), "max_tokens": _max_tokens(body, default_max_tokens),
                           "messages": [_compact(m) for m in out_messages]}
    if system:
        plain = len(system) == 1 and "cache_control" not in system[0]
        out["system"] = system[0]["text"] if plain else system
    _sampling(body, out)
    _tools(body, out)
    _thinking(body, out, default_max_tokens)
    _refuse_unsupported(body)
    _check_breakpoints(out)
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


def _thinking_blocks(msg: dict, i: int) -> list[dict]:
    """The signed thinking blocks of an earlier answer (`thinking_blocks`), returned to Anthropic unchanged."""
    raw = msg.get("thinking_blocks")
    if raw is None:
        return []
    param = f"messages[{i}].thinking_blocks"
    if not isinstance(raw, list):
        raise TranslationError("thinking_blocks must be an array", param)
    blocks = []
    for j, block in enumerate(raw):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "thinking" and isinstance(block.get("thinking"), str) and isinstance(block.get("signature"), str):
            blocks.append({"type": "thinking", "thinking": block["thinking"], "signature": block["signature"]})
        elif kind == "redacted_thinking" and isinstance(block.get("data"), str):
            blocks.append({"type": "redacted_thinking", "data": block["data"]})
        else:
            raise TranslationError("thinking_blocks items must be thinking blocks with thinking and signature, or "
                                   "redacted_thinking blocks with data", f"{param}[{j}]")
    return blocks


def _assistant_blocks(msg: dict, i: int) -> list[dict]:
    blocks = _thinking_blocks(msg, i) + _text_blocks(msg.get("content"), f"messages[{i}].content")
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
    for key in ("temperature", "top_p"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise TranslationError(f"{key} must be a number between 0 and 1 for the anthropic backend (got "
                                   f"{value!r}; Anthropic's range is [0, 1], not OpenAI's [0, 2])", key)
        out[key] = value
    if body.get("top_k") is not None:
        out["top_k"] = body["top_k"]
    if "temperature" in out and "top_p" in out and str(out["model"]).startswith(ONE_SAMPLER_MODELS):
        raise TranslationError(f"{out['model']} accepts temperature or top_p, not both: send only one", "top_p")
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


def thinking_budget(body: dict) -> int:
    """Thinking tokens the request asks for (0 when none): what they add to the output limit."""
    thinking = body.get("thinking")
    if isinstance(thinking, dict):
        budget = thinking.get("budget_tokens")
        return budget if thinking.get("type") == "enabled" and isinstance(budget, int) else 0
    effort = body.get("reasoning_effort")
    return REASONING_BUDGETS.get(effort, 0) if isinstance(effort, str) else 0


def _thinking(body: dict, out: dict, default_max_tokens: int) -> None:
    """`thinking` (LiteLLM's extension, passed on) or `reasoning_effort` -> Anthropic's `thinking`."""
    thinking, effort = body.get("thinking"), body.get("reasoning_effort")
    client_limit = body.get("max_completion_tokens", body.get("max_tokens")) is not None
    if thinking is not None:
        if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "disabled", "adaptive"):
            raise TranslationError("thinking must be {type: enabled, budget_tokens}, {type: adaptive} or "
                                   "{type: disabled}", "thinking")
        config = dict(thinking)
        if config["type"] == "enabled":
            budget = config.get("budget_tokens")
            if isinstance(budget, bool) or not isinstance(budget, int) or budget < MIN_THINKING_BUDGET:
                raise TranslationError(f"thinking.budget_tokens must be an integer >= {MIN_THINKING_BUDGET}",
                                       "thinking.budget_tokens")
    elif effort is not None:
        if effort == "none":
            return
        if effort not in REASONING_BUDGETS:
            raise TranslationError(f"reasoning_effort must be one of none, {', '.join(REASONING_BUDGETS)}",
                                   "reasoning_effort")
        budget = REASONING_BUDGETS[effort]
        if client_limit:  # OpenAI's limit includes the reasoning: fit the budget under it
            budget = min(budget, out["max_tokens"] - 1)
            if budget < MIN_THINKING_BUDGET:
                raise TranslationError(f"max_tokens ({out['max_tokens']}) leaves no room for thinking: Anthropic "
                                       f"needs a budget of at least {MIN_THINKING_BUDGET} tokens below max_tokens",
                                       "max_tokens")
        config = {"type": "enabled", "budget_tokens": budget}
    else:
        return
    if config["type"] == "enabled":
        if not client_limit:
            out["max_tokens"] = default_max_tokens + config["budget_tokens"]
        elif config["budget_tokens"] >= out["max_tokens"]:
            raise TranslationError(f"max_tokens ({out['max_tokens']}) must be greater than the thinking budget "
                                   f"({config['budget_tokens']})", "max_tokens")
    out["thinking"] = config
    if config["type"] == "disabled":
        return
    if out.get("temperature") not in (None, 1):
        raise TranslationError("temperature cannot be set with extended thinking (only 1 is allowed)", "temperature")
    if out.get("top_p") is not None and out["top_p"] < 0.95:
        raise TranslationError("top_p must be at least 0.95 with extended thinking", "top_p")
    if "top_k" in out:
        raise TranslationError("top_k cannot be set with extended thinking", "top_k")
    if (out.get("tool_choice") or {}).get("type") in ("any", "tool"):
        raise TranslationError("extended thinking cannot be combined with a forced tool_choice (required or a named "
                               "function): use auto or none", "tool_choice")


def _markers(out: dict) -> list[object]:
    """cache_control markers in Anthropic's prompt order: tools, system, then the turns' blocks."""
    blocks: list[Any] = list(out.get("tools") or [])
    if isinstance(out.get("system"), list):
        blocks += out["system"]
    for message in out["messages"]:
        if isinstance(message["content"], list):
            blocks += message["content"]
    return [b["cache_control"] for b in blocks if isinstance(b, dict) and "cache_control" in b]


def _check_breakpoints(out: dict) -> None:
    markers = _markers(out)
    if len(markers) > MAX_BREAKPOINTS:
        raise TranslationError(f"at most {MAX_BREAKPOINTS} cache_control breakpoints are allowed by Anthropic; "
                               f"the request has {len(markers)}", "messages")
    short_seen = False
    for marker in markers:
        ttl = marker.get("ttl", "5m") if isinstance(marker, dict) else None
        if ttl == "1h" and short_seen:
            raise TranslationError("a cache_control breakpoint with ttl 1h must not come after one with the "
                                   "default 5m ttl (order: tools, system, messages)", "messages")
        short_seen = short_seen or ttl == "5m"


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
    thinking: list[dict] = []
    for block in message.get("content") or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            calls.append(tool_call(block, orjson.dumps(block.get("input") or {}).decode()))
        elif block.get("type") in ("thinking", "redacted_thinking"):
            thinking.append(thinking_block(block))
    out_message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None,
                                   "refusal": None}
    if calls:
        out_message["tool_calls"] = calls
    if thinking:
        out_message["reasoning_content"] = "".join(b.get("thinking", "") for b in thinking)
        out_message["thinking_blocks"] = thinking
    return {
        "id": message.get("id") or "msg", "object": "chat.completion", "created": int(time.time()),
        "model": message.get("model"),
        "choices": [{"index": 0, "message": out_message, "logprobs": None,
                     "finish_reason": STOP_REASONS.get(str(message.get("stop_reason")), "stop")}],
        "usage": usage_to_openai(message.get("usage")),
    }


def thinking_block(block: dict) -> dict:
    """A thinking block as LiteLLM's `thinking_blocks` item (what a client sends back next turn)."""
    if block.get("type") == "redacted_thinking":
        return {"type": "redacted_thinking", "data": str(block.get("data", ""))}
    return {"type": "thinking", "thinking": str(block.get("thinking", "")), "signature": str(block.get("signature", ""))}


def tool_call(block: dict, arguments: str) -> dict:
    return {"id": block.get("id"), "type": "function", "function": {"name": block.get("name"), "arguments": arguments}}


ERROR_STATUS = {"invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
                "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "api_error": 500,
                "overloaded_error": 529}


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
