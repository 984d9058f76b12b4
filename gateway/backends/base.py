"""What every backend offers the gateway, and the error it raises."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.errors import GatewayError
from gateway.pipeline import CHAT, COMPLETIONS, EMBEDDINGS, Endpoint


@dataclass(frozen=True, slots=True)
class Timeouts:
    connect: float = 5.0  # seconds to open the connection
    first_byte: float = 60.0  # seconds until the response headers / first stream chunk
    total: float = 600.0  # seconds for the whole exchange


class BackendError(Exception):
    """A failed backend call.

    `reason` is the metric label: connect, timeout, status_429, status_4xx, status_5xx, protocol, and
    bad_request / unsupported for requests a backend cannot express (400, not retried, not counted).
    `retryable` says whether retries/fallbacks may try again (connect errors, 429, 5xx, timeouts before the
    first byte). `body` is the upstream's error envelope when it sent one, passed through for 4xx.
    `message` is for the log (it may name internal URLs or quote an upstream's error page); clients get a
    generic message with their request id (see `to_gateway_error`). `backend` is set by the router to the
    backend that produced the error.
    """

    def __init__(
        self,
        reason: str,
        message: str,
        status: int = 502,
        retryable: bool = False,
        body: dict | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.status = status
        self.retryable = retryable
        self.body = body
        self.retry_after = retry_after
        self.backend: str | None = None

    @property
    def refused_request(self) -> bool:
        """The upstream refused this request itself (a 4xx other than auth and rate limiting): its explanation
        is the client's to read, and a caller may retry without the part the upstream refused."""
        return 400 <= self.status < 500 and self.status not in (401, 403, 429)

    def to_gateway_error(self, request_id: str | None = None) -> GatewayError:
        headers = {"Retry-After": str(max(1, round(self.retry_after)))} if self.retry_after is not None else None
        ref = f" (request id {request_id})" if request_id else ""
        if self.status in (401, 403):
            # The upstream refused the gateway's own credentials: not the client's key, and its message may
            # quote part of ours.
            return GatewayError(502, f"The upstream refused the gateway's credentials ({self.status}){ref}.",
                                "upstream_error", "upstream_auth_error")
        err = (self.body or {}).get("error") if isinstance(self.body, dict) else None
        if self.reason in OWN_REASONS:  # the gateway's own words about the request: safe and useful
            return GatewayError(self.status, self.message, "invalid_request_error" if self.status < 500 else
                                "upstream_error", self.reason, err.get("param") if isinstance(err, dict) else None,
                                headers=headers)
        if isinstance(err, dict) and self.refused_request:
            # The upstream's explanation of the client's own mistake (a bad parameter, a prompt too long).
            return GatewayError(
                self.status,
                str(err.get("message", self.message)),
                str(err.get("type") or "invalid_request_error"),
                err.get("code"),
                err.get("param"),
                headers,
            )
        if self.reason == "timeout":
            return GatewayError(504, f"The upstream did not answer in time{ref}.", "timeout_error", "upstream_timeout")
        status = self.status if 400 <= self.status < 600 else 502
        # The upstream's own error type when it named one (Anthropic's overloaded_error, api_error, ...).
        kind = str(err["type"]) if isinstance(err, dict) and err.get("type") else "upstream_error"
        message = GENERIC_MESSAGES.get(self.reason, "The upstream failed") + (
            f" (HTTP {self.status})" if self.reason.startswith("status_") else "")
        return GatewayError(status, message + ref + ".", kind, self.reason, headers=headers)


# What a tenant is told about an upstream failure; the details (URLs, upstream error pages) go to the log.
GENERIC_MESSAGES = {
    "connect": "The upstream could not be reached",
    "protocol": "The upstream sent a malformed response",
    "status_429": "The upstream is rate limiting the gateway",
    "status_4xx": "The upstream refused the request",
    "status_5xx": "The upstream failed",
}
# Reasons whose message the gateway wrote itself about the client's request (never upstream text).
OWN_REASONS = frozenset({"bad_request", "unsupported", "overloaded", "shed"})


class Backend(Protocol):
    name: str

    async def start(self) -> None: ...
    async def close(self) -> None: ...

    async def chat(self, body: dict, timeouts: Timeouts) -> dict:
        """Non-streaming chat completion; returns an OpenAI `chat.completion` dict."""
        ...

    def chat_stream(self, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]:
        """Yields OpenAI `chat.completion.chunk` dicts as they arrive (a usage-only chunk last when
        `stream_options.include_usage` was asked). Raises BackendError before or during the stream.
        Closing the iterator (aclose) must close the upstream request at once."""
        ...

    async def completions(self, body: dict, timeouts: Timeouts) -> dict: ...
    def completions_stream(self, body: dict, timeouts: Timeouts) -> AsyncIterator[dict]: ...
    async def embeddings(self, body: dict, timeouts: Timeouts) -> dict: ...

    async def list_models(self) -> list[str]:
        """The backend's own model names (for /v1/models glob routes)."""
        ...

    async def check_ready(self) -> str | None:
        """None when reachable, else a short reason for /ready."""
        ...


# The backend call for each endpoint, explicit (never a method name looked up by string): the handlers and the
# engine replicas backend dispatch through these.
WHOLE: dict[Endpoint, Callable[[Backend, dict, Timeouts], Awaitable[dict]]] = {
    CHAT: lambda b, body, t: b.chat(body, t),
    COMPLETIONS: lambda b, body, t: b.completions(body, t),
    EMBEDDINGS: lambda b, body, t: b.embeddings(body, t),
}
STREAMED: dict[Endpoint, Callable[[Backend, dict, Timeouts], AsyncIterator[dict]]] = {
    CHAT: lambda b, body, t: b.chat_stream(body, t),
    COMPLETIONS: lambda b, body, t: b.completions_stream(body, t),
}


class BackendPool(Protocol):
    def get(self, name: str) -> Backend: ...
    def names(self) -> list[str]: ...
