"""The context stage: count, fit, compress and order the prompt before it is forwarded.

It works on a copy of the request (the cache stage already keyed on `ctx.body`) and replaces
`ctx.forward_body`. Routes without a `budget:` / `compression:` / `ordering:` section only lose the
`documents` extension field, which is never forwarded. The response carries `X-Token-Budget`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from gateway.backends.anthropic_format import default_max_tokens as anthropic_default_max_tokens
from gateway.backends.anthropic_format import thinking_budget
from gateway.backends.engine_options import DEFAULT_MODEL as ENGINE_DEFAULT_MODEL
from gateway.config.schema import BackendConfig
from gateway.context import models
from gateway.context.budget import Assembled, Plan, finish, plan, split_conversation
from gateway.context.compress import parse_documents
from gateway.context.config import ContextConfig
from gateway.context.engine_tokens import engine_counter
from gateway.context.metrics import ContextMetrics, context_metrics
from gateway.context.ordering import add_breakpoints, canonical_tools
from gateway.context.summarize import Summarizer, SummaryRequest
from gateway.context.tokens import TokenCounter, counter_for_upstream, estimate_counter
from gateway.errors import GatewayError, bad_request
from gateway.pipeline import CHAT, RequestContext, Resources
from gateway.redis_guard import RedisGuard

log = logging.getLogger("gateway.context")

BUDGET_HEADER = "X-Token-Budget"
OFFLOAD_CHARS = 64_000  # requests with more text than this are assembled on a worker thread
REASONING_FAMILIES = ("o1", "o3", "o4", "gpt-5")  # OpenAI models that take max_completion_tokens


class ContextStage:
    endpoints = frozenset({CHAT})  # it fits `messages`: a legacy `prompt` has none

    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        self.metrics: ContextMetrics = context_metrics(resources.metrics)
        policy = resources.get_policy()
        guard = RedisGuard(resources.metrics, "context", max(policy.redis.timeout_ms / 1000, 0.05))
        self.summarizer = Summarizer(resources.backends, resources.redis, guard, self.metrics)
        self._preloads: list[asyncio.Task] = []

    def preload(self) -> None:
        """Start loading engine tokenizers for the routes that will need them (seconds each, off the loop)."""
        policy = self.resources.get_policy()
        wanted = set()
        for route in policy.routes:
            if route.context is None:
                continue
            for b in route.backends:  # any of them may be the one assembled for (see _target)
                target = policy.backends.get(b.name)
                if target is not None and target.type == "engine":
                    wanted.add(target.model or ENGINE_DEFAULT_MODEL)
        self._preloads = [asyncio.create_task(self._engine_counter(m)) for m in sorted(wanted)]

    async def before(self, ctx: RequestContext) -> dict | None:
        config: ContextConfig | None = ctx.route.context
        body = ctx.forward_body
        if config is None:
            if "documents" in body:
                ctx.forward_body = {k: v for k, v in body.items() if k != "documents"}
            return None
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise bad_request("'messages' must be a list of message objects", param="messages")
        documents = parse_documents(body.get("documents"))
        target = self._target(ctx)
        counter = await self._counter(target)
        # No window known (neither policy nor table, for any backend): None, and assembly takes no destructive step.
        window = config.budget.context_window or target.window
        reserved, asked_key = reserve_output(body, config, target, window)
        tools = body.get("tools")
        if isinstance(tools, list) and tools and config.ordering.enabled and config.ordering.sort_tools:
            tools = canonical_tools(tools)
        elif not isinstance(tools, list) or not tools:
            tools = None

        started = time.perf_counter()
        large = _text_size(messages, documents) > OFFLOAD_CHARS
        conversation = split_conversation(messages)
        try:
            p = await _run(large, plan, counter, config, window, reserved, conversation, documents, tools, messages)
        except GatewayError:
            self.metrics.rejected.inc()
            raise
        elapsed = time.perf_counter() - started
        summary_text = await self._summarise(ctx, config, p) if p.summary_max_tokens > 0 else None
        started = time.perf_counter()
        assembled = await _run(large, finish, p, summary_text)
        self.metrics.assembly_seconds.observe(elapsed + time.perf_counter() - started)

        price = config.budget.input_price_per_mtok
        info = target.info
        assembled.report.input_price_per_mtok = price if price is not None else (info.input_price if info else 0.0)
        out = {k: v for k, v in body.items() if k != "documents"}
        out["messages"], tools = self._place_breakpoints(assembled, config, target)
        if tools is not None:
            out["tools"] = tools
        _set_output_limit(out, body, asked_key, reserved, target)
        ctx.forward_body = out
        ctx.response_headers[BUDGET_HEADER] = assembled.report.header()
        ctx.budget_report = assembled.report
        self._count(config, assembled)
        return None

    async def after(self, ctx: RequestContext, completion: dict) -> None:
        usage = completion.get("usage") if isinstance(completion, dict) else None
        details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        if isinstance(cached, int) and not isinstance(cached, bool) and cached > 0:
            self.metrics.tokens.labels("cached_upstream").inc(cached)
        report = ctx.budget_report
        if report is not None and report.saved > 0:
            self.metrics.tokens.labels("saved_by_compression").inc(report.saved)
            self.metrics.saved_dollars.inc(report.saved_usd)

    async def close(self) -> None:
        for task in self._preloads:
            task.cancel()

    # ---- helpers -------------------------------------------------------------------------------------------

    def _target(self, ctx: RequestContext) -> Target:
        """The backend to assemble for, with limits every backend of the route can take. A weighted,
        least-loaded or prefix-aware route may send the request to any of its backends, and the choice comes
        after this stage. The tokenizer is that of the backend with the smallest known window (the first on a
        tie, or when none is known). The window is the smallest of them, or unknown when any backend's is
        unknown (an unknown one may be smaller: no destructive step then); the output cap is the smallest
        known one; and `max_completion_tokens` is the key when any backend is an OpenAI reasoning model.
        Fallbacks are not counted: they answer only when the route's backends fail."""
        backends = ctx.policy.backends
        names = [b.name for b in ctx.route.backends] + list(ctx.route.fallbacks)
        anthropic_only = all(n in backends and backends[n].type == "anthropic" for n in names)
        # The policy loader keeps no route without backends, nor one that names an undefined backend.
        assert ctx.route.backends and all(b.name in backends for b in ctx.route.backends), ctx.route.backends
        targets = [_target_of(backends[b.name], ctx.model, anthropic_only) for b in ctx.route.backends]
        known = [(t.window, i) for i, t in enumerate(targets) if t.window is not None]
        caps = [t.max_output for t in targets if t.max_output is not None]
        return replace(
            targets[min(known)[1]] if known else targets[0],
            window=min(known)[0] if len(known) == len(targets) else None,
            max_output=min(caps, default=None),
            reasoning=any(t.reasoning for t in targets),
        )

    async def _counter(self, target: Target) -> TokenCounter:
        if target.kind == "engine":
            return await self._engine_counter(target.model)
        return counter_for_upstream(target.kind, target.model)

    @staticmethod
    async def _engine_counter(model: str) -> TokenCounter:
        try:
            return await engine_counter(model)
        except (ImportError, OSError, ValueError) as e:  # a remote replica's model we cannot load here: estimate
            log.warning("no local tokenizer for engine model %r (%s); token counts are estimates", model, e)
            return estimate_counter("engine")

    async def _summarise(self, ctx: RequestContext, config: ContextConfig, p: Plan) -> str | None:
        name = config.conversation.summarizer or ""
        backend = ctx.policy.backends.get(name)
        model = config.conversation.model or (backend.model if backend is not None else None) or ctx.model
        summary = await self.summarizer.summarize(
            SummaryRequest(
                tenant=ctx.tenant.name,
                backend=name,
                model=model,
                units=p.older,
                max_tokens=p.summary_max_tokens,
                timeout_s=config.conversation.timeout_s,
                ttl_s=config.conversation.cache_ttl_s,
            )
        )
        p.report.summary_result = summary.result
        return summary.text

    def _place_breakpoints(
        self, assembled: Assembled, config: ContextConfig, target: Target
    ) -> tuple[list[dict], list | None]:
        """Anthropic cache breakpoints, only when every backend the route may use is Anthropic (OpenAI would
        reject the unknown `cache_control` field on a fallback)."""
        if not (target.anthropic_only and config.ordering.enabled and config.ordering.cache_breakpoints):
            return assembled.messages, assembled.tools
        info = target.info
        minimum = info.cache_min_tokens if info and info.cache_min_tokens else models.ANTHROPIC_DEFAULT_CACHE_MIN
        messages, tools, added = add_breakpoints(
            assembled.messages, assembled.tools, assembled.boundaries, assembled.report.tools, minimum
        )
        self.metrics.breakpoints.inc(added)
        return messages, tools

    def _count(self, config: ContextConfig, assembled: Assembled) -> None:
        r = assembled.report
        for action, n in (
            ("kept", r.documents_kept - r.documents_truncated),
            ("truncated", r.documents_truncated),
            ("duplicate", r.documents_duplicate),
            ("dropped", r.documents_dropped),
        ):
            if n:
                self.metrics.documents.labels(action).inc(n)
        if r.summary_result == "no_room":  # the summariser was not asked: no room left for a summary
            self.metrics.summaries.labels("no_room").inc()
        if r.messages_dropped:
            if r.summary_result in ("error", "timeout"):
                reason = "summarizer_failed"
            elif not config.conversation.summarizer:
                reason = "no_summarizer"
            else:
                reason = "over_budget"
            self.metrics.dropped_messages.labels(reason).inc(r.messages_dropped)


@dataclass(frozen=True, slots=True)
class Target:
    """The backend the request is assembled for (its tokenizer, prices, defaults) and, from `_target`, the
    limits of all the backends the route may send it to."""

    kind: str  # backend type: openai | anthropic | engine
    model: str  # the model name the backend sees
    anthropic_only: bool  # every backend and fallback of the route is Anthropic
    info: models.ModelInfo | None
    default_max_tokens: int | None = None  # the backend's own output limit when the client sends none
    window: int | None = None  # context window in tokens; None: not known
    max_output: int | None = None  # cap on output tokens; None: not known
    reasoning: bool = False  # an OpenAI reasoning model, which takes max_completion_tokens, not max_tokens


def _target_of(backend: BackendConfig, requested: str, anthropic_only: bool) -> Target:
    # An engine serves its configured model whatever the request calls it; upstreams may rename it.
    model = backend.model or (ENGINE_DEFAULT_MODEL if backend.type == "engine" else requested)
    default_max = anthropic_default_max_tokens(backend.options) if backend.type == "anthropic" else None
    info = models.lookup(model)
    windows = [info.window] if info is not None and info.window else []
    if backend.type == "engine" and backend.options.get("max_model_len"):
        windows.append(backend.options["max_model_len"])  # the engine refuses a longer prompt plus output
    return Target(
        backend.type, model, anthropic_only, info, default_max,
        window=min(windows, default=None),
        max_output=info.max_output if info is not None and info.max_output else None,
        reasoning=backend.type == "openai" and model.startswith(REASONING_FAMILIES),
    )


async def _run(large: bool, fn: Any, *args: Any) -> Any:
    """Large requests are assembled on a worker thread so the event loop keeps serving."""
    return await asyncio.to_thread(fn, *args) if large else fn(*args)


def _set_output_limit(out: dict, body: dict, asked_key: str | None, reserved: int | None, target: Target) -> None:
    """Forward the reserved output as the request's limit: set it when the client gave none, cap it when the
    policy allows less than asked. Nothing reserved (window unknown, no default): the backend's default holds."""
    if reserved is None:
        return
    if asked_key is None and target.default_max_tokens is not None:
        # Anthropic: the backend sends its default_max_tokens (plus any thinking budget) by itself; set a limit
        # only when the route allows less, so the backend's default is what goes upstream.
        if reserved < target.default_max_tokens + thinking_budget(body):
            out["max_tokens"] = reserved
        return
    if asked_key is None:
        out["max_completion_tokens" if target.reasoning else "max_tokens"] = reserved
    elif body[asked_key] > reserved:
        out[asked_key] = reserved


def reserve_output(
    body: dict, config: ContextConfig, target: Target, window: int | None
) -> tuple[int | None, str | None]:
    """(tokens reserved for the answer, the body key the client used for it or None).

    Without a client limit: the route's `budget.max_output_tokens`, else the backend's own default (Anthropic's
    `default_max_tokens`: the limit it would send anyway), else the strategy's share of the window; None when
    none of these exists (window unknown), so nothing is reserved and nothing is set."""
    asked_key = next((k for k in ("max_completion_tokens", "max_tokens") if body.get(k) is not None), None)
    caps = [c for c in (config.budget.max_output_tokens, target.max_output) if c]
    if asked_key is not None:
        asked = body[asked_key]
        if isinstance(asked, bool) or not isinstance(asked, int) or asked < 1:
            raise bad_request(f"'{asked_key}' must be a positive integer", param=asked_key)
        return min([asked, *caps]), asked_key
    default = config.budget.max_output_tokens
    if default is None and target.default_max_tokens is not None:  # thinking tokens count toward max_tokens
        default = target.default_max_tokens + thinking_budget(body)
    if default is None and window is not None:
        default = int(window * config.budget.split.output)
    if default is None:
        return None, None
    return max(1, min([default, *caps])), None


def _text_size(messages: list[dict], documents: list) -> int:
    size = sum(len(d.content) for d in documents)
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            size += len(content)
        elif isinstance(content, list):
            size += sum(len(p.get("text") or "") for p in content if isinstance(p, dict))
    return size


async def create_stage(resources: Resources) -> ContextStage:
    stage = ContextStage(resources)
    stage.preload()
    return stage
