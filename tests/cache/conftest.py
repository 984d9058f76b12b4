"""Cache test fixtures: the real embedding model, once per session, and a gateway with L1 and L2 on (fakes and
the gateway factory: tests/conftest.py)."""

from __future__ import annotations

import pytest

from gateway.cache.embedder import MiniLMEmbedder, shared_embedder


@pytest.fixture(scope="session")
def embedder() -> MiniLMEmbedder:
    return shared_embedder()


@pytest.fixture
async def worker(embedder: MiniLMEmbedder):
    """A semantic worker on the session's model, loaded, closed after the test."""
    from gateway.cache.embedder import DIM
    from gateway.cache.worker import SemanticWorker

    worker = SemanticWorker(lambda: embedder, DIM)
    assert await worker.wait_ready_or_load()
    yield worker
    await worker.close()


@pytest.fixture
def gw(fake_openai, serve_gateway):
    """(fake upstream, gateway) with both layers on (tests.cache.gateway_helpers.policy), model loaded."""
    from tests.cache.gateway_helpers import policy, semantic_ready

    fake, up = fake_openai
    srv = serve_gateway(policy(up.url))
    semantic_ready(srv)
    return fake, srv
