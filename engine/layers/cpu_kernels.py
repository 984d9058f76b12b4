"""Small C kernels for the CPU path, compiled with the system C compiler on first use and cached on disk.

Plain C through ctypes (no torch headers): builds in about a second, and where no compiler is found or the build
fails, `load_library()` returns None and the engine keeps its pure-torch path (`kernel_status()` says why).
An image without a compiler ships libraries built ahead for each x86-64 level (`python -m engine.layers.cpu_kernels
build DIR`, ENGINE_KERNELS_DIR=DIR at run time): the best one this CPU runs is loaded. `paged_decode.c`: decode attention
over the paged cache; `prefill_attention.c`: prefill attention over it; `fused_ops.c`: RMSNorm with its residual add; `gemv.c`: small-M float32 and int8-weight linears (decode).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import time
from functools import cache
from pathlib import Path

import torch

SOURCES = [Path(__file__).with_name(name) for name in ("paged_decode.c", "prefill_attention.c", "fused_ops.c",
                                                       "gemv.c")]
INCLUDED = [Path(__file__).with_name("vec_exp.c")]  # #included by sources, not compiled alone: hashed with them
# -ffp-contract=fast: a * b + c as one fused multiply-add (ISO C mode otherwise forbids it): faster and no less
# exact; reassociation stays off (no -ffast-math), so sums keep the order the source spells.
PORTABLE_FLAGS = ["-O3", "-ffp-contract=fast", "-fopenmp", "-shared", "-fPIC", "-std=c11"]
FLAGS = ["-O3", "-march=native", *PORTABLE_FLAGS[1:]]
PREBUILT_ENV = "ENGINE_KERNELS_DIR"  # libraries built ahead by `build_prebuilt` (an image without a compiler)
# Kernels the library holds, as the engine reports them at start-up
KERNELS = ("decode attention", "prefill attention", "residual add + RMSNorm", "rotary + KV store",
           "small-row linears (fp32, int8)")
# x86-64 psABI levels, best first, with the /proc/cpuinfo flags each needs beyond the next: -march=native is
# unknowable when an image is built, so one library per level is built and the best this CPU runs is loaded.
X86_LEVELS = (
    ("x86-64-v4", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
    ("x86-64-v3", {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}),
    ("x86-64-v2", {"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"}),
    ("x86-64", set()),
)


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "llm-gateway-engine"


def _cpu_key() -> str:
    """-march=native code runs only where it was built: key the cached library on this CPU's features (x86
    `flags`, ARM `Features`)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.machine()
    features = next((ln for ln in lines if ln.startswith(("flags", "Features"))), "")
    return f"{platform.machine()} {features}"


def _compiler_key(cc: str) -> str:
    """The compiler's own version line: a compiler upgrade rebuilds rather than reusing the old one's library."""
    try:
        return subprocess.run([cc, "--version"], capture_output=True, timeout=30).stdout.decode(errors="replace")
    except (OSError, subprocess.SubprocessError):
        return cc


STALE_AFTER_S = 7 * 24 * 3600


def _remove_stale(keep: Path) -> None:
    """Libraries of other sources, flags or compilers unused for a week: remove them. Not sooner: two checkouts
    or installs at different versions may share this cache, and one must not delete the library the other has
    just checked for and is about to load (a process already running one keeps its mapping)."""
    cutoff = time.time() - STALE_AFTER_S
    for old in [*keep.parent.glob("paged_decode-*.so"), *keep.parent.glob("cpu_kernels-*.so")]:
        with contextlib.suppress(OSError):
            if old != keep and old.stat().st_mtime < cutoff:
                old.unlink()


def _cpu_flags() -> set[str]:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return set()
    line = next((ln for ln in lines if ln.startswith(("flags", "Features"))), "")
    return set(line.partition(":")[2].split())


def prebuilt_levels() -> list[str]:
    """The levels libraries are built ahead for on this machine's architecture, best first."""
    if platform.machine() in ("x86_64", "AMD64"):
        return [level for level, _ in X86_LEVELS]
    if platform.machine() in ("aarch64", "arm64"):
        return ["armv8-a"]  # the baseline every 64-bit ARM runs; NEON is part of it
    return []


def runnable_levels(flags: set[str] | None = None) -> list[str]:
    """The prebuilt levels this CPU runs, best first."""
    levels = prebuilt_levels()
    if not levels or levels == ["armv8-a"]:
        return levels
    flags = _cpu_flags() if flags is None else flags
    runnable, needed = [], set()
    for level, extra in reversed(X86_LEVELS):  # each level needs every flag of the ones below it
        needed |= extra
        if needed <= flags:
            runnable.append(level)
    return runnable[::-1]


def prebuilt_name(level: str) -> str:
    """A prebuilt library's file name: its level and a digest of the sources and flags, so a library built from
    other sources is never loaded (there is no compiler to check against at run time)."""
    source = b"".join(path.read_bytes() for path in SOURCES + INCLUDED)
    digest = hashlib.sha256(source + " ".join([f"-march={level}", *PORTABLE_FLAGS]).encode()).hexdigest()[:16]
    return f"cpu_kernels-{level}-{digest}.so"


def build_prebuilt(directory: Path, cc: str | None = None) -> list[Path]:
    """Build one library per level of this architecture into `directory` (at image build time); returns them."""
    cc = cc or shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("no C compiler (set CC or install gcc)")
    directory.mkdir(parents=True, exist_ok=True)
    built = []
    for level in prebuilt_levels():
        out = directory / prebuilt_name(level)
        subprocess.run([cc, f"-march={level}", *PORTABLE_FLAGS, *map(str, SOURCES), "-o", str(out), "-lm"],
                       check=True, capture_output=True, timeout=300)
        built.append(out)
    return built


def _load_prebuilt(directory: Path) -> tuple[ctypes.CDLL | None, str]:
    """The best prebuilt library this CPU runs, and what was loaded (or why none was)."""
    for level in runnable_levels():
        try:
            path = directory / prebuilt_name(level)
        except OSError as exc:  # an install that dropped the sources: nothing to check the library against
            return None, f"kernel sources unreadable ({exc})"
        if path.exists():
            try:
                return ctypes.CDLL(str(path)), f"prebuilt for {level}: {path}"
            except OSError as exc:  # e.g. no libgomp in the image
                return None, f"prebuilt {path} does not load ({exc})"
    return None, f"no prebuilt library in {directory} for these sources and this CPU"


def _build_native(cc: str) -> tuple[ctypes.CDLL | None, str]:
    """Build (once, cached on disk) and load the library for this CPU with -march=native."""
    try:
        source = b"".join(path.read_bytes() for path in SOURCES + INCLUDED)  # absent from an install that dropped package data
        key = "\n".join([" ".join(FLAGS), _compiler_key(cc), _cpu_key()])
        digest = hashlib.sha256(source + key.encode()).hexdigest()[:16]
        lib_path = _cache_dir() / f"cpu_kernels-{digest}.so"
        if not lib_path.exists():
            lib_path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=lib_path.parent) as tmp:  # built aside, then renamed: atomic
                out = Path(tmp) / lib_path.name
                subprocess.run([cc, *FLAGS, *map(str, SOURCES), "-o", str(out), "-lm"], check=True,
                               capture_output=True, timeout=120)
                os.replace(out, lib_path)
            _remove_stale(lib_path)
        return ctypes.CDLL(str(lib_path)), f"built here with -march=native: {lib_path}"
    except (OSError, subprocess.SubprocessError) as exc:
        stderr = getattr(exc, "stderr", None)  # a failed build says why only on its stderr
        detail = f"{exc}: {stderr.decode(errors='replace')[-2000:]}" if stderr else str(exc)
        return None, f"the build failed ({detail})"


def turned_off() -> bool:
    return os.environ.get("ENGINE_NO_C_KERNELS", "0") not in ("", "0")


@cache
def _load() -> tuple[ctypes.CDLL | None, str]:
    """(the kernel library or None, where it came from or why there is none). Prebuilt libraries first (an
    image's, built for its sources), else built here with the system compiler."""
    if turned_off():
        return None, "turned off by ENGINE_NO_C_KERNELS"
    reasons = []
    if os.environ.get(PREBUILT_ENV):
        lib, origin = _load_prebuilt(Path(os.environ[PREBUILT_ENV]))
        if lib is not None:
            return _declare(lib), origin
        reasons.append(origin)
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        reasons.append("no C compiler")
        return None, "; ".join(reasons)
    lib, origin = _build_native(cc)
    if lib is None:
        return None, "; ".join([*reasons, origin])
    return _declare(lib), origin


def load_library() -> ctypes.CDLL | None:
    """The compiled kernel library, or None (disabled, no prebuilt library and no compiler, a failed build or
    load): `kernel_status()` says which."""
    return _load()[0]


def kernel_status() -> str:
    """Where the loaded library came from, or why there is none."""
    return _load()[1]


def report_kernels(logger: logging.Logger, wanted: bool, why_not: str = "") -> None:
    """Say at start-up which kernels the engine runs: the C kernels and their library at INFO; the torch
    fallback at WARNING when they were wanted (CPU float32) but did not load, since it is several times slower;
    at INFO when they do not apply (`why_not`: another device or dtype, or turned off)."""
    if not wanted or turned_off():
        logger.info("engine kernels: torch (C kernels not used: %s)", why_not or kernel_status())
    elif load_library() is not None:
        logger.info("engine kernels: C %s (%s)", ", ".join(KERNELS), kernel_status())
    else:
        logger.warning("engine kernels: torch fallback, C kernels unavailable (%s): %s run in torch, slower",
                       kernel_status(), ", ".join(KERNELS))


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Give the library's functions their C signatures."""
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    lib.paged_decode_attention.argtypes = [ptr] * 7 + [i64] * 7 + [ctypes.c_float, ctypes.c_int]
    lib.paged_prefill_attention.argtypes = [ptr, i64, ptr, ptr, ptr, ptr, i64, ptr] + [i64] * 6 + [ctypes.c_float,
                                                                                           ctypes.c_int]
    lib.prefill_scratch_floats.argtypes = [i64] * 3 + [ctypes.c_int]
    lib.prefill_scratch_floats.restype = i64
    lib.add_rms_norm.argtypes = [ptr] * 4 + [i64] * 2 + [ctypes.c_float, ctypes.c_int]
    lib.gemv_f32.argtypes = [ptr] * 4 + [i64] * 3 + [ctypes.c_int]
    lib.gemv_i8.argtypes = [ptr] * 5 + [i64] * 3 + [ctypes.c_int]
    lib.rope_store_kv.argtypes = [ptr] * 6 + [i64] * 5 + [ctypes.c_int]
    for fn in (lib.paged_decode_attention, lib.paged_prefill_attention, lib.add_rms_norm, lib.gemv_f32, lib.gemv_i8, lib.rope_store_kv):
        fn.restype = None
    return lib


def is_cpu_float32(*tensors: torch.Tensor) -> bool:
    return all(t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous() for t in tensors)


def add_rms_norm(lib: ctypes.CDLL, residual: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor,
                 eps: float) -> torch.Tensor:
    """`residual += delta` in place (when given), then RMSNorm of it: [rows, dim] float32, weight [dim]."""
    rows, dim = residual.shape
    if not (is_cpu_float32(residual, weight, *([] if delta is None else [delta])) and weight.shape == (dim,)
            and (delta is None or delta.shape == residual.shape)):
        raise ValueError(f"add_rms_norm: bad inputs ({tuple(residual.shape)}, weight {tuple(weight.shape)})")
    out = torch.empty_like(residual)
    lib.add_rms_norm(residual.data_ptr(), None if delta is None else delta.data_ptr(), weight.data_ptr(),
                     out.data_ptr(), rows, dim, eps, torch.get_num_threads())
    return out


def rope_store_kv(lib: ctypes.CDLL, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, slots: torch.Tensor,
                  k_cache: torch.Tensor, v_cache: torch.Tensor, num_heads: int) -> None:
    """Rotate q and k of `qkv` in place ([T, (num_heads + 2 * Hkv) * D], the fused projection's output; cos, sin
    [T, D], each token's row) and store each token's k and v at its slot of the caches ([Hkv, blocks, block_size,
    D]), as `apply_rotary` then `TorchPagedAttention.write_kv` do."""
    hkv, nb, bs, d = k_cache.shape
    t = qkv.shape[0]
    if not (is_cpu_float32(qkv, cos, sin, k_cache, v_cache) and qkv.shape == (t, (num_heads + 2 * hkv) * d)
            and cos.shape == (t, d) and sin.shape == (t, d) and v_cache.shape == k_cache.shape and d % 2 == 0
            and slots.dtype == torch.int64 and slots.shape == (t,) and slots.is_contiguous()
            and (t == 0 or _in_range(slots, nb * bs))):
        raise ValueError(f"rope_store_kv: bad inputs (qkv {tuple(qkv.shape)}, cos {tuple(cos.shape)}, cache "
                         f"{tuple(k_cache.shape)}, slots {tuple(slots.shape)})")
    lib.rope_store_kv(qkv.data_ptr(), cos.data_ptr(), sin.data_ptr(), slots.data_ptr(), k_cache.data_ptr(),
                      v_cache.data_ptr(), t, num_heads, hkv, d, nb * bs, torch.get_num_threads())


def _in_range(index: torch.Tensor, size: int) -> bool:
    low, high = torch.aminmax(index)  # one pass, one op: this runs once per layer call
    return 0 <= int(low) and int(high) < size


class KernelScratch:
    """The kernel's working memory (each thread's scores and sums), grown on demand and reused: one per model,
    whose layers run one after another, so the C side never allocates."""

    def __init__(self) -> None:
        self.buffer = torch.empty(0, dtype=torch.float32, device="cpu")

    def get(self, numel: int) -> torch.Tensor:
        if self.buffer.numel() < numel:
            self.buffer = torch.empty(numel, dtype=torch.float32, device="cpu")  # whatever torch's defaults are
        return self.buffer


def paged_decode_attention(lib: ctypes.CDLL, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor, scale: float,
                           scratch: KernelScratch | None = None) -> torch.Tensor:
    """q: [B, Hq, D] float32; caches [Hkv, num_blocks, block_size, D]; block_tables [B, max_blocks] int64;
    context_lens [B] int64, each <= max_blocks * block_size. Returns [B, Hq, D]."""
    q = q.contiguous()
    b, hq, d = q.shape
    hkv, nb, bs, cache_d = k_cache.shape
    # The C side trusts every pointer and size it is given: checked here (cheap, once per layer call) and raised,
    # not asserted, so `python -O` cannot turn a shape mistake into an out-of-bounds read.
    problems = [
        q.dtype != torch.float32 or k_cache.dtype != torch.float32 or v_cache.dtype != torch.float32,
        q.device.type != "cpu" or k_cache.device.type != "cpu" or v_cache.device.type != "cpu",
        not (k_cache.is_contiguous() and v_cache.is_contiguous()) or v_cache.shape != k_cache.shape,
        cache_d != d or hkv == 0 or hq % hkv != 0,
        block_tables.dtype != torch.int64 or context_lens.dtype != torch.int64,
        not (block_tables.is_contiguous() and context_lens.is_contiguous()),
        block_tables.dim() != 2 or block_tables.shape[0] != b or context_lens.shape != (b,),
        b > 0 and int(context_lens.max()) > block_tables.shape[1] * bs,  # more keys than the table reaches
    ]
    if any(problems):
        raise ValueError(f"paged_decode_attention: bad inputs (q {tuple(q.shape)} {q.dtype}, cache "
                         f"{tuple(k_cache.shape)}, tables {tuple(block_tables.shape)}, lens {tuple(context_lens.shape)})")
    threads = torch.get_num_threads()
    max_blocks = block_tables.shape[1]
    work = (scratch or KernelScratch()).get(threads * (hq // hkv) * (max_blocks * bs + d))
    out = torch.empty_like(q)
    lib.paged_decode_attention(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), block_tables.data_ptr(),
                               context_lens.data_ptr(), out.data_ptr(), work.data_ptr(), b, hq, hkv, nb, bs, d,
                               max_blocks, scale, threads)
    return out


PREFILL_HEAD_DIM = 64  # the one head size prefill_attention.c is written for (its register tiles are fixed)


def prefill_kernel_fits(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """Whether `paged_prefill_attention` takes this layer: float32 CPU, head_dim 64, whole GQA groups."""
    hkv, _, _, d = k_cache.shape
    return (d == PREFILL_HEAD_DIM and hkv > 0 and q.dim() == 3 and q.shape[2] == d and q.shape[1] % hkv == 0
            and q.dtype == torch.float32 and q.device.type == "cpu" and is_cpu_float32(k_cache, v_cache)
            and v_cache.shape == k_cache.shape)


def paged_prefill_attention(lib: ctypes.CDLL, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            block_table: torch.Tensor, context_len: int, scale: float, out: torch.Tensor,
                            scratch: KernelScratch | None = None) -> None:
    """Causal attention of one prefill chunk into `out`: q and out [q_len, Hq, 64] float32 (rows may be strided,
    heads contiguous: views of the qkv projection and of the layer's output), the chunk's queries being the
    last q_len of the sequence's context_len tokens, whose keys and values are all in the caches already
    ([Hkv, num_blocks, block_size, 64]) at the blocks of `block_table` (int64)."""
    t, hq, d = q.shape
    hkv, nb, bs, _ = k_cache.shape
    problems = [
        not prefill_kernel_fits(q, k_cache, v_cache), out.shape != q.shape, out.dtype != torch.float32,
        q.stride(2) != 1 or q.stride(1) != d or out.stride(2) != 1 or out.stride(1) != d,
        not 0 < t <= context_len, block_table.dtype != torch.int64, not block_table.is_contiguous(),
        block_table.dim() != 1 or block_table.numel() * bs < context_len,
    ]
    if any(problems) or not _in_range(block_table[: -(-context_len // bs)], nb):  # ids checked last: they need a table
        raise ValueError(f"paged_prefill_attention: bad inputs (q {tuple(q.shape)} {q.dtype}, cache "
                         f"{tuple(k_cache.shape)}, table {tuple(block_table.shape)}, context {context_len})")
    threads = torch.get_num_threads()
    work = (scratch or KernelScratch()).get(lib.prefill_scratch_floats(context_len, hq, hkv, threads))
    lib.paged_prefill_attention(q.data_ptr(), q.stride(0), k_cache.data_ptr(), v_cache.data_ptr(),
                                block_table.data_ptr(), out.data_ptr(), out.stride(0), work.data_ptr(), t,
                                context_len, hq, hkv, nb, bs, scale, threads)


GEMV_MAX_ROWS = 12  # bench/gemv.py on an AVX2 host: the fp32 kernel beat packed oneDNN at every decode shape up to 12
# rows, not at 16. On an AMD AVX-512 host packed oneDNN won from 3-6 rows on: float32 layers now measure their
# own crossover at load (linear.calibrate_kernel_rows), within 1..GEMV_MAX_ROWS. The int8 kernel keeps 12 (it has
# no packed rival: fbgemm; not measured on its own: bench/gemv.py has no int8 column)


def few_rows(x: torch.Tensor, max_rows: int = GEMV_MAX_ROWS) -> bool:
    """An inference input of 1..max_rows rows: what the small-M kernels are for."""
    return x.dim() == 2 and 0 < x.shape[0] <= max_rows and not torch.is_grad_enabled()


def _x_ok(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """x, checked on every call: float32 CPU contiguous [M, K] against a 2-D weight [N, K]."""
    return is_cpu_float32(x) and x.dim() == 2 and weight.dim() == 2 and weight.shape[1] == x.shape[1]


def gemv(lib: ctypes.CDLL, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
         out: torch.Tensor | None = None, weight_checked: bool = False) -> torch.Tensor:
    """`F.linear(x, weight, bias)` for a few rows of x (decode): x [M, K], weight [N, K], bias [N], float32 CPU,
    contiguous; the result goes into `out` ([M, N], allocated here when not given). `weight_checked`: the caller
    has checked weight and bias once (a layer, at load); x is checked on every call all the same. The full
    check costs about as much as the call itself (~15 us of a decode step's 121 calls)."""
    m, k = x.shape
    n = weight.shape[0]
    if not (_x_ok(x, weight) and (weight_checked or gemv_weight_ok(weight, bias))
            and (out is None or (is_cpu_float32(out) and out.shape == (m, n)))):
        raise ValueError(f"gemv: bad inputs (x {tuple(x.shape)} {x.dtype}, weight {tuple(weight.shape)} "
                         f"{weight.dtype}, out {None if out is None else tuple(out.shape)})")
    if out is None:
        out = torch.empty((m, n), dtype=torch.float32)
    lib.gemv_f32(x.data_ptr(), weight.data_ptr(), None if bias is None else bias.data_ptr(), out.data_ptr(),
                 m, n, k, torch.get_num_threads())
    return out


def gemv_weight_ok(weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether `gemv` takes this weight and bias: float32 CPU contiguous, weight 2-D, bias one per row."""
    return (weight.dim() == 2 and is_cpu_float32(weight, *([] if bias is None else [bias]))
            and (bias is None or bias.shape == (weight.shape[0],)))


def gemv_int8(lib: ctypes.CDLL, x: torch.Tensor, qweight: torch.Tensor, scale: torch.Tensor,
              bias: torch.Tensor | None = None, weight_checked: bool = False) -> torch.Tensor:
    """`F.linear(x, qweight * scale[:, None], bias)` for a few rows of x, without building the float weight:
    x [M, K] float32, qweight [N, K] int8, scale and bias [N] float32, CPU, contiguous. `weight_checked` as for
    `gemv` (the layer checks qweight, scale and bias once at load with `gemv_int8_weight_ok`)."""
    m, k = x.shape
    if not (_x_ok(x, qweight) and (weight_checked or gemv_int8_weight_ok(qweight, scale, bias))):
        raise ValueError(f"gemv_int8: bad inputs (x {tuple(x.shape)} {x.dtype}, weight {tuple(qweight.shape)} "
                         f"{qweight.dtype}, scale {tuple(scale.shape)} {scale.dtype})")
    out = torch.empty((m, qweight.shape[0]), dtype=torch.float32)
    lib.gemv_i8(x.data_ptr(), qweight.data_ptr(), scale.data_ptr(), None if bias is None else bias.data_ptr(),
                out.data_ptr(), m, qweight.shape[0], k, torch.get_num_threads())
    return out


def gemv_int8_weight_ok(qweight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether `gemv_int8` takes these: int8 CPU contiguous 2-D weight, float32 scale (and bias) one per row."""
    n = qweight.shape[0] if qweight.dim() == 2 else -1
    return (qweight.dim() == 2 and qweight.dtype == torch.int8 and qweight.is_cpu and qweight.is_contiguous()
            and is_cpu_float32(scale, *([] if bias is None else [bias])) and scale.shape == (n,)
            and (bias is None or bias.shape == (n,)))


def main(argv: list[str] | None = None) -> int:
    """`python -m engine.layers.cpu_kernels build DIR`: the libraries an image without a compiler loads."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m engine.layers.cpu_kernels")
    parser.add_argument("command", choices=["build"])
    parser.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    for path in build_prebuilt(args.directory):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
