"""Render a model's own jinja chat template the way Hugging Face does (sandboxed, trim/lstrip blocks)."""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(ValueError):
    """The template raised, or could not be compiled.

    `index` is the first message the template could not render (None when it is not about one message);
    `template_message` is the template's own `raise_exception` text, meant for users (never Python's).
    """

    def __init__(self, message: str, index: int | None = None, template_message: str | None = None) -> None:
        super().__init__(message)
        self.index = index
        self.template_message = template_message


class _TemplateRaised(ChatTemplateError):
    """The template's own `raise_exception(...)`."""


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message, template_message=str(message))


def _tojson(x: object, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=8)
def compile_template(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"invalid chat template: {e}") from e


def knows_tools(source: str) -> bool:
    """Whether the template renders tool definitions and calls itself (Qwen2.5, Llama 3.1, Hermes style)."""
    return "tools" in source and "tool_calls" in source


def render_chat(source: str, messages: list[dict], add_generation_prompt: bool, tools: list | None,
                special_tokens: dict[str, str | None]) -> str:
    """The prompt text. Templates without tool syntax get tools, calls and results as plain text (see
    `render_tools_as_text`). A failure names the first of the caller's messages the template cannot render."""
    template = compile_template(source)
    try:
        return _render(source, template, messages, add_generation_prompt, tools, special_tokens)
    except ChatTemplateError as e:
        # Only on the error path: render growing prefixes (n renders at worst) to name the message.
        for i in range(len(messages)):
            try:
                _render(source, template, messages[: i + 1], False, tools, special_tokens)
            except ChatTemplateError:
                raise ChatTemplateError(str(e), i, e.template_message) from None
        raise ChatTemplateError(str(e), None, e.template_message) from None


def _render(source: str, template: jinja2.Template, messages: list[dict], add_generation_prompt: bool,
            tools: list | None, special_tokens: dict[str, str | None]) -> str:
    if knows_tools(source):
        messages = [_for_tool_template(m) for m in messages]
    else:
        messages, tools = render_tools_as_text(messages, tools), None
    if "developer" not in source:  # OpenAI's newer name for the system role
        messages = [{**m, "role": "system"} if m.get("role") == "developer" else m for m in messages]
    try:
        return template.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
                               **special_tokens)
    except ChatTemplateError:
        raise
    except Exception as e:  # jinja2 or a Python error inside the template: its text stays server-side
        raise ChatTemplateError(f"chat template failed: {type(e).__name__}") from e


def _arguments(raw: object) -> object:
    """Tool-aware templates expect a call's arguments as a mapping (HF's convention); OpenAI sends a JSON string."""
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return raw
        return parsed if isinstance(parsed, dict) else raw
    return raw


def _for_tool_template(message: dict) -> dict:
    calls = message.get("tool_calls")
    if message.get("role") == "function":  # the legacy role is a tool result
        message = {**message, "role": "tool"}
    if not calls:
        return message
    return {**message, "tool_calls": [
        {**c, "function": {**c["function"], "arguments": _arguments(c["function"].get("arguments"))}} for c in calls
    ]}


TOOLS_PREAMBLE = (
    "# Tools\n\nYou may call one or more functions to assist with the user query. The functions, one JSON "
    "object per line:\n"
)
TOOLS_CALL_FORMAT = (
    "\n\nTo call a function, reply with one block per call:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <arguments-json-object>}\n</tool_call>'
)


def _call_text(call: dict) -> str:
    fn = call.get("function") or {}
    body = {"name": fn.get("name"), "arguments": _arguments(fn.get("arguments"))}
    return "<tool_call>\n" + json.dumps(body, ensure_ascii=False) + "\n</tool_call>"


def render_tools_as_text(messages: list[dict], tools: list | None) -> list[dict]:
    """Tools, calls and results for a template that has no syntax for them, as readable text:

    - tool definitions go into the system message (one is added first when there is none), Hermes style;
    - an assistant's `tool_calls` follow its content as `<tool_call>{"name", "arguments"}</tool_call>` blocks;
    - `tool` (and legacy `function`) results become a user turn of `<tool_response>` blocks (consecutive
      results merged), named after the call they answer.
    """
    out: list[dict] = []
    names: dict[str, str] = {}  # tool_call_id -> function name, to name the results
    if tools:
        listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        text = TOOLS_PREAMBLE + listing + TOOLS_CALL_FORMAT
        if messages and messages[0].get("role") in ("system", "developer"):
            first = messages[0]
            messages = [{**first, "content": (first.get("content") or "") + "\n\n" + text}, *messages[1:]]
        else:
            messages = [{"role": "system", "content": text}, *messages]
    for m in messages:
        role = m.get("role")
        if role == "assistant" and m.get("tool_calls"):
            for c in m["tool_calls"]:
                names[str(c.get("id"))] = str((c.get("function") or {}).get("name"))
            parts = ([m["content"]] if m.get("content") else []) + [_call_text(c) for c in m["tool_calls"]]
            out.append({k: v for k, v in m.items() if k != "tool_calls"} | {"content": "\n".join(parts)})
        elif role in ("tool", "function"):
            name = m.get("name") or names.get(str(m.get("tool_call_id")), "")
            block = f'<tool_response name="{name}">\n{m.get("content") or ""}\n</tool_response>'
            if out and out[-1].get("_tool_results"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_tool_results": True})
        else:
            out.append(m)
    return [{k: v for k, v in m.items() if k != "_tool_results"} for m in out]
