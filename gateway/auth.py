"""API key -> tenant. Keys are kept only as SHA-256 digests, compared in constant time, never logged."""

from __future__ import annotations

import hashlib
import hmac
import logging

from gateway.config.schema import Policy, TenantConfig
from gateway.errors import GatewayError

log = logging.getLogger("gateway.auth")

OPEN_TENANT = TenantConfig(name="default")


def key_digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class Authenticator:
    """Built once per policy. With no keys configured the gateway is open and everything is one tenant."""

    def __init__(self, policy: Policy) -> None:
        self._by_digest: dict[bytes, TenantConfig] = {}
        for tenant in policy.tenants:
            for key in tenant.api_keys:
                self._by_digest[key_digest(key)] = tenant
        self._admin = [key_digest(k) for k in policy.server.admin_keys]
        self._ops = [key_digest(k) for k in policy.server.ops.keys]
        self._ops_auth = policy.server.ops.auth
        self.open = not self._by_digest

    def tenant_for(self, authorization: str | None) -> TenantConfig:
        if self.open:
            return OPEN_TENANT
        key = _bearer(authorization)
        if key is None:
            raise GatewayError(401, "Missing API key: send 'Authorization: Bearer <key>'.", "invalid_request_error",
                               "missing_api_key")
        digest = key_digest(key)
        # The dict lookup is on a digest of the key, so its timing says nothing about the key itself; the final
        # compare_digest keeps the match check constant-time too.
        tenant = self._by_digest.get(digest)
        if tenant is None or not any(hmac.compare_digest(digest, key_digest(k)) for k in tenant.api_keys):
            raise GatewayError(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        return tenant

    def check_ops(self, authorization: str | None) -> None:
        """/ready and /metrics: open, or behind the admin keys, or behind the ops keys (admin keys work too)."""
        if self._ops_auth == "open":
            return
        key = _bearer(authorization)
        if key is None:
            raise GatewayError(401, "Missing key: send 'Authorization: Bearer <key>'.", "invalid_request_error",
                               "missing_api_key")
        digest = key_digest(key)
        allowed = self._admin + (self._ops if self._ops_auth == "key" else [])
        if not any(hmac.compare_digest(digest, a) for a in allowed):
            raise GatewayError(401, "Incorrect key provided.", "invalid_request_error", "invalid_api_key")

    def check_admin(self, authorization: str | None) -> None:
        key = _bearer(authorization)
        if not self._admin:
            raise GatewayError(403, "Admin endpoints are disabled: set server.admin_keys in the policy.",
                               "permission_error", "admin_disabled")
        if key is None:
            raise GatewayError(401, "Missing admin key.", "invalid_request_error", "missing_api_key")
        digest = key_digest(key)
        if not any(hmac.compare_digest(digest, a) for a in self._admin):
            raise GatewayError(401, "Incorrect admin key provided.", "invalid_request_error", "invalid_api_key")


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()
