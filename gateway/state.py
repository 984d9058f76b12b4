"""What the handlers read: one immutable snapshot per policy, swapped whole on reload.

A request takes the snapshot once at its start, so it finishes on the policy, tenants and backends it began
with even if a reload lands meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from gateway.auth import Authenticator
from gateway.backends.base import Backend
from gateway.config.schema import BackendConfig, Policy
from gateway.metrics import Metrics

log = logging.getLogger("gateway")


class Backends:
    """The policy's backends by name (implements the BackendPool protocol)."""

    def __init__(self, backends: dict[str, Backend], configs: dict[str, BackendConfig]) -> None:
        self._backends = backends
        self.configs = configs

    def get(self, name: str) -> Backend:
        return self._backends[name]

    def names(self) -> list[str]:
        return list(self._backends)

    def items(self) -> list[tuple[str, Backend]]:
        return list(self._backends.items())

    @classmethod
    async def build(cls, policy: Policy, metrics: Metrics, reuse: Backends | None = None) -> tuple[Backends, list[Backend]]:
        """Backends for `policy`, reusing those of `reuse` whose config did not change.

        Returns the new set and the old backends no longer used (to close once their requests are done).
        """
        from gateway.backends import build_backend
        from gateway.backends.admission import gate

        backends: dict[str, Backend] = {}
        started: list[Backend] = []
        try:
            for name, config in policy.backends.items():
                if reuse is not None and reuse.configs.get(name) == config:
                    backends[name] = reuse.get(name)
                    continue
                backend = build_backend(config, metrics)
                await backend.start()
                started.append(backend)
                backends[name] = gate(backend, config.max_inflight, config.max_queued, metrics, config.tenant_share)
        except BaseException:
            for backend in started:
                await backend.close()
            raise
        kept = {id(b) for b in backends.values()}
        retired = [b for _, b in (reuse.items() if reuse else []) if id(b) not in kept]
        return cls(backends, dict(policy.backends)), retired

    async def close(self) -> None:
        await asyncio.gather(*(b.close() for b in self._backends.values()), return_exceptions=True)


@dataclass(frozen=True, slots=True)
class Snapshot:
    policy: Policy
    auth: Authenticator
    backends: Backends
