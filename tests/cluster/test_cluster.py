"""The gateway on a real Redis Cluster (3 masters + 3 replicas), named by a plain redis:// URL of one node:
exact and semantic hits, tenant limits, two gateway processes sharing L1/L2/limits, purge across every master,
and a master killed mid-run. Through the official openai SDK. The failover test kills a master of the module's
cluster, so it runs last."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import redis
from redis.crc import key_slot

from gateway.appkeys import GATEWAY
from gateway.cache import keyspace as ks
from gateway.cache.keys import namespace_id
from gateway.redis_client import ClusterClient, scan_masters
from tests.cache.gateway_helpers import admin, semantic_ready, settle, stage
from tests.cluster.cluster import RedisCluster
from tests.helpers import free_port

MODEL = "fake-model"


def policy(upstream: str, tenants: dict[str, int | None], extra: str = "") -> str:
    """Tenants (name -> rpm limit or None), each with the key `key-<name>`; one route with L1 and L2."""
    listed = "\n".join(f"  - {{name: {t}, api_keys: [key-{t}]{f', limits: {{rpm: {rpm}}}' if rpm else ''}}}"
                        for t, rpm in tenants.items())
    return f"""{extra}
tenants:
{listed}
backends:
  up: {{type: openai, base_url: "{upstream}/v1", api_key: sk-up}}
routes:
  - match: {{model: {MODEL}}}
    backends: [up]
    cache: {{exact: {{ttl: 600}}, semantic: {{threshold: 0.9, ttl: 600}}}}
"""


def ask(url: str, tenant: str, text: str, **headers: str) -> tuple[str, str]:
    """(answer, X-Cache) of a deterministic chat; raises the SDK's error on a non-2xx."""
    client = openai.OpenAI(base_url=url + "/v1", api_key=f"key-{tenant}", max_retries=0, timeout=30)
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": text}], temperature=0, extra_headers=headers)
    return raw.parse().choices[0].message.content or "", raw.headers["x-cache"]


def until(predicate, what: str, deadline_s: float = 30.0):
    end = time.monotonic() + deadline_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < end, f"never: {what}"
        time.sleep(0.2)


def tenants_by_master(cluster: RedisCluster, count: int = 40) -> dict[int, list[str]]:
    """Tenant names grouped by the master that holds both their cache namespace and their limit counters."""
    grouped: dict[int, list[str]] = {}
    for i in range(count):
        name = f"t{i}"
        ns_port = cluster.master_port_of_slot(key_slot(ks.exact_index(namespace_id(name, MODEL)).encode()))
        limit_port = cluster.master_port_of_slot(key_slot(f"{{llmgw:{name}}}:rpm:0".encode()))
        if ns_port == limit_port:
            grouped.setdefault(ns_port, []).append(name)
    return grouped


def namespaced_keys(url: str) -> list[bytes]:
    from gateway.redis_client import create_redis
    from tests.helpers import LoopThread

    async def collect() -> list[bytes]:
        client = await create_redis(url, "auto", 1.0)
        try:
            return [k async for k in scan_masters(client, ks.NAMESPACED)]
        finally:
            await client.aclose()

    lt = LoopThread()
    try:
        return lt.run(collect())
    finally:
        lt.stop()


def metric(srv_url: str, name: str, *labels: str) -> float:
    """The sum of `name`'s series whose labels include every `labels` item (e.g. 'tenant="a"')."""
    text = httpx.get(srv_url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and all(label in line for label in labels))


def test_cluster_detected_hits_limits_and_purge(cluster: RedisCluster, cluster_url: str, fake_openai,
                                                serve_gateway) -> None:
    _, up = fake_openai
    groups = tenants_by_master(cluster)
    a, b = (names[0] for names in list(groups.values())[:2])  # two tenants whose keys live on different masters
    srv = serve_gateway(policy(up.url, {a: None, b: None, "capped": 3}), redis=cluster_url)
    assert isinstance(srv.app[GATEWAY].redis, ClusterClient)  # a plain URL of one node: detected as a cluster
    semantic_ready(srv)

    for tenant in (a, b):
        question = f"What is the capital of France, asks {tenant}?"
        answer, cache = ask(srv.url, tenant, question)
        assert (answer, cache) == (f"echo: {question}", "MISS")
        assert ask(srv.url, tenant, question) == (answer, "HIT-EXACT")
        settle(srv)
        got, cache = ask(srv.url, tenant, question.lower().rstrip("?"), **{"Cache-Control": "no-store"})
        assert (got, cache) == (answer, "HIT-SEMANTIC")
    # Entries of both namespaces are in the cluster, on their own masters.
    ports = {cluster.master_port_of_slot(key_slot(k)) for k in namespaced_keys(cluster_url)}
    assert len(ports) >= 2

    # rpm 3 (the window may roll over once during the loop: then 3 more)
    statuses = []
    for i in range(10):
        try:
            ask(srv.url, "capped", f"limit probe {i}")
            statuses.append(200)
        except openai.RateLimitError as e:
            statuses.append(e.status_code)
            assert e.response.headers.get("retry-after")
    assert 429 in statuses and statuses.count(200) <= 6
    assert metric(srv.url, "gateway_rate_limited_total", 'tenant="capped"', 'limit="rpm"') >= 1
    assert metric(srv.url, "gateway_redis_errors_total") == 0

    # Purge everything: per-namespace indexes, then a SCAN of every master for what no index lists.
    orphan = ks.exact_entry("orphan-ns", "d" * 64)
    with redis.RedisCluster.from_url(cluster_url) as plain:
        plain.set(orphan, b"{}")
    r = admin(srv, "DELETE", "/admin/cache")
    assert r.status_code == 200, r.text
    assert namespaced_keys(cluster_url) == []
    for tenant in (a, b):
        question = f"What is the capital of France, asks {tenant}?"
        assert ask(srv.url, tenant, question, **{"Cache-Control": "no-store"})[1] == "MISS"


def test_two_gateway_processes_share_l1_l2_and_limits(cluster: RedisCluster, cluster_url: str, fake_openai,
                                                      serve_gateway, tmp_path: Path) -> None:
    _, up = fake_openai
    tenant = "shared"
    text = policy(up.url, {tenant: None, "capped": 4}, extra=f'redis: {{url: "{cluster_url}", timeout_ms: 250}}\n'
                                                 f'server: {{data_dir: "{tmp_path}"}}')
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gateway.cli", "serve", "--policy", str(path), "--port",
                             str(port), "--log-level", "WARNING"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    other = f"http://127.0.0.1:{port}"
    try:
        local = serve_gateway(text)  # this process: the second gateway
        semantic_ready(local)

        def ready() -> bool:
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:] if proc.stderr else ""
            try:
                return httpx.get(other + "/ready", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        until(ready, "the gateway process became ready", 120)
        question = "How many moons does Mars have?"
        answer, cache = ask(other, tenant, question)
        assert cache == "MISS"
        assert ask(local.url, tenant, question) == (answer, "HIT-EXACT")  # L1 stored by the other process
        # L2: the entry reaches this process through the events stream on the cluster.
        until(lambda: ask(local.url, tenant, "How many moons does Mars have",
                          **{"Cache-Control": "no-store"}) == (answer, "HIT-SEMANTIC"),
              "this process served the other's semantic entry")
        # Limits: rpm 4 across both processes (10 requests: at most 8 pass, if a window rolls over once).
        refused = 0
        for i in range(10):
            try:
                ask(other if i % 2 else local.url, "capped", f"count me {i}")
            except openai.RateLimitError:
                refused += 1
        assert refused >= 2
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0


async def test_mode_auto_detects_and_an_explicit_mode_forces(cluster: RedisCluster, redis_url: str) -> None:
    from gateway.redis_client import create_redis

    clients = [await create_redis(cluster.url, "auto", 0.25), await create_redis(redis_url, "auto", 0.25),
               await create_redis(cluster.url, "single", 0.25), await create_redis(cluster.url, "cluster", 0.25)]
    try:
        assert [isinstance(c, ClusterClient) for c in clients] == [True, False, False, True]
        await clients[3].set("{k}:1", b"v")
        assert await clients[0].get("{k}:1") == b"v"
    finally:
        for client in clients:
            await client.aclose()


def test_redis_mode_is_validated() -> None:
    from gateway.config.errors import PolicyError
    from gateway.config.loader import parse_policy

    base = "backends: {up: {type: openai, base_url: 'http://127.0.0.1:1/v1'}}\nroutes: [{match: {model: m}, backends: [up]}]\n"
    assert parse_policy(base + "redis: {url: 'redis://h:7001', mode: cluster}", "p.yaml").redis.mode == "cluster"
    assert parse_policy(base, "p.yaml").redis.mode == "auto"
    for bad, message in (("{url: 'redis://h:1', mode: sharded}", "must be one of auto, cluster, single"),
                         ("{mode: cluster}", "needs a redis:// URL"), ("{url: 'redis://h:1', mode: 1}", "string")):
        try:
            parse_policy(base + f"redis: {bad}", "p.yaml")
        except PolicyError as e:
            assert "redis.mode" in str(e) and message in str(e), str(e)
        else:
            raise AssertionError(f"accepted redis: {bad}")


def test_a_killed_master_costs_misses_not_errors_and_hits_come_back(cluster: RedisCluster, cluster_url: str,
                                                                   fake_openai, serve_gateway) -> None:
    """Runs last: it leaves the module's cluster with a replica promoted in place of the killed master."""
    _, up = fake_openai
    groups = tenants_by_master(cluster)
    (dead_port, doomed), (_live_port, survivors) = list(groups.items())[:2]
    victim, healthy = doomed[0], survivors[0]
    srv = serve_gateway(policy(up.url, {victim: 1000, healthy: 1000}), redis=cluster_url)
    semantic_ready(srv)
    questions = {t: f"Which river flows through Paris, {t}?" for t in (victim, healthy)}
    answers = {}
    for tenant, question in questions.items():
        answers[tenant], _ = ask(srv.url, tenant, question)
        assert ask(srv.url, tenant, question) == (answers[tenant], "HIT-EXACT")
    settle(srv)
    master = next(n for n in cluster.nodes if n.port == dead_port)
    master.client.execute_command("WAIT", 1, 2000)  # the replica has the entries before the master dies

    cluster.kill(master)
    lookup_guard = stage(srv).lookup_guard
    seen: list[str] = []
    deadline = time.monotonic() + 30
    while True:  # every answer is a 200: misses while the slot map points at the dead master, never errors
        answer, cache = ask(srv.url, victim, questions[victim], **{"Cache-Control": "no-store"})
        assert answer == answers[victim]
        seen.append(cache)
        # keys on the healthy masters are served all along: the dead master opened only its own breaker
        assert ask(srv.url, healthy, questions[healthy]) == (answers[healthy], "HIT-EXACT")
        if cache == "HIT-EXACT" and "MISS" in seen:
            break
        assert time.monotonic() < deadline, f"the victim's hits never came back: {seen[-10:]}"
        time.sleep(0.1)
    assert any(f":{dead_port}" in node for node in lookup_guard._breakers)  # the dead node had its own breaker
    cluster.wait_promoted(master)
    # Semantic hits come back too (the entry was replicated), and a new store lands on the promoted master.
    paraphrase = questions[victim].rstrip("?")  # same semantic text (punctuation folded), another exact key
    assert ask(srv.url, victim, paraphrase, **{"Cache-Control": "no-store"}) == (answers[victim], "HIT-SEMANTIC")
    fresh = "A question asked after the failover?"
    ask(srv.url, victim, fresh)
    assert ask(srv.url, victim, fresh)[1] == "HIT-EXACT"
    assert metric(srv.url, "gateway_requests_total", 'status="200"') >= len(seen) * 2
    assert not any(f'status="5{d}' in line for d in "0123456789"
                   for line in httpx.get(srv.url + "/metrics").text.splitlines()
                   if line.startswith("gateway_requests_total{") and not line.endswith(" 0.0"))

