"""OpenAI request bodies -> engine requests (token ids + SamplingParams), with OpenAI-style 400s.

Shared by the engine's HTTP server and the gateway's in-process engine backend, so both accept and
refuse exactly the same things. Accepts OpenAI's fields and vLLM's extensions (top_k, min_p,
ignore_eos, stop_token_ids); fields that would change the output but that the engine does not
implement (penalties, logit_bias, structured output) are refused rather than silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.errors import GatewayError, bad_request

if TYPE_CHECKING:
    from engine.sampling_params import SamplingParams
    from engine.tokenizer import Tokenizer

MAX_N = 128
MAX_STOP_SEQUENCES = 16
MAX_TOP_LOGPROBS = 20
MESSAGE_ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


@dataclass(slots=True)
class PreparedRequest:
    """One client request, ready for the engine: one prompt per engine request (completions may batch)."""

    kind: str  # "chat" | "completion"
    model: str
    prompts: list[list[int]]
    params: SamplingParams
    stream: bool
    include_usage: bool
    logprobs: bool
    echo_texts: list[str] | None = None  # completions with echo: the prompt texts to prepend


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _number(body: dict, key: str, default: float, lo: float, hi: float) -> float:
    v = body.get(key)
    if v is None:
        return default
    if not _is_number(v):
        raise bad_request(f"'{key}' must be a number", key, "invalid_type")
    if not lo <= v <= hi:
        raise bad_request(f"'{key}' must be between {lo} and {hi}, got {v}", key, "invalid_value")
    return float(v)


def _int(body: dict, key: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
    v = body.get(key)
    if v is None:
        return default
    if not _is_int(v):
        raise bad_request(f"'{key}' must be an integer", key, "invalid_type")
    if v < lo or (hi is not None and v > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise bad_request(f"'{key}' must be {bound}, got {v}", key, "invalid_value")
    return v


def _bool(body: dict, key: str, default: bool) -> bool:
    v = body.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise bad_request(f"'{key}' must be a boolean", key, "invalid_type")
    return v


def _stop(body: dict) -> list[str]:
    v = body.get("stop")
    if v is None:
        return []
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) and s for s in v):
        raise bad_request("'stop' must be a non-empty string or a list of non-empty strings", "stop", "invalid_type")
    if len(v) > MAX_STOP_SEQUENCES:
        raise bad_request(f"'stop' takes at most {MAX_STOP_SEQUENCES} sequences", "stop", "invalid_value")
    return list(v)


def _token_ids(body: dict, key: str, vocab_size: int) -> list[int]:
    v = body.get(key)
    if v is None:
        return []
    if not isinstance(v, list) or not all(_is_int(t) and 0 <= t < vocab_size for t in v):
        raise bad_request(f"'{key}' must be a list of token ids below {vocab_size}", key, "invalid_value")
    return list(v)


def _refuse_unsupported(body: dict) -> None:
    for key in ("presence_penalty", "frequency_penalty"):
        v = body.get(key)
        if v is not None and (not _is_number(v) or v != 0):
            raise bad_request(f"'{key}' is not supported by this engine (only 0)", key, "unsupported_parameter")
    rp = body.get("repetition_penalty")
    if rp is not None and (not _is_number(rp) or rp != 1):
        raise bad_request("'repetition_penalty' is not supported by this engine (only 1)", "repetition_penalty",
                          "unsupported_parameter")
    if body.get("logit_bias"):
        raise bad_request("'logit_bias' is not supported by this engine", "logit_bias", "unsupported_parameter")
    rf = body.get("response_format")
    if rf is not None and (not isinstance(rf, dict) or rf.get("type") not in (None, "text")):
        raise bad_request("only response_format {'type': 'text'} is supported by this engine", "response_format",
                          "unsupported_parameter")


def check_model(body: dict, served: str) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' is required and must be a string", "model", "invalid_type")
    if model != served:
        raise GatewayError(404, f"The model '{model}' does not exist; this engine serves '{served}'",
                           "invalid_request_error", "model_not_found", "model")
    return model


def sampling_params(body: dict, kind: str, vocab_size: int) -> tuple[SamplingParams, bool]:
    """SamplingParams from the body, and whether logprobs were asked for."""
    from engine.sampling_params import SamplingParams

    _refuse_unsupported(body)
    if kind == "chat":
        want_logprobs = _bool(body, "logprobs", False)
        top = _int(body, "top_logprobs", None, 0, MAX_TOP_LOGPROBS)
        if top is not None and not want_logprobs:
            raise bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs", "invalid_value")
        logprobs = (top or 0) if want_logprobs else None
        max_tokens = _int(body, "max_completion_tokens", None, 1)
        max_tokens = _int(body, "max_tokens", max_tokens, 1)
    else:
        logprobs = _int(body, "logprobs", None, 0, MAX_TOP_LOGPROBS)
        want_logprobs = logprobs is not None
        max_tokens = _int(body, "max_tokens", 16, 1)
        best_of = _int(body, "best_of", None, 1)
        if best_of is not None and best_of != _int(body, "n", 1, 1):
            raise bad_request("'best_of' other than n is not supported by this engine", "best_of",
                              "unsupported_parameter")
        if body.get("suffix"):
            raise bad_request("'suffix' is not supported by this engine", "suffix", "unsupported_parameter")
    params = SamplingParams(
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
        top_k=int(_int(body, "top_k", 0, -1) or 0),
        min_p=_number(body, "min_p", 0.0, 0.0, 1.0),
        seed=_int(body, "seed", None, 0, 2**63 - 1 - MAX_N),  # the engine seeds choice i with seed + i
        max_tokens=max_tokens,
        stop=_stop(body),
        stop_token_ids=_token_ids(body, "stop_token_ids", vocab_size),
        ignore_eos=_bool(body, "ignore_eos", False),
        logprobs=logprobs,
        n=int(_int(body, "n", 1, 1, MAX_N) or 1),
    )
    if params.top_p == 0.0:
        raise bad_request("'top_p' must be greater than 0", "top_p", "invalid_value")
    try:
        params.validate()
    except ValueError as e:
        raise bad_request(str(e), None, "invalid_value") from e
    return params, want_logprobs


def _stream_flags(body: dict) -> tuple[bool, bool]:
    stream = _bool(body, "stream", False)
    options = body.get("stream_options")
    if options is None:
        return stream, False
    if not isinstance(options, dict):
        raise bad_request("'stream_options' must be an object", "stream_options", "invalid_type")
    if not stream:
        raise bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options",
                          "invalid_value")
    return stream, _bool(options, "include_usage", False)


def _message_text(content: Any, index: int) -> str | None:
    """A message's content as text; multi-part content may only hold text parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad_request("only text content parts are supported by this engine",
                                  f"messages[{index}].content", "unsupported_content")
            texts.append(part["text"])
        return "".join(texts)
    raise bad_request("message content must be a string or a list of text parts", f"messages[{index}].content",
                      "invalid_type")


def chat_messages(body: dict) -> list[dict]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list", "messages", "invalid_type")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise bad_request("each message must be an object", f"messages[{i}]", "invalid_type")
        role = m.get("role")
        if role not in MESSAGE_ROLES:
            raise bad_request(f"messages[{i}].role must be one of {sorted(MESSAGE_ROLES)}", f"messages[{i}].role",
                              "invalid_value")
        msg = dict(m)
        msg["content"] = _message_text(m.get("content"), i)
        if msg["content"] is None and role != "assistant":
            raise bad_request(f"messages[{i}].content is required", f"messages[{i}].content", "invalid_value")
        out.append(msg)
    return out


def check_window(prompt: list[int], params: SamplingParams, max_model_len: int, param: str) -> None:
    if not prompt:
        raise bad_request("the prompt is empty", param, "invalid_value")
    if len(prompt) >= max_model_len:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens; the prompt has {len(prompt)} "
            "tokens, which leaves no room for output", param, "context_length_exceeded")
    if params.max_tokens is not None and len(prompt) + params.max_tokens > max_model_len:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens; the prompt has {len(prompt)} tokens "
            f"and max_tokens is {params.max_tokens} ({len(prompt) + params.max_tokens} in all). Lower max_tokens "
            "or shorten the prompt", "max_tokens", "context_length_exceeded")


def prepare_chat(body: Any, tokenizer: Tokenizer, max_model_len: int, served_model: str | None) -> PreparedRequest:
    """Validate a chat body and render its prompt with the model's chat template (CPU work: off the loop)."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object", None, "invalid_type")
    model = check_model(body, served_model) if served_model is not None else str(body.get("model", ""))
    messages = chat_messages(body)
    params, want_logprobs = sampling_params(body, "chat", tokenizer.vocab_size)
    stream, include_usage = _stream_flags(body)
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise bad_request("'tools' must be a list", "tools", "invalid_type")
    try:
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tools=tools)
    except Exception as e:  # a template that raises on these messages (e.g. role order) is the client's
        raise bad_request(f"the chat template rejected these messages: {e}", "messages", "invalid_value") from e
    check_window(prompt, params, max_model_len, "messages")
    return PreparedRequest("chat", model, [prompt], params, stream, include_usage, want_logprobs)


def _completion_prompts(body: dict, tokenizer: Tokenizer) -> tuple[list[list[int]], list[str]]:
    raw = body.get("prompt")
    vocab = tokenizer.vocab_size
    if isinstance(raw, str):
        items: list[Any] = [raw]
    elif isinstance(raw, list) and raw and all(_is_int(t) for t in raw):
        items = [raw]
    elif isinstance(raw, list) and raw:
        items = raw
    else:
        raise bad_request("'prompt' must be a string, a list of strings, or token id list(s)", "prompt",
                          "invalid_type")
    prompts, texts = [], []
    for item in items:
        if isinstance(item, str):
            prompts.append(tokenizer.encode(item, add_special_tokens=False))
            texts.append(item)
        elif isinstance(item, list) and all(_is_int(t) and 0 <= t < vocab for t in item):
            prompts.append(list(item))
            texts.append(tokenizer.decode(list(item)))
        else:
            raise bad_request(f"each prompt must be a string or a list of token ids below {vocab}", "prompt",
                              "invalid_value")
    return prompts, texts


def prepare_completion(
    body: Any, tokenizer: Tokenizer, max_model_len: int, served_model: str | None
) -> PreparedRequest:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object", None, "invalid_type")
    model = check_model(body, served_model) if served_model is not None else str(body.get("model", ""))
    params, want_logprobs = sampling_params(body, "completion", tokenizer.vocab_size)
    stream, include_usage = _stream_flags(body)
    prompts, texts = _completion_prompts(body, tokenizer)
    for prompt in prompts:
        check_window(prompt, params, max_model_len, "prompt")
    echo = _bool(body, "echo", False)
    return PreparedRequest("completion", model, prompts, params, stream, include_usage, want_logprobs,
                           texts if echo else None)
