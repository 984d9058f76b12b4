"""`llm-gateway cache calibrate` on a small labelled file, with the real embedder."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from gateway.cache.calibrate import LabelledPair, calibrate, load_pairs, main
from gateway.cache.config import JudgeConfig, SemanticConfig
from gateway.cache.embedder import MiniLMEmbedder

PAIRS = [
    {"a": "What is the capital of France?", "b": "what is the capital of france", "same": True},
    {"a": "How do I reset my password?", "b": "How can I reset my password?", "same": True},
    {"a": "How long is the warranty?", "b": "For how many years am I covered if it breaks?", "same": True},
    {"a": "Is 5 greater than 3?", "b": "Is 3 greater than 5?", "same": False},
    {"a": "How do I turn on dark mode?", "b": "How do I disable dark mode?", "same": False},
    {"a": "Can I return an opened item?", "b": "Can I return an unopened item?", "same": False, "kind": "negation"},
]


def write(tmp_path: Path, rows: list, name: str = "pairs.jsonl") -> Path:
    path = tmp_path / name
    path.write_bytes(b"\n".join(r if isinstance(r, bytes) else orjson.dumps(r) for r in rows) + b"\n")
    return path


def test_calibrate_prints_a_row_per_threshold_and_the_best(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, PAIRS)
    assert main(["--pairs", str(path), "--max-wrong", "0"]) == 0
    out = capsys.readouterr().out
    assert "6 pairs (3 should hit, 3 must not)" in out
    for th in ("0.70", "0.80", "0.98"):
        assert f"\n     {th}" in out
    assert "<- best" in out
    assert "best threshold within 0.000 wrong answers" in out


def test_calibrate_through_the_gateway_path(tmp_path: Path, embedder: MiniLMEmbedder) -> None:
    pairs = load_pairs(write(tmp_path, PAIRS))
    result = calibrate(pairs, embedder, SemanticConfig(), max_wrong=0.0)
    by_threshold = {r.threshold: r for r in result.rows}
    # the near-repeat and the close rewording are served at the default, the traps never, the loose
    # rewording (cosine ~0.5) is not
    assert by_threshold[0.80].served_same == 2 and by_threshold[0.80].served_different == 0
    assert result.current is by_threshold[0.80] or result.current == by_threshold[0.80]
    assert result.best is not None and result.best.wrong == 0.0
    # without the verifier cosine serves the traps
    raw = calibrate(pairs, embedder, SemanticConfig(verify=False), max_wrong=0.0)
    assert {r.threshold: r for r in raw.rows}[0.80].served_different >= 2


def test_a_judge_serves_the_band_below_the_threshold(tmp_path: Path, embedder: MiniLMEmbedder) -> None:
    pairs = load_pairs(write(tmp_path, PAIRS))
    asked: list[tuple[str, str]] = []

    async def judge(cached: str, new: str) -> bool:  # a scripted judge that knows the labels
        asked.append((cached, new))
        return "covered" in new

    config = SemanticConfig(judge=JudgeConfig(backend="small", model="m", threshold=0.3))
    result = calibrate(pairs, embedder, config, max_wrong=0.0, judge=judge)
    row = {r.threshold: r for r in result.rows}[0.80]
    assert row.served_same == 3 and row.served_different == 0  # the loose rewording, judged yes
    assert asked and all(new != "Is 3 greater than 5?" for _, new in asked)  # verifier rejects come first


@pytest.mark.parametrize(("rows", "line", "message"), [
    ([PAIRS[0], b"{not json"], 2, "not valid JSON"),
    ([PAIRS[0], PAIRS[3], [1, 2]], 3, "expected an object"),
    ([PAIRS[0], {"a": "x", "b": "", "same": True}], 2, '"b" must be a non-empty string'),
    ([PAIRS[0], {"a": "x", "b": "y", "same": "yes"}], 2, '"same" must be true or false'),
])
def test_a_malformed_file_names_the_line_and_exits_2(tmp_path: Path, capsys, rows: list, line: int,
                                                     message: str) -> None:
    path = write(tmp_path, rows)
    assert main(["--pairs", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{line}:" in err and message in err


def test_one_label_only_or_a_missing_file_exits_2(tmp_path: Path, capsys) -> None:
    assert main(["--pairs", str(write(tmp_path, [PAIRS[0], PAIRS[1]]))]) == 2
    assert "both labels" in capsys.readouterr().err
    assert main(["--pairs", str(tmp_path / "missing.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "value", "message"), [("PRECISION", "fp16", "int8 or fp32"),
                                                           ("BACKEND", "tensorrt", "onnx or torch")])
def test_a_bad_embedder_setting_is_a_usage_error(tmp_path: Path, capsys, monkeypatch, name: str, value: str,
                                                 message: str) -> None:
    import gateway.cache.embedder as embedder_module

    monkeypatch.setattr(embedder_module, "_shared", None)  # no embedder loaded by an earlier test in this process
    monkeypatch.setenv(f"LLM_GATEWAY_EMBED_{name}", value)
    assert main(["--pairs", str(write(tmp_path, PAIRS))]) == 2  # 2: usage, not 1 ("no threshold within budget")
    err = capsys.readouterr().err
    assert err.startswith("llm-gateway cache calibrate: ") and message in err and "Traceback" not in err


def test_the_cli_dispatches_to_calibrate(tmp_path: Path, capsys) -> None:
    from gateway.cli import main as cli_main

    assert cli_main(["cache", "calibrate", "--pairs", str(tmp_path / "missing.jsonl")]) == 2


def test_pairs_keep_their_extra_fields(tmp_path: Path) -> None:
    pairs = load_pairs(write(tmp_path, PAIRS))
    assert pairs[5] == LabelledPair(PAIRS[5]["a"], PAIRS[5]["b"], False, {"kind": "negation"})
