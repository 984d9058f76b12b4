"""Cache test fixtures: the real embedding model, once per session (fakes and gateways: tests/conftest.py)."""

from __future__ import annotations

import pytest

from gateway.cache.embedder import MiniLMEmbedder, shared_embedder


@pytest.fixture(scope="session")
def embedder() -> MiniLMEmbedder:
    return shared_embedder()
