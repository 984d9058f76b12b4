"""The embedder computes what sentence-transformers computes for all-MiniLM-L6-v2, on its fp32 runners, and
stays close to it with int8 weights (the default).

The reference is the library the model was published for (`SentenceTransformer(...).encode(normalize_embeddings=
True)`); the fp32 runners (ONNX Runtime with LLM_GATEWAY_EMBED_PRECISION=fp32, torch as the fallback) must agree
with it to a cosine of 0.9999 on every sentence, alone (a lookup at C=1) and inside padded batches of mixed
lengths (micro-batching). The int8 runner must stay within MIN_INT8_COSINE of the fp32 one on every sentence
(lowest seen: 0.974 here, on the 300-character opaque token; mean 0.991; 0.980 over the 1,813 texts of the
tune half and our pair files), and give a text the same vector whatever batch it comes in.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import gateway.cache.embedder as embedder_module
from gateway.cache.embedder import DIM, MAX_TOKENS, MiniLMEmbedder, model_dir
from gateway.cache.window import TokenWindow

MIN_COSINE = 0.9999
MIN_INT8_COSINE = 0.96  # per sentence, int8 against fp32 (a fresh int8 graph must reach 0.97 on the probes)
MIN_INT8_MEAN_COSINE = 0.985

SENTENCES = [
    "How do I reset my password?",
    "how do i reset my password",
    "What is the capital of France?",
    "What is the capital of France",
    "For how many years am I covered if it breaks?",
    "How long is the warranty?",
    "Is 3 greater than 5?",
    "Is 5 greater than 3?",
    "Book a flight from Paris to Berlin on 12 March.",
    "Book a flight from Berlin to Paris on 21 March.",
    "Can part-time employees get health insurance?",
    "I can't log in: the app says ERR_CONN_RESET after the 2.4.1 update!!!",
    "x",
    "",
    "   ",
    "Ünïcödé ﬁle names and emoji 🙂 in a question?",
    "a3f9c2e1b7d4" * 25,  # an opaque token far longer than any word piece
    "The quick brown fox jumps over the lazy dog. " * 60,  # far past the 256-token window: truncated
    "Summarise this: " + "the committee met again and postponed the decision. " * 20,
    "如何重置我的密码？",
    "我的密码怎么重置",
    "法国的首都是哪里？",
    "保修期是多长时间？",
    "如果坏了，我能保修几年？",
    "3比5大吗？",
    "从上海到北京的航班什么时候起飞？",
    "兼职员工可以享受医疗保险吗？",
    "今天天气怎么样？我想去公园散步，但是担心会下雨。",
    "请把这段话翻译成英文：我们明天上午十点开会。",
    "用 Python 怎么读取 JSON 文件？",
    "What does 机器学习 mean in English?",
    "Comment réinitialiser mon mot de passe ?",
    "¿Cuál es la capital de Francia?",
    "SELECT * FROM users WHERE id = 42;",
    "https://example.com/a/very/long/path?with=query&and=more#fragment",
    "Tell me a joke about cats.",
]


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir()), device="cpu")
    assert model.max_seq_length == MAX_TOKENS
    return np.asarray(model.encode(SENTENCES, batch_size=8, normalize_embeddings=True), dtype=np.float32)


@pytest.fixture(scope="module")
def fp32() -> MiniLMEmbedder:
    return MiniLMEmbedder(precision="fp32")


@pytest.fixture(scope="module")
def torch_fallback() -> MiniLMEmbedder:
    """The torch runner as the gateway gets it when ONNX Runtime is unavailable (loaded once for the module)."""
    def unavailable(*_: object) -> None:
        raise ImportError("No module named 'onnxruntime'")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(embedder_module, "onnx_forward", unavailable)
        return MiniLMEmbedder()


def assert_matches(vectors: np.ndarray, reference: np.ndarray) -> None:
    assert vectors.dtype == np.float32 and vectors.shape == reference.shape
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(vectors * reference, axis=1)
    worst = int(np.argmin(cosines))
    assert cosines[worst] >= MIN_COSINE, (SENTENCES[worst], float(cosines[worst]))


def each_way(embedder: MiniLMEmbedder) -> list[np.ndarray]:
    """Every sentence alone, all in one padded batch, in uneven micro-batches, and from word pieces tokenized
    beforehand (the worker's path; untruncated here, so encode_pieces must cut past-window texts itself)."""
    alone = np.concatenate([embedder.encode([s]) for s in SENTENCES])
    together = embedder.encode(SENTENCES)
    uneven = np.concatenate([embedder.encode(SENTENCES[i:i + 7]) for i in range(0, len(SENTENCES), 7)])
    pieces = TokenWindow(str(model_dir() / "tokenizer.json"), window=100_000).pieces(SENTENCES)
    assert all(p is not None for p in pieces)
    from_pieces = np.concatenate([embedder.encode_pieces([p]) for p in pieces])  # type: ignore[list-item]
    return [alone, together, uneven, from_pieces]


def test_onnx_fp32_runner_matches_sentence_transformers(fp32, reference) -> None:
    assert (fp32.backend, fp32.precision) == ("onnx", "fp32")
    for vectors in each_way(fp32):
        assert_matches(vectors, reference)


def test_default_runner_is_onnx_int8_close_to_fp32_and_the_same_in_any_batch(embedder, fp32, reference) -> None:
    assert (embedder.backend, embedder.precision) == ("onnx", "int8")
    alone, *batched = each_way(embedder)
    for vectors in batched:  # each text runs alone inside a batch: micro-batching does not move its vector
        np.testing.assert_allclose(vectors, alone, atol=1e-6)
    assert alone.dtype == np.float32 and alone.shape == reference.shape
    np.testing.assert_allclose(np.linalg.norm(alone, axis=1), 1.0, atol=1e-5)
    cosines = np.sum(alone * fp32.encode(SENTENCES), axis=1)
    worst = int(np.argmin(cosines))
    assert cosines[worst] >= MIN_INT8_COSINE, (SENTENCES[worst], float(cosines[worst]))
    assert float(cosines.mean()) >= MIN_INT8_MEAN_COSINE
    assert float(cosines.min()) < 0.99999  # really the int8 graph, not the fp32 one under another name


def test_torch_runner_is_the_fallback_and_matches_sentence_transformers(torch_fallback, reference) -> None:
    assert torch_fallback.backend == "torch"
    for vectors in each_way(torch_fallback):
        assert_matches(vectors, reference)


def test_texts_past_the_window_embed_like_their_first_256_word_pieces(embedder) -> None:
    long = "The quick brown fox jumps over the lazy dog. " * 60
    longer = long + "But this last sentence, past the window, is never read."
    a, b = embedder.encode([long, longer])
    assert float(a @ b) > 0.99999


def test_no_texts_no_rows(embedder) -> None:
    for out in (embedder.encode([]), embedder.encode_pieces([])):
        assert out.shape == (0, DIM) and out.dtype == np.float32


def test_graphs_are_kept_and_reused_and_a_damaged_copy_is_replaced(tmp_path: Path, monkeypatch, reference) -> None:
    key = embedder_module._weights_key(model_dir())
    target = tmp_path / f"all-MiniLM-L6-v2-{key}.onnx"
    target_int8 = tmp_path / f"all-MiniLM-L6-v2-{key}-int8-q{embedder_module.QUANT_VERSION}.onnx"
    assert embedder_module.graph_file(tmp_path, model_dir(), "int8") == target_int8
    target.write_bytes(b"not an onnx graph")  # a damaged file where the cached graph should be
    first = MiniLMEmbedder(directory=tmp_path)  # int8: exports the fp32 graph, then quantizes it
    assert (first.backend, first.precision) == ("onnx", "int8")
    assert target.stat().st_size > 80_000_000 and target_int8.stat().st_size < 30_000_000
    import onnx

    fused_ops = {node.op_type for node in onnx.load(str(target)).graph.node}
    assert {"Attention", "SkipLayerNormalization"} <= fused_ops  # the transformer fusions were applied
    int8_ops = {node.op_type for node in onnx.load(str(target_int8)).graph.node}
    assert {"QAttention", "MatMulInteger"} <= int8_ops and "Attention" not in int8_ops
    kept = sorted([target.name, target_int8.name, target.with_suffix(".lock").name])  # no temp files
    assert sorted(p.name for p in tmp_path.iterdir()) == kept

    def not_again(*_: object) -> bytes:
        raise AssertionError("made again although a good graph was cached")

    monkeypatch.setattr(embedder_module, "export_onnx", not_again)
    monkeypatch.setattr(embedder_module, "quantized", not_again)
    second = MiniLMEmbedder(directory=tmp_path)
    assert (second.backend, second.precision) == ("onnx", "int8")
    np.testing.assert_allclose(second.encode(SENTENCES), first.encode(SENTENCES), atol=1e-6)
    fp32 = MiniLMEmbedder(directory=tmp_path, precision="fp32")
    assert (fp32.backend, fp32.precision) == ("onnx", "fp32")
    assert_matches(fp32.encode(SENTENCES), reference)


def with_fp32_export(directory: Path) -> None:
    """Put the fp32 export (the `fp32` fixture made sure there is one) where `directory`'s runners look."""
    key = embedder_module._weights_key(model_dir())
    (directory / f"all-MiniLM-L6-v2-{key}.onnx").write_bytes(embedder_module.graph_file(
        embedder_module.cache_dir(), model_dir(), "fp32").read_bytes())


def test_a_failed_quantization_runs_fp32_and_is_remembered_until_the_toolchain_changes(
        tmp_path: Path, monkeypatch, caplog, fp32, reference) -> None:
    def broken(_: bytes) -> bytes:
        raise RuntimeError("quantizer does not know this graph")

    monkeypatch.setattr(embedder_module, "quantized", broken)
    with_fp32_export(tmp_path)
    fallback = MiniLMEmbedder(directory=tmp_path)
    assert (fallback.backend, fallback.precision) == ("onnx", "fp32")
    assert_matches(fallback.encode(SENTENCES[:6]), reference[:6])
    int8_target = embedder_module.graph_file(tmp_path, model_dir(), "int8")
    assert not int8_target.exists()
    failed = embedder_module.failure_file(int8_target)
    assert "quantizer does not know this graph" in failed.read_text()

    def not_again(_: bytes) -> bytes:
        raise AssertionError("quantizing tried again although it failed with this toolchain")

    monkeypatch.setattr(embedder_module, "quantized", not_again)
    with caplog.at_level("WARNING", logger="gateway.cache"):
        again = MiniLMEmbedder(directory=tmp_path)  # straight to fp32, and says why once
    assert again.precision == "fp32"
    said = [r.getMessage() for r in caplog.records if "could not be made before" in r.getMessage()]
    assert len(said) == 1 and "quantizer does not know this graph" in said[0] and str(failed) in said[0]
    # Another ONNX Runtime (or onnx, torch) is another key: its graphs, and its failure, are its own.
    fp32_target = embedder_module.graph_file(tmp_path, model_dir(), "fp32")
    toolchain = embedder_module.toolchain()
    assert "onnxruntime=" in toolchain and "onnx=" in toolchain and "torch=" in toolchain
    monkeypatch.setattr(embedder_module, "toolchain", lambda: toolchain.replace("onnxruntime=", "onnxruntime=9"))
    upgraded = embedder_module.graph_file(tmp_path, model_dir(), "int8")
    assert upgraded != int8_target and not embedder_module.failure_file(upgraded).exists()
    assert embedder_module.graph_file(tmp_path, model_dir(), "fp32") != fp32_target


def test_workers_starting_together_quantize_once(tmp_path: Path, monkeypatch, caplog, fp32) -> None:
    """Two builders at once (threads here; flock(2) locks are per open file, so they exclude each other as two
    processes would): one makes the int8 graph, the other waits for the lock and loads what the first kept."""
    import logging
    import threading

    with_fp32_export(tmp_path)
    waiting = threading.Event()
    calls: list[int] = []

    class SeesTheWait(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "waiting for it" in record.getMessage():
                waiting.set()

    def quantize_once_the_other_waits(graph: bytes) -> bytes:
        calls.append(1)
        assert waiting.wait(60), "the second builder never waited for the lock"
        return graph  # the fp32 graph: agrees with itself, so it is kept as this key's int8 graph

    handler = SeesTheWait()
    logger = logging.getLogger("gateway.cache")
    logger.addHandler(handler)
    caplog.set_level(logging.INFO, logger="gateway.cache")
    monkeypatch.setattr(embedder_module, "quantized", quantize_once_the_other_waits)
    got: list[str] = []

    def build() -> None:
        tokens = embedder_module.WordPieces(model_dir())
        got.append(embedder_module.onnx_forward(model_dir(), tokens, tmp_path, "int8")[1])

    try:
        threads = [threading.Thread(target=build) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        logger.removeHandler(handler)
    assert got == ["int8", "int8"] and len(calls) == 1
    assert embedder_module.graph_file(tmp_path, model_dir(), "int8").exists()


def test_an_int8_graph_that_strays_runs_the_fp32_graph(tmp_path: Path, monkeypatch, caplog, fp32, reference) -> None:
    monkeypatch.setattr(embedder_module, "MIN_INT8_COSINE", 1.01)  # no int8 graph can agree that closely
    with_fp32_export(tmp_path)
    with caplog.at_level("WARNING", logger="gateway.cache"):
        fallback = MiniLMEmbedder(directory=tmp_path)
    assert (fallback.backend, fallback.precision) == ("onnx", "fp32")
    assert any("strays from the fp32 one" in r.getMessage() for r in caplog.records)
    assert_matches(fallback.encode(SENTENCES[:6]), reference[:6])
    assert not embedder_module.graph_file(tmp_path, model_dir(), "int8").exists()  # never kept, but remembered
    assert embedder_module.failure_file(embedder_module.graph_file(tmp_path, model_dir(), "int8")).exists()


def test_a_graph_that_cannot_be_kept_leaves_no_temporary_file(tmp_path: Path, monkeypatch) -> None:
    def full_disk(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(embedder_module.os, "replace", full_disk)
    embedder_module._keep(tmp_path / "graph.onnx", b"graph bytes")
    assert list(tmp_path.iterdir()) == []


def test_unknown_backend_or_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="onnx or torch"):
        MiniLMEmbedder(backend="tensorrt")
    with pytest.raises(ValueError, match="int8 or fp32"):
        MiniLMEmbedder(precision="fp16")


def test_a_quantization_short_of_memory_is_not_remembered(tmp_path: Path, monkeypatch, fp32) -> None:
    """ONNX Runtime reports an allocation failure as its own exception, not MemoryError: the machine was short,
    the toolchain is fine, so the next start tries int8 again."""
    def short_of_memory(_: bytes) -> bytes:
        raise RuntimeError("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Arena alloc failed")

    monkeypatch.setattr(embedder_module, "quantized", short_of_memory)
    with_fp32_export(tmp_path)
    assert MiniLMEmbedder(directory=tmp_path).precision == "fp32"
    int8_target = embedder_module.graph_file(tmp_path, model_dir(), "int8")
    assert not embedder_module.failure_file(int8_target).exists()
