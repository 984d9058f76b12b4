"""`llm-gateway`: serve, engine, policy check, bench."""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing
import os
import signal
import socket
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

log = logging.getLogger("gateway")


def default_policy_path() -> Path:
    return Path(str(files("gateway.config") / "default.yaml"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llm-gateway", description="OpenAI-compatible LLM gateway")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument("--policy", help="policy YAML (default: the embedded default policy)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--workers", type=int, default=1, help="processes sharing the port (SO_REUSEPORT)")
    serve.add_argument("--log-level", default="INFO")
    sub.add_parser("engine", help="run one engine replica (see `llm-gateway engine --help`)", add_help=False)
    policy = sub.add_parser("policy", help="policy tools")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True)
    policy_sub.add_parser("check", help="validate a policy file", add_help=False)
    sub.add_parser("bench", help="load test a gateway or engine (see `llm-gateway bench --help`)", add_help=False)
    cache = sub.add_parser("cache", help="semantic cache tools")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True)
    cache_sub.add_parser("calibrate", help="recall and wrong answers per threshold on labelled pairs "
                                           "(see `llm-gateway cache calibrate --help`)", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Subcommands with their own parsers get the rest of the line untouched.
    if argv[:1] == ["engine"]:
        from engine import main as engine_main

        return engine_main(argv[1:])
    if argv[:2] == ["policy", "check"]:
        from gateway.config.check import main as check_main

        return check_main(argv[2:])
    if argv[:1] == ["bench"]:
        from gateway.loadtest import main as bench_main

        return bench_main(argv[1:])
    if argv[:2] == ["cache", "calibrate"]:
        from gateway.cache.calibrate import main as calibrate_main

        return calibrate_main(argv[2:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return serve(args)


def serve(args: argparse.Namespace) -> int:
    from gateway.config.errors import PolicyError
    from gateway.config.loader import load_policy
    from gateway.embedded_redis import EmbeddedRedis

    path = Path(args.policy) if args.policy else default_policy_path()
    try:
        policy = load_policy(path)
    except (PolicyError, OSError) as e:
        errors = getattr(e, "errors", None) or [e]
        for err in errors:
            print(err, file=sys.stderr)
        return 1
    embedded = None
    redis_url = policy.redis.url
    if redis_url == "embedded":
        # This is its one owner (a Gateway refuses 'embedded'): started once here, before any worker, so they
        # all share it and a restarted worker finds it; stopped when the last worker has exited.
        embedded = EmbeddedRedis(policy.server.data_dir).start()
        redis_url = embedded.url
    watch = str(path) if args.policy else None
    try:
        if args.workers <= 1:
            run_worker(str(path), watch, redis_url, args.host, args.port, reuse_port=False)
        else:
            run_workers(args, str(path), watch, redis_url)
    finally:
        if embedded is not None:
            embedded.stop()
    return 0


def entry() -> None:
    """The `llm-gateway` command: main(), then the process ends without interpreter finalisation: native
    threads of torch, onnxruntime and triton still alive then can abort it (SIGABRT), and a supervisor would
    read a clean stop as a crash. Everything the gateway owns is closed by then."""
    _exit_now(main())


def _exit_now(code: int) -> None:
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_worker(policy_path: str, watch: str | None, redis_url: str, host: str, port: int, reuse_port: bool) -> None:
    from gateway.app import create_app
    from gateway.config.loader import load_policy

    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        log.info("uvloop not available; using asyncio's loop")
    policy = load_policy(policy_path)
    sock = None
    if reuse_port:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    log.info("llm-gateway worker %d serving on http://%s:%d", os.getpid(), host, port)
    asyncio.run(_serve_app(lambda: create_app(policy, redis_url=redis_url, policy_path=watch), host, port, sock))


async def _serve_app(make_app: Any, host: str, port: int, sock: socket.socket | None) -> None:
    """The port through gateway/front.py (the generation endpoints) and aiohttp (the rest) until SIGTERM or
    SIGINT, then a graceful stop as `web.run_app`'s: stop accepting, let requests in flight finish (5 s),
    close the Gateway."""
    from aiohttp import web

    from gateway.front import Front

    runner = web.AppRunner(make_app(), handler_cancellation=True, access_log=None, shutdown_timeout=5)
    await runner.setup()  # the app's start-up: the Gateway starts here
    front = Front(runner)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await front.start(None if sock else host, None if sock else port, sock=sock)
        await stop.wait()
    finally:
        await front.close(5)
        await runner.cleanup()


def _worker_entry(policy_path: str, watch: str | None, redis_url: str, host: str, port: int, level: str) -> None:
    logging.basicConfig(level=level, format=f"%(asctime)s %(levelname)s [w{os.getpid()}] %(name)s: %(message)s")
    run_worker(policy_path, watch, redis_url, host, port, reuse_port=True)


def run_workers(args: argparse.Namespace, policy_path: str, watch: str | None, redis_url: str) -> None:
    """N processes on one port; the kernel spreads connections. They share state only through Redis."""
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_worker_entry, args=(policy_path, watch, redis_url, args.host, args.port, args.log_level.upper()))
        for _ in range(args.workers)
    ]
    for p in procs:
        p.start()
    stopping = False

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        if signum in (signal.SIGINT, signal.SIGTERM):
            stopping = True
        for p in procs:
            if p.pid and p.is_alive():
                os.kill(p.pid, signal.SIGTERM if signum == signal.SIGINT else signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    log.info("llm-gateway serving on http://%s:%d with %d workers", args.host, args.port, args.workers)
    while not stopping:
        for i, p in enumerate(procs):
            p.join(0.5)
            if not p.is_alive() and not stopping:
                log.error("worker %d exited with %s; restarting it", p.pid, p.exitcode)
                procs[i] = ctx.Process(target=_worker_entry, args=(policy_path, watch, redis_url, args.host,
                                                                    args.port, args.log_level.upper()))
                procs[i].start()
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()


if __name__ == "__main__":
    entry()
