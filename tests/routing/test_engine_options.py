"""An engine backend's `options:` are checked up front, each error naming its key path."""

from __future__ import annotations

import pytest

from gateway.backends.engine_options import parse_engine_options
from gateway.config.errors import PolicyError
from gateway.config.schema import BackendConfig

MODEL = "smollm2-135m"


def test_options_are_validated_with_their_path() -> None:
    def cfg(**options: object) -> BackendConfig:
        return BackendConfig(name="pool", type="engine", model=MODEL, options=dict(options))

    opts = parse_engine_options(cfg(kv_cache_memory="64MiB", max_num_seqs=8, enable_prefix_caching=False,
                                    enforce_eager=True, overlap_weight=2, balance_abs=10))
    assert opts.engine_args == {"kv_cache_memory": 64 * 2**20, "max_num_seqs": 8, "enable_prefix_caching": False,
                                "enforce_eager": True}
    assert (opts.overlap_weight, opts.balance_abs) == (2.0, 10)
    assert opts.cli_args() == ["--kv-cache-memory", str(64 * 2**20), "--max-num-seqs", "8", "--no-prefix-caching",
                               "--enforce-eager"]
    assert parse_engine_options(cfg(enable_chunked_prefill=True, enforce_eager=False)).cli_args() == []
    # every option maps to an EngineConfig field and to a flag `llm-gateway engine` accepts
    from engine.config import EngineConfig
    from engine.serving.cli import build_parser
    from gateway.backends.engine_options import ENGINE_ARGS

    fields = set(EngineConfig.__dataclass_fields__)
    flags = {a for action in build_parser()._actions for a in action.option_strings}
    assert set(ENGINE_ARGS) <= fields
    assert {flag for flag, _ in ENGINE_ARGS.values()} <= flags
    for bad, path in (({"kv_cache_memory": "lots"}, "options.kv_cache_memory"),
                      ({"max_num_seqs": 0}, "options.max_num_seqs"),
                      ({"device": "tpu"}, "options.device"),
                      ({"gpu_memory_utilization": 1.5}, "options.gpu_memory_utilization"),
                      ({"enforce_eager": "yes"}, "options.enforce_eager"),
                      ({"warp_speed": True}, "options.warp_speed")):
        with pytest.raises(PolicyError) as info:
            parse_engine_options(cfg(**bad))
        assert info.value.path == f"backends.pool.{path}"


def test_the_gateway_and_the_engine_default_to_the_same_model() -> None:
    """Spelt once per package (the gateway's policy loader must not import engine/, which loads torch)."""
    from engine.config import DEFAULT_MODEL as ENGINE_DEFAULT
    from gateway.backends.engine_options import DEFAULT_MODEL

    assert DEFAULT_MODEL == ENGINE_DEFAULT == parse_engine_options(BackendConfig(name="e", type="engine")).model
