"""Run at image build time, after the install: fails the build when the image would fall back at run time.
Builds the C kernels for every x86-64 level and the embedder's ONNX graphs into /opt/llm-gateway (the runtime
stage has no compiler, and each new container would otherwise spend 15-20 s of CPU making the graphs on its
first request), then checks that they load, that xgrammar constrains tokens on CPU without triton, and that the
test-only packages stayed out. Importing the runtime's modules here also writes their bytecode (pip ran with
--no-compile: only what runs gets .pyc files)."""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from pathlib import Path

LEFT_OUT = ("triton", "sentence_transformers", "sklearn", "scipy")


def build_kernels(directory: Path) -> None:
    from engine.layers import cpu_kernels

    for path in cpu_kernels.build_prebuilt(directory):
        print(f"built {path}")
    os.environ[cpu_kernels.PREBUILT_ENV] = str(directory)
    if cpu_kernels.load_library() is None or not cpu_kernels.kernel_status().startswith("prebuilt"):
        raise SystemExit(f"C kernels do not load: {cpu_kernels.kernel_status()}")
    print(f"C kernels: {cpu_kernels.kernel_status()}", flush=True)


def build_graphs(directory: Path) -> None:
    from gateway.cache import embedder

    os.environ[embedder.CACHE_ENV] = str(directory)
    made = embedder.MiniLMEmbedder()
    if (made.backend, made.precision) != ("onnx", "int8"):
        raise SystemExit(f"embedder fell back to {made.backend} {made.precision}")
    # The int8 graph is all the default precision loads; the fp32 one it was made from is 86 MB of the image's
    # size budget (LLM_GATEWAY_EMBED_PRECISION=fp32 exports it again at start-up, ~10 s).
    path = embedder.model_dir()
    embedder.graph_file(directory, path, "fp32").unlink()
    again = embedder.MiniLMEmbedder()  # as a container will: from the kept graph alone
    if again.precision != "int8":
        raise SystemExit(f"the kept int8 graph did not load ({again.precision})")
    if again.encode(["hello"]).shape != (1, embedder.DIM):
        raise SystemExit("embedder from the kept graphs gives no vector")
    for kept in sorted(directory.iterdir()):
        kept.chmod(0o644)  # the runtime user reads them; the lock file beside them stays unused
        print(f"kept {kept.name} ({kept.stat().st_size >> 20} MiB)", flush=True)


def check_xgrammar() -> None:
    import torch
    import xgrammar as xg

    vocab = ["{", "}", '"', "a", ":", ",", " ", "1", "</s>"]
    info = xg.TokenizerInfo(vocab, stop_token_ids=[len(vocab) - 1])
    compiled = xg.GrammarCompiler(info).compile_builtin_json_grammar()
    matcher = xg.GrammarMatcher(compiled)
    mask = xg.allocate_token_bitmask(1, info.vocab_size)
    matcher.fill_next_token_bitmask(mask)
    logits = torch.zeros(1, info.vocab_size)
    xg.apply_token_bitmask_inplace(logits, mask)
    allowed = [vocab[i] for i in range(len(vocab)) if logits[0, i] != float("-inf")]
    if "{" not in allowed or "a" in allowed:
        raise SystemExit(f"xgrammar mask on CPU is wrong: allows {allowed}")
    print(f"xgrammar on CPU: first JSON token may be {allowed}")


def main() -> int:
    logging.basicConfig(level=logging.WARNING)  # ONNX Runtime's quantizer says a lot at INFO
    present = [name for name in LEFT_OUT if importlib.util.find_spec(name) is not None]
    if present:
        raise SystemExit(f"left out of the image on purpose, but installed: {present}")
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/opt/llm-gateway")
    build_kernels(root / "kernels")
    build_graphs(root / "embed")
    check_xgrammar()
    import engine.serving.server  # noqa: F401  the replica's server and the gateway app: their bytecode
    import gateway.app  # noqa: F401
    import gateway.cli  # noqa: F401
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
