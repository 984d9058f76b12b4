"""Dollar budgets on a Redis Cluster: two gateway processes (this one and `llm-gateway serve`) refuse a tenant
once its daily budget is spent; its spend keys and usage hours sit in the tenant's one slot."""

from __future__ import annotations

import signal

import redis
from redis.crc import key_slot

from tests.cluster.cluster import RedisCluster
from tests.usage.budget_helpers import assert_budget_holds_across, budget_policy, serve_process


def test_two_processes_refuse_a_tenant_over_its_budget_on_a_cluster(cluster: RedisCluster, cluster_url: str,
                                                                    fake_openai, serve_gateway, tmp_path) -> None:
    _, up = fake_openai
    text = budget_policy(up.url, cluster_url, tmp_path)
    proc, other = serve_process(text, tmp_path)
    try:
        local = serve_gateway(text, redis=cluster_url)
        assert_budget_holds_across(local.url, other)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    client = redis.RedisCluster.from_url(cluster_url)
    try:
        keys = [k for k in client.scan_iter(match="{llmgw:team-a}:*", target_nodes=redis.RedisCluster.ALL_NODES)]
    finally:
        client.close()
    assert any(b":usd:d:" in k for k in keys) and any(b":usage:" in k for k in keys)
    assert {key_slot(k) for k in keys} == {key_slot(b"{llmgw:team-a}")}
