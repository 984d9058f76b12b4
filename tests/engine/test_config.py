"""EngineConfig validation and model-name resolution."""

from __future__ import annotations

import os

import pytest

from engine.config import EngineConfig, resolve_model_path


def test_builtin_name_resolves_to_the_packaged_gguf() -> None:
    path = resolve_model_path("smollm2-135m")
    assert path.endswith("SmolLM2-135M-Instruct.Q4_1.gguf") and os.path.isfile(path)
    assert resolve_model_path(path) == path


def test_hf_directory_and_errors(tmp_path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert resolve_model_path(str(tmp_path)) == str(tmp_path)
    with pytest.raises(ValueError, match="unknown model 'gpt-17'"):
        resolve_model_path("gpt-17")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_model_path(str(tmp_path / "nope.gguf"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="no config.json"):
        resolve_model_path(str(empty))
    other = tmp_path / "weights.bin"
    other.write_bytes(b"x")
    with pytest.raises(ValueError, match="not a .gguf file"):
        resolve_model_path(str(other))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"load_format": "pt"}, "load_format"),
        ({"device": "tpu"}, "device"),
        ({"dtype": "int8"}, "dtype"),
        ({"block_size": 0}, "block_size"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"max_num_batched_tokens": 0}, "max_num_batched_tokens"),
        ({"max_model_len": 1}, "max_model_len"),
        ({"enable_chunked_prefill": False, "max_model_len": 4096}, "without chunked prefill"),
    ],
)
def test_config_validation(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EngineConfig(**kwargs).validate()


def test_defaults_are_valid() -> None:
    EngineConfig().validate()
