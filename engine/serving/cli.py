"""`llm-gateway engine ...`: one engine replica as its own OpenAI-compatible server."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import re
import signal
import sys

from aiohttp import web

from engine.config import DEFAULT_MODEL

log = logging.getLogger("engine")

_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "kib": 2**10,
    "m": 10**6, "mb": 10**6, "mib": 2**20,
    "g": 10**9, "gb": 10**9, "gib": 2**30,
    "t": 10**12, "tb": 10**12, "tib": 2**40,
}


def parse_size(text: str) -> int:
    """'536870912', '512MiB', '0.5GiB', '1e9', '2GB' -> bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use bytes or e.g. 512MiB, 2GiB)")
    size = int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    if size <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return size


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llm-gateway engine", description="Serve one engine replica (OpenAI API).")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"{DEFAULT_MODEL}, a .gguf file, or a Hugging Face directory")
    p.add_argument("--served-model-name", default=None, help="the model name clients use (default: --model's)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8001)
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--load-format", choices=["auto", "dummy"], default="auto")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float32")
    p.add_argument("--quantization", choices=["none", "int8"], default="none",
                   help="int8: per-channel int8 weights (faster, small quality cost; see engine/README.md)")
    p.add_argument("--speculative", choices=["ngram"], default=None,
                   help="ngram: speculative decoding by prompt lookup (greedy output unchanged)")
    p.add_argument("--num-speculative-tokens", type=_positive_int, default=4, help="draft tokens per step")
    p.add_argument("--prompt-lookup-min", type=_positive_int, default=2, help="shortest n-gram looked up")
    p.add_argument("--prompt-lookup-max", type=_positive_int, default=5, help="longest n-gram looked up")
    p.add_argument("--kv-cache-memory", type=parse_size, default=256 * 2**20, help="KV cache bytes on CPU, e.g. 512MiB")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    p.add_argument("--block-size", type=_positive_int, default=16)
    p.add_argument("--max-num-seqs", type=_positive_int, default=64)
    p.add_argument("--max-num-batched-tokens", type=_positive_int, default=2048)
    p.add_argument("--max-waiting-requests", type=int, default=256,
                   help="requests waiting beyond --max-num-seqs before new ones get 503 (negative: no cap)")
    p.add_argument("--max-model-len", type=_positive_int, default=None)
    p.add_argument("--num-threads", type=_positive_int, default=None, help="torch CPU threads")
    p.add_argument("--no-prefix-caching", action="store_true")
    p.add_argument("--no-chunked-prefill", action="store_true")
    p.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs")
    p.add_argument("--log-level", default="info")
    return p


def config_from_args(args: argparse.Namespace):  # -> EngineConfig (imported lazily: torch is slow to load)
    from engine.config import EngineConfig

    config = EngineConfig(
        model=args.model, load_format=args.load_format, device=args.device, dtype=args.dtype,
        block_size=args.block_size, kv_cache_memory=args.kv_cache_memory,
        gpu_memory_utilization=args.gpu_memory_utilization, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens, max_model_len=args.max_model_len,
        enable_prefix_caching=not args.no_prefix_caching, enable_chunked_prefill=not args.no_chunked_prefill,
        enforce_eager=args.enforce_eager, num_threads=args.num_threads, quantization=args.quantization,
        speculative=args.speculative, num_speculative_tokens=args.num_speculative_tokens,
        prompt_lookup_min=args.prompt_lookup_min, prompt_lookup_max=args.prompt_lookup_max,
    )
    config.validate()
    return config


async def _serve(args: argparse.Namespace) -> int:
    from engine.serving.async_engine import AsyncEngine
    from engine.serving.server import create_engine_app

    loop = asyncio.get_running_loop()
    config = config_from_args(args)
    # loading dequantises weights: seconds of CPU work, kept off the loop so signals still land
    engine = await loop.run_in_executor(None, AsyncEngine.from_config, config)
    name = args.served_model_name or engine.model_name
    waiting = args.max_waiting_requests if args.max_waiting_requests >= 0 else None
    runner = web.AppRunner(create_engine_app(engine, name, waiting), handler_cancellation=True,
                           shutdown_timeout=2.0)
    await runner.setup()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await web.TCPSite(runner, args.host, args.port).start()
        log.info("engine serving %s on http://%s:%d (max_model_len %d)", name, args.host, args.port,
                 engine.max_model_len)
        await stop.wait()
    finally:
        await runner.cleanup()
        await loop.run_in_executor(None, engine.shutdown)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return asyncio.run(_serve(args))
    except (ValueError, FileNotFoundError) as e:  # unknown model, corrupt GGUF, bad sizes: say what and stop
        print(f"llm-gateway engine: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # port in use and the like
        print(f"llm-gateway engine: error: {e}", file=sys.stderr)
        return 1

