"""The `options:` of an engine backend: engine arguments, router weights, replica supervision."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.config.errors import PolicyError
from gateway.config.schema import BackendConfig

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
ROUTER_ARGS = {"overlap_weight": "number", "balance_abs": "int", "balance_rel": "number"}
SUPERVISOR_ARGS = {"start_timeout_s": "number", "restart_backoff_max_s": "number"}


@dataclass(slots=True)
class EngineOptions:
    model: str
    engine_args: dict[str, Any] = field(default_factory=dict)  # EngineConfig field -> value
    overlap_weight: float = 1.0
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


def _check(path: str, key: str, value: Any, kind: str) -> Any:
    where = f"{path}.options.{key}"
    is_num = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "int":
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise PolicyError(where, "must be a positive integer")
    elif kind == "number":
        if not is_num or value < 0:
            raise PolicyError(where, "must be a non-negative number")
        value = float(value)
    elif kind == "fraction":
        if not is_num or not 0 < value <= 1:
            raise PolicyError(where, "must be a number in (0, 1]")
    elif kind == "size":
        from engine.cli import parse_size

        if is_num and value > 0:
            value = int(value)
        elif isinstance(value, str):
            try:
                value = parse_size(value)
            except Exception as e:
                raise PolicyError(where, str(e)) from None
        else:
            raise PolicyError(where, "must be a size in bytes or like 512MiB")
    elif kind.startswith("choice:"):
        choices = kind.split(":", 1)[1].split(",")
        if value not in choices:
            raise PolicyError(where, f"must be one of {', '.join(choices)}")
    elif kind in ("bool_off_flag", "bool_on_flag"):
        if not isinstance(value, bool):
            raise PolicyError(where, "must be true or false")
    return value


def parse_engine_options(config: BackendConfig) -> EngineOptions:
    """Validate an engine backend's options; PolicyError names the bad key."""
    path = f"backends.{config.name}"
    opts = EngineOptions(model=config.model or DEFAULT_MODEL)
    for key, value in (config.options or {}).items():
        if key in ENGINE_ARGS:
            opts.engine_args[key] = _check(path, key, value, ENGINE_ARGS[key][1])
        elif key in ROUTER_ARGS:
            setattr(opts, key, _check(path, key, value, ROUTER_ARGS[key]))
        elif key in SUPERVISOR_ARGS:
            setattr(opts, key, _check(path, key, value, SUPERVISOR_ARGS[key]))
        else:
            known = sorted([*ENGINE_ARGS, *ROUTER_ARGS, *SUPERVISOR_ARGS])
            raise PolicyError(f"{path}.options.{key}", f"unknown engine option; known: {', '.join(known)}")
    return opts
