"""OpenAI request bodies -> engine requests (token ids + SamplingParams), with OpenAI-style 400s.

Shared by the engine's HTTP server and the gateway's in-process engine backend, so both accept and
refuse exactly the same things. Accepts OpenAI's fields and vLLM's extensions (top_k, min_p,
ignore_eos, stop_token_ids, guided_json / guided_regex / guided_choice); fields that would change the
output but that the engine does not implement (penalties, logit_bias) are refused rather than
silently ignored. Structured output and forced tool calls become a `GuidedSpec` (engine/guided.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from engine.chat_template import ChatTemplateError
from engine.guided import GrammarTooLargeError, GuidedSpec
from engine.serving.errors import EngineRequestError, bad_request

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
    tool_call: ToolCallMode | None = None  # forced tool calls: the output is parsed into tool_calls


@dataclass(frozen=True, slots=True)
class ToolCallMode:
    """`named`: the output is that function's arguments; `required`: a {"name", "arguments"} object for one of
    `names`, or with `parallel` a non-empty array of them; `auto`: free output, whose `<tool_call>` blocks
    naming one of `names` are read back as calls."""

    kind: str  # "named" | "required" | "auto"
    name: str | None
    parallel: bool
    names: tuple[str, ...] = ()


GrammarCheck = Callable[[GuidedSpec], object]  # compiles a spec (cached); raises ValueError when unsupported


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


def _schema(value: Any, param: str) -> dict | bool:
    if isinstance(value, str):  # vLLM's guided_json also takes the schema as JSON text
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError as e:
            raise bad_request(f"'{param}' is not valid JSON: {e}", param, "invalid_value") from e
    if not isinstance(value, dict | bool):
        raise bad_request(f"'{param}' must be a JSON schema object", param, "invalid_type")
    return value


def _response_format(body: dict) -> GuidedSpec | None:
    rf = body.get("response_format")
    if rf is None:
        return None
    if not isinstance(rf, dict):
        raise bad_request("'response_format' must be an object", "response_format", "invalid_type")
    kind = rf.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return GuidedSpec("json_object")
    if kind == "json_schema":
        spec = rf.get("json_schema")
        if not isinstance(spec, dict) or "schema" not in spec and "name" not in spec:
            raise bad_request("response_format json_schema needs a 'json_schema' object with a 'schema'",
                              "response_format.json_schema", "invalid_value")
        schema = _schema(spec.get("schema", {"type": "object"}), "response_format.json_schema.schema")
        return GuidedSpec.json_schema(schema)
    raise bad_request(f"response_format type {kind!r} is not supported; use 'text', 'json_object' or 'json_schema'",
                      "response_format.type", "unsupported_parameter")


def _vllm_guided(body: dict) -> tuple[GuidedSpec, str] | None:
    """vLLM's extension fields; at most one of them."""
    given = [k for k in ("guided_json", "guided_regex", "guided_choice", "guided_grammar") if body.get(k) is not None]
    if not given:
        return None
    if len(given) > 1:
        raise bad_request(f"only one of {given} may be given", given[1], "invalid_value")
    key = given[0]
    value = body[key]
    if key == "guided_json":
        return GuidedSpec.json_schema(_schema(value, key)), key
    if key == "guided_regex":
        if not isinstance(value, str) or not value:
            raise bad_request("'guided_regex' must be a non-empty string", key, "invalid_type")
        return GuidedSpec("regex", value), key
    if key == "guided_choice":
        if not isinstance(value, list) or not value or not all(isinstance(c, str) and c for c in value):
            raise bad_request("'guided_choice' must be a non-empty list of non-empty strings", key, "invalid_type")
        return GuidedSpec.choice(value), key
    raise bad_request("'guided_grammar' is not supported by this engine; use guided_json, guided_regex or "
                      "guided_choice", key, "unsupported_parameter")


def _tools(body: dict) -> list[dict] | None:
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise bad_request("'tools' must be a list", "tools", "invalid_type")
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(fn, dict):
            raise bad_request("each tool must be {'type': 'function', 'function': {...}}", f"tools[{i}]",
                              "invalid_value")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise bad_request("each function needs a 'name'", f"tools[{i}].function.name", "invalid_value")
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise bad_request("a function's 'parameters' must be a JSON schema object",
                              f"tools[{i}].function.parameters", "invalid_type")
    return tools


NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}  # OpenAI: omitted = none


def _call_schema(fn: dict) -> dict:
    return {"type": "object", "properties": {"name": {"const": fn["name"]},
                                             "arguments": fn.get("parameters") or NO_PARAMETERS},
            "required": ["name", "arguments"], "additionalProperties": False}


def _tool_choice(body: dict, tools: list[dict] | None) -> tuple[GuidedSpec, ToolCallMode] | None:
    """`required` / a named function: the grammar of the call(s) and how to read the output back."""
    choice = body.get("tool_choice")
    if choice is None or choice in ("auto", "none"):
        return None
    parallel = _bool(body, "parallel_tool_calls", True)
    if choice == "required":
        if not tools:
            raise bad_request("tool_choice 'required' needs 'tools'", "tool_choice", "invalid_value")
        fns = [t["function"] for t in tools]
        one = _call_schema(fns[0]) if len(fns) == 1 else {"anyOf": [_call_schema(f) for f in fns]}
        schema = {"type": "array", "items": one, "minItems": 1} if parallel else one
        return GuidedSpec.json_schema(schema), ToolCallMode("required", None, parallel, tuple(f["name"] for f in fns))
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        fn = next((t["function"] for t in tools or () if t["function"]["name"] == name), None)
        if fn is None:
            raise bad_request(f"tool_choice names function {name!r}, which is not in 'tools'", "tool_choice",
                              "invalid_value")
        return GuidedSpec.json_schema(fn.get("parameters") or NO_PARAMETERS), ToolCallMode("named", name, False)
    raise bad_request("tool_choice must be 'none', 'auto', 'required' or {'type': 'function', 'function': "
                      "{'name': ...}}", "tool_choice", "invalid_value")


def _check_grammar(spec: GuidedSpec, param: str, check: GrammarCheck | None) -> None:
    if check is None:
        return
    try:
        check(spec)
    except ValueError as e:
        code = "grammar_too_large" if isinstance(e, GrammarTooLargeError) else "unsupported_parameter"
        raise bad_request(f"'{param}' cannot be used for constrained decoding: {e}", param, code) from e


def check_model(body: dict, served: str) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' is required and must be a string", "model", "invalid_type")
    if model != served:
        raise EngineRequestError(404, f"The model '{model}' does not exist; this engine serves '{served}'",
                           "invalid_request_error", "model_not_found", "model")
    return model


def _guided(body: dict, kind: str, tools: list[dict] | None,
            check: GrammarCheck | None) -> tuple[GuidedSpec | None, ToolCallMode | None]:
    """The one grammar the output must follow (response_format, a forced tool call or vLLM's guided_*)."""
    sources: list[tuple[GuidedSpec, str, ToolCallMode | None]] = []
    vllm = _vllm_guided(body)
    if vllm is not None:
        sources.append((vllm[0], vllm[1], None))
    if kind == "chat":
        rf = _response_format(body)
        if rf is not None:
            sources.append((rf, "response_format", None))
        forced = _tool_choice(body, tools)
        if forced is not None:
            sources.append((forced[0], "tool_choice", forced[1]))
    if not sources:
        return None, None
    if len(sources) > 1:
        raise bad_request(f"'{sources[0][1]}' and '{sources[1][1]}' each constrain the output; give only one",
                          sources[1][1], "invalid_value")
    spec, param, mode = sources[0]
    _check_grammar(spec, "tools" if param == "tool_choice" else param, check)
    return spec, mode


def sampling_params(body: dict, kind: str, vocab_size: int, guided: GuidedSpec | None = None,
                    ) -> tuple[SamplingParams, bool]:
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
        guided=guided,
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
    """A message's content as text; multi-part content may only hold text (or refusal) parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            text = part.get(kind) if kind in ("text", "refusal") else None  # type: ignore[union-attr]
            if not isinstance(text, str):
                raise bad_request("only text content parts are supported by this engine",
                                  f"messages[{index}].content", "unsupported_content")
            texts.append(text)
        return "".join(texts)
    raise bad_request("message content must be a string or a list of text parts", f"messages[{index}].content",
                      "invalid_type")


def _tool_calls(calls: Any, index: int) -> list[dict]:
    """An assistant's `tool_calls` as OpenAI sends them back: [{id, type, function: {name, arguments}}]."""
    param = f"messages[{index}].tool_calls"
    if not isinstance(calls, list):
        raise bad_request("'tool_calls' must be a list", param, "invalid_type")
    out = []
    for j, c in enumerate(calls):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise bad_request("each tool call needs a 'function' with a 'name'", f"{param}[{j}]", "invalid_value")
        arguments = fn.get("arguments", "{}")
        if not isinstance(arguments, str | dict):
            raise bad_request("a tool call's 'arguments' must be a JSON string", f"{param}[{j}].function.arguments",
                              "invalid_type")
        out.append({"id": str(c.get("id") or f"call_{j}"), "type": "function",
                    "function": {"name": fn["name"], "arguments": arguments}})
    return out


def chat_messages(body: dict) -> list[dict]:
    """The body's messages, checked and normalised for a chat template: content as text ("" for an assistant
    turn that only calls tools), tool calls in OpenAI's shape, every other field (name, tool_call_id) kept."""
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
        msg = {k: v for k, v in m.items() if v is not None}
        content = _message_text(m.get("content"), i)
        if content is None and role != "assistant":
            raise bad_request(f"messages[{i}].content is required", f"messages[{i}].content", "invalid_value")
        msg["content"] = content or ""
        if m.get("tool_calls") is not None:
            if role != "assistant":
                raise bad_request("only assistant messages carry 'tool_calls'", f"messages[{i}].tool_calls",
                                  "invalid_value")
            msg["tool_calls"] = _tool_calls(m["tool_calls"], i)
        for key in ("name", "tool_call_id"):
            if key in msg and not isinstance(msg[key], str):
                raise bad_request(f"messages[{i}].{key} must be a string", f"messages[{i}].{key}", "invalid_type")
        out.append(msg)
    return out


def render_chat_prompt(tokenizer: Tokenizer, messages: list[dict], tools: list[dict] | None) -> list[int]:
    """The prompt's token ids; a template that cannot render the messages is a 400 naming the message."""
    try:
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tools=tools)
    except ChatTemplateError as e:
        if e.index is None:
            where, param = "these messages", "messages"
        else:
            where = f"messages[{e.index}] (role '{messages[e.index].get('role')}')"
            param = f"messages[{e.index}]"
        reason = f": {e.template_message}" if e.template_message else ""
        raise bad_request(f"the model's chat template cannot render {where}{reason}", param,
                          "invalid_value") from e
    except ValueError as e:  # no chat template at all
        raise bad_request(str(e), "messages", "invalid_value") from e


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


def prepare_chat(body: Any, tokenizer: Tokenizer, max_model_len: int, served_model: str | None,
                 check_grammar: GrammarCheck | None = None) -> PreparedRequest:
    """Validate a chat body and render its prompt with the model's chat template (CPU work: off the loop).

    `check_grammar` compiles a constrained-output spec ahead of the engine (a 400 for what it cannot do)."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object", None, "invalid_type")
    model = check_model(body, served_model) if served_model is not None else str(body.get("model", ""))
    messages = chat_messages(body)
    tools = _tools(body)
    guided, tool_call = _guided(body, "chat", tools, check_grammar)
    params, want_logprobs = sampling_params(body, "chat", tokenizer.vocab_size, guided)
    # Parallel forced calls: a small model repeats its call until max_tokens; a repeat ends the array instead.
    params.stop_repeated_items = tool_call is not None and tool_call.kind == "required" and tool_call.parallel
    stream, include_usage = _stream_flags(body)
    # tool_choice "none": the model is not shown tools it may not call (past calls still render).
    shown = tools if body.get("tool_choice") != "none" else None
    prompt = render_chat_prompt(tokenizer, messages, shown or None)
    check_window(prompt, params, max_model_len, "messages")
    if tool_call is None and shown and guided is None:
        tool_call = ToolCallMode("auto", None, True, tuple(t["function"]["name"] for t in shown))
    return PreparedRequest("chat", model, [prompt], params, stream, include_usage, want_logprobs,
                           tool_call=tool_call)


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
    body: Any, tokenizer: Tokenizer, max_model_len: int, served_model: str | None,
    check_grammar: GrammarCheck | None = None,
) -> PreparedRequest:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object", None, "invalid_type")
    model = check_model(body, served_model) if served_model is not None else str(body.get("model", ""))
    guided, _ = _guided(body, "completion", None, check_grammar)
    params, want_logprobs = sampling_params(body, "completion", tokenizer.vocab_size, guided)
    stream, include_usage = _stream_flags(body)
    prompts, texts = _completion_prompts(body, tokenizer)
    for prompt in prompts:
        check_window(prompt, params, max_model_len, "prompt")
    echo = _bool(body, "echo", False)
    return PreparedRequest("completion", model, prompts, params, stream, include_usage, want_logprobs,
                           texts if echo else None)
