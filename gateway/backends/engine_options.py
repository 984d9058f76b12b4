"""The `options:` of an engine backend: engine arguments, router weights, replica supervision."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.config.fields import Checker, describe, run_checked
from gateway.config.schema import BackendConfig
from gateway.config.yamltree import join
from gateway.routing.choice import DEFAULT_LOAD_WEIGHT, DEFAULT_SHARED_WEIGHT

DEFAULT_MODEL = "smollm2-135m"

# option -> (engine CLI flag, kind); the same names as EngineConfig's fields
ENGINE_ARGS: dict[str, tuple[str, str]] = {
    "device": ("--device", "choice:auto,cpu,cuda"),
    "load_format": ("--load-format", "choice:auto,dummy"),
    "dtype": ("--dtype", "choice:float32,float16,bfloat16"),
    "quantization": ("--quantization", "choice:none,int8"),
    "speculative": ("--speculative", "choice:ngram"),
    "num_speculative_tokens": ("--num-speculative-tokens", "int"),
    "prompt_lookup_min": ("--prompt-lookup-min", "int"),
    "prompt_lookup_max": ("--prompt-lookup-max", "int"),
    "kv_cache_memory": ("--kv-cache-memory", "size"),
    "gpu_memory_utilization": ("--gpu-memory-utilization", "fraction"),
    "block_size": ("--block-size", "int"),
    "max_num_seqs": ("--max-num-seqs", "int"),
    "max_num_batched_tokens": ("--max-num-batched-tokens", "int"),
    "max_model_len": ("--max-model-len", "int"),
    "num_threads": ("--num-threads", "int"),
    "enable_prefix_caching": ("--no-prefix-caching", "bool_off_flag"),
    "enable_chunked_prefill": ("--no-chunked-prefill", "bool_off_flag"),
    "enforce_eager": ("--enforce-eager", "bool_on_flag"),
}
ROUTER_ARGS = {"overlap_weight": "number", "load_weight": "number", "shared_weight": "number", "balance_abs": "int",
               "balance_rel": "number"}
SUPERVISOR_ARGS = {"start_timeout_s": "number", "restart_backoff_max_s": "number"}


@dataclass(slots=True)
class EngineOptions:
    model: str
    engine_args: dict[str, Any] = field(default_factory=dict)  # EngineConfig field -> value
    overlap_weight: float = 1.0
    load_weight: float = DEFAULT_LOAD_WEIGHT  # cost of one queued request, in mean request blocks
    shared_weight: float = DEFAULT_SHARED_WEIGHT  # price of a block of a shared prefix another replica lacks
    balance_abs: int = 64
    balance_rel: float = 1.5
    start_timeout_s: float = 600.0
    restart_backoff_max_s: float = 30.0

    def cli_args(self) -> list[str]:
        """The `llm-gateway engine` flags that give a spawned replica the same engine arguments."""
        out: list[str] = []
        for key, value in self.engine_args.items():
            flag, kind = ENGINE_ARGS[key]
            if kind in ("bool_off_flag", "bool_on_flag"):
                if value == (kind == "bool_on_flag"):
                    out.append(flag)
            else:
                out += [flag, str(value)]
        return out


def _check(m: dict, key: str, path: str, kind: str, check: Checker) -> Any:
    """One option's value by its kind; None (with the error recorded) when it is wrong."""
    value = m[key]
    where = join(path, key)
    if value is None:
        check.error(where, "must not be null")
        return None
    if kind == "int":
        return check.get_int(m, key, path, minimum=1)
    if kind == "number":
        return check.get_number(m, key, path, minimum=0.0)
    if kind == "fraction":
        # the value as written (an int 1 stays 1), so the spawned replica's flag reads as the policy does
        ok = check.get_number(m, key, path, minimum=0.0, exclusive=True, maximum=1.0)
        return None if ok is None else value
    if kind == "size":
        return _size(value, where, check)
    if kind.startswith("choice:"):
        choices = kind.split(":", 1)[1].split(",")
        got = check.get_choice(m, key, path, choices, "")
        return got or None
    return check.get_bool(m, key, path, default=None)  # type: ignore[arg-type]  # bool_on_flag / bool_off_flag


def _size(value: Any, where: str, check: Checker) -> int | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return int(value)
    if isinstance(value, str):
        from engine import parse_size  # lazily: a policy without engine sizes loads none of the engine

        try:
            return parse_size(value)
        except Exception as e:  # argparse.ArgumentTypeError
            check.error(where, str(e))
            return None
    check.error(where, f"must be a size in bytes or like 512MiB, got {describe(value)}")
    return None


def parse_engine_options(config: BackendConfig, check: Checker | None = None) -> EngineOptions:
    """Validate an engine backend's options. Errors go to the policy loader's `check`, or standalone are raised
    together (PolicyErrors naming every bad key)."""
    return run_checked(lambda c: _parse(config, c), check)


def _parse(config: BackendConfig, check: Checker) -> EngineOptions:
    path = join(join("backends", config.name), "options")
    opts = EngineOptions(model=config.model or DEFAULT_MODEL)
    raw = config.options or {}
    for key in raw:
        if key in ENGINE_ARGS:
            value = _check(raw, key, path, ENGINE_ARGS[key][1], check)
            if value is not None:
                opts.engine_args[key] = value
        elif key in ROUTER_ARGS or key in SUPERVISOR_ARGS:
            value = _check(raw, key, path, ROUTER_ARGS.get(key) or SUPERVISOR_ARGS[key], check)
            if value is not None:
                setattr(opts, key, value)
        else:
            check.unknown_key(path, key, [*ENGINE_ARGS, *ROUTER_ARGS, *SUPERVISOR_ARGS])
    return opts
