"""Backends: where a routed request is answered. `build_backend` makes one from its policy entry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.backends.base import Backend, BackendError, Timeouts

if TYPE_CHECKING:
    from gateway.config.schema import BackendConfig
    from gateway.metrics import Metrics

__all__ = ["Backend", "BackendError", "Timeouts", "build_backend"]


def build_backend(config: BackendConfig, metrics: Metrics) -> Backend:
    """The backend for `config.type`; the engine is imported only when a policy uses it (it pulls in torch)."""
    if config.type == "openai":
        from gateway.backends.openai import OpenAIBackend

        return OpenAIBackend(config, metrics)
    if config.type == "anthropic":
        from gateway.backends.anthropic import AnthropicBackend

        return AnthropicBackend(config, metrics)
    if config.type == "engine":
        from gateway.backends.engine import engine_backend

        return engine_backend(config, metrics)
    raise ValueError(f"backend {config.name!r}: unknown type {config.type!r} (openai, anthropic, engine)")
