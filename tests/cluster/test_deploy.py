"""deploy/multihost-compose.yaml checked by structure (no Docker engine here), like tests/test_compose.py does
for the one-host file: the commands it runs parse with the real CLIs, the policy it mounts passes `policy check`
and points at a Redis Cluster node and at the engine services, the load balancer fronts every gateway, and the
Redis nodes form a cluster that `redis-cli --cluster create` builds with a replica per master."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.cluster import MAX_PORT
from tests.test_compose import flag, host_path

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
COMPOSE = DEPLOY / "multihost-compose.yaml"


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def named(services: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {n: s for n, s in services.items() if re.fullmatch(rf"{prefix}-\d+", n)}


def mounts(service: dict[str, Any]) -> dict[str, Path]:
    """container path -> host path of the service's bind mounts (relative to the compose file)."""
    out = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        out[target] = (COMPOSE.parent / source).resolve()
    return out


def test_commands_parse_with_the_real_clis(services: dict[str, Any]) -> None:
    from engine.serving.cli import build_parser as engine_parser
    from gateway.cli import build_parser as gateway_parser

    gateways, engines = named(services, "gateway"), named(services, "engine")
    assert len(gateways) >= 2 and len(engines) >= 2
    for name, svc in {**gateways, **engines}.items():
        command = svc["command"]
        assert command[0] == "llm-gateway", name
        args = (gateway_parser().parse_args(command[1:]) if command[1] == "serve"
                else engine_parser().parse_args(command[2:]))  # SystemExit if a flag is wrong
        assert args.host == "0.0.0.0", name
        assert (DEPLOY / svc["build"] / "Dockerfile").resolve().is_file(), name
    for name in ("lb", "redis-init", *named(services, "redis"), *named(services, "vllm")):
        assert re.fullmatch(r"[\w./-]+:[\w.-]+", services[name]["image"]), f"{name}: pin the image to a tag"


def test_policy_passes_check_and_names_a_cluster_node_and_the_engines(services: dict[str, Any]) -> None:
    from gateway.config.loader import parse_policy

    for name, svc in named(services, "gateway").items():
        policy = mounts(svc)[flag(svc["command"], "--policy")]
        env = {**os.environ, **{k: str(v) for k, v in svc["environment"].items()}}
        result = subprocess.run([sys.executable, "-m", "gateway.cli", "policy", "check", str(policy)],
                                capture_output=True, text=True, timeout=120, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        parsed = parse_policy(policy.read_text(), str(policy), env=env)
        assert parsed.redis.mode in ("auto", "cluster")
        host, port = re.fullmatch(r"redis://([\w-]+):(\d+)", parsed.redis.url).groups()  # type: ignore[union-attr]
        assert flag(services[host]["command"], "--port") == port and host in named(services, "redis"), name
        engines = {f"http://{n}:{flag(s['command'], '--port')}" for n, s in named(services, "engine").items()}
        assert set(parsed.backends["pool"].urls) == engines, name
        deps = svc["depends_on"]
        assert deps["redis-init"]["condition"] == "service_completed_successfully"
        assert all(deps[e]["condition"] == "service_healthy" for e in named(services, "engine"))


def test_load_balancer_fronts_every_gateway(services: dict[str, Any]) -> None:
    lb = services["lb"]
    conf = mounts(lb)["/etc/nginx/nginx.conf"].read_text()
    upstream = set(re.findall(r"^\s*server\s+([\w-]+:\d+)", conf, re.M))
    gateways = {f"{n}:{flag(s['command'], '--port')}" for n, s in named(services, "gateway").items()}
    assert upstream == gateways
    assert "proxy_buffering off" in conf  # streamed answers are relayed as they come
    assert set(lb["depends_on"]) == set(named(services, "gateway"))
    listen = re.search(r"listen\s+(\d+)", conf).group(1)  # type: ignore[union-attr]
    assert {str(p).split(":")[-1] for p in lb["ports"]} == {listen}
    for svc in named(services, "gateway").values():  # the probe a load balancer uses: /ready, not /health
        assert "/ready" in " ".join(svc["healthcheck"]["test"])


def test_redis_nodes_form_a_cluster_with_a_replica_per_master(services: dict[str, Any]) -> None:
    nodes = named(services, "redis")
    assert len(nodes) == 6
    addresses = []
    for name, svc in nodes.items():
        command = svc["command"]
        assert command[0] == "redis-server" and flag(command, "--cluster-enabled") == "yes", name
        port = int(flag(command, "--port"))
        assert port <= MAX_PORT and svc["environment"]["REDIS_PORT"] == str(port), name  # bus: port + 10000
        assert flag(command, "--cluster-require-full-coverage") == "no", name  # other masters serve on
        addresses.append(f"{name}:{port}")
    init = " ".join(services["redis-init"]["command"])
    create = init[init.index("redis-cli --cluster create"):].split()
    assert create[3:3 + len(addresses)] == addresses
    assert flag(create, "--cluster-replicas") == "1" and "--cluster-yes" in create
    assert set(services["redis-init"]["depends_on"]) == set(nodes)


def test_bind_mounts_exist(services: dict[str, Any]) -> None:
    for name, svc in services.items():
        for volume in svc.get("volumes", []):
            path, _ = host_path(volume)
            assert path is not None and (COMPOSE.parent / volume.split(":")[0]).exists(), f"{name}: {volume}"
