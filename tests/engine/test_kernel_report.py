"""Which kernels the engine runs, and how it says so: libraries built ahead per x86-64 level (what an image
without a compiler ships) are picked by the CPU's flags and loaded without a compiler; a torch fallback where
the C kernels were wanted is a WARNING naming why; kernels that do not apply (another device, turned off) are
an INFO line."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from engine.layers import cpu_kernels
from engine.model_runner import kernels_not_used

V2 = {"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"}
V3 = V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
V4 = V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
x86_only = pytest.mark.skipif(cpu_kernels.prebuilt_levels()[:1] != ["x86-64-v4"], reason="x86-64 levels")


@pytest.fixture
def fresh_load(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """`load_library` decides once per process: decide again under this test's environment, and once more after
    it (the real library for the other tests)."""
    monkeypatch.delenv("ENGINE_NO_C_KERNELS", raising=False)
    monkeypatch.delenv(cpu_kernels.PREBUILT_ENV, raising=False)
    monkeypatch.delenv("CC", raising=False)
    cpu_kernels._load.cache_clear()
    yield monkeypatch
    cpu_kernels._load.cache_clear()


def no_compiler(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@x86_only
@pytest.mark.parametrize(("flags", "best"), [(V4, "x86-64-v4"), (V3, "x86-64-v3"), (V2, "x86-64-v2"),
                                             (V3 - {"fma"}, "x86-64-v2"), (V4 - V2, "x86-64"), (set(), "x86-64")])
def test_runnable_levels_follow_the_cpu_flags(flags: set[str], best: str) -> None:
    levels = cpu_kernels.runnable_levels(flags)
    assert levels[0] == best and levels[-1] == "x86-64"
    assert levels == [lv for lv in cpu_kernels.prebuilt_levels() if lv in levels]  # best first


def test_prebuilt_names_change_with_the_sources_and_level() -> None:
    names = {cpu_kernels.prebuilt_name(level) for level in cpu_kernels.prebuilt_levels()}
    assert len(names) == len(cpu_kernels.prebuilt_levels())
    assert all(name.startswith("cpu_kernels-") and name.endswith(".so") for name in names)


@x86_only
@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="needs a C compiler")
def test_prebuilt_library_loads_without_a_compiler_and_is_reported(
        fresh_load: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    built = cpu_kernels.build_prebuilt(tmp_path / "kernels")
    assert [p.name for p in built] == [cpu_kernels.prebuilt_name(lv) for lv in cpu_kernels.prebuilt_levels()]
    no_compiler(fresh_load, tmp_path)
    fresh_load.setenv(cpu_kernels.PREBUILT_ENV, str(tmp_path / "kernels"))
    assert cpu_kernels.load_library() is not None
    best = cpu_kernels.runnable_levels()[0]
    assert cpu_kernels.kernel_status().startswith(f"prebuilt for {best}:")
    with caplog.at_level(logging.INFO, logger="engine.test"):
        cpu_kernels.report_kernels(logging.getLogger("engine.test"), wanted=True)
    (record,) = caplog.records
    assert record.levelno == logging.INFO
    assert "engine kernels: C decode attention" in record.message and f"prebuilt for {best}" in record.message


def test_fallback_without_compiler_or_prebuilt_library_is_a_warning(
        fresh_load: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    no_compiler(fresh_load, tmp_path)
    fresh_load.setenv(cpu_kernels.PREBUILT_ENV, str(tmp_path))  # holds no library
    assert cpu_kernels.load_library() is None
    with caplog.at_level(logging.INFO, logger="engine.test"):
        cpu_kernels.report_kernels(logging.getLogger("engine.test"), wanted=True)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "torch fallback" in record.message and "no C compiler" in record.message
    if cpu_kernels.prebuilt_levels():
        assert f"no prebuilt library in {tmp_path}" in record.message


def test_kernels_that_do_not_apply_are_info(fresh_load: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("engine.test")
    with caplog.at_level(logging.INFO, logger="engine.test"):
        cpu_kernels.report_kernels(logger, wanted=False, why_not="device cuda")
        fresh_load.setenv("ENGINE_NO_C_KERNELS", "1")
        cpu_kernels._load.cache_clear()
        cpu_kernels.report_kernels(logger, wanted=True)
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.INFO]
    assert "not used: device cuda" in caplog.records[0].message
    assert "turned off by ENGINE_NO_C_KERNELS" in caplog.records[1].message


def test_why_kernels_are_not_used() -> None:
    cpu = torch.device("cpu")
    assert kernels_not_used(cpu, torch.float32, True) == ""
    assert kernels_not_used(torch.device("cuda"), torch.float32, True) == "device cuda"
    assert kernels_not_used(cpu, torch.bfloat16, True) == "dtype bfloat16"
    assert kernels_not_used(cpu, torch.float32, False) == "c_kernels=False"
