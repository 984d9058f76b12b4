"""`llm-gateway bench` against the fake OpenAI server: counts, concurrency, streams, errors, output formats."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiohttp import web

from gateway.loadtest import LoadConfig, main, percentile, run_load
from gateway.loadtest_workloads import TOPICS, make_workload
from tests.fakes.openai_server import FakeOpenAI
from tests.helpers import ServerThread, free_port


class Gate:
    """Server middleware: the first `target` requests wait until `target` are in flight at once, which the
    client reaches only if it really keeps that many open; also labels repeats with X-Cache."""

    def __init__(self, target: int) -> None:
        self.target, self.inflight, self.max_inflight = target, 0, 0
        self.full = asyncio.Event()
        self.seen: set[bytes] = set()

    @web.middleware
    async def middleware(self, request: web.Request, handler):  # type: ignore[no-untyped-def]
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        if self.inflight >= self.target:
            self.full.set()
        try:
            await asyncio.wait_for(self.full.wait(), 20)  # a hang guard, not a timing assertion
            return await handler(request)
        finally:
            self.inflight -= 1

    async def label(self, request: web.Request, response: web.StreamResponse) -> None:
        raw = await request.read()
        response.headers["X-Cache"] = "HIT-EXACT" if raw in self.seen else "MISS"
        self.seen.add(raw)


def serve(fake: FakeOpenAI, gate: Gate | None = None) -> ServerThread:
    def factory() -> web.Application:
        if gate is not None:
            fake.app.middlewares.append(gate.middleware)
            fake.app.on_response_prepare.append(gate.label)
        return fake.app

    return ServerThread(factory)


def jsonl(tmp_path: Path, *contents: str) -> Path:
    path = tmp_path / "bodies.jsonl"
    lines = ["# comment lines and blank lines are skipped", ""]
    lines += [json.dumps({"messages": [{"role": "user", "content": c}]}) for c in contents]
    path.write_text("\n".join(lines) + "\n")
    return path


async def test_closed_loop_keeps_c_in_flight_and_counts_tokens(tmp_path: Path) -> None:
    fake, gate = FakeOpenAI(), Gate(target=4)
    with serve(fake, gate) as srv:
        cfg = LoadConfig(url=srv.url, workload=make_workload(str(jsonl(tmp_path, "a b c")), None),
                         requests=24, concurrency=4, model="fake-model")
        s = (await run_load(cfg)).summary()
    assert s["requests"] == 24 and s["ok"] == 24 and s["errors"] == {}
    assert s["output_tokens"] == 24 * 4  # "echo: a b c" is four words, the fake's token unit
    assert gate.max_inflight == 4
    assert s["latency_ms"]["p50"] <= s["latency_ms"]["p95"] <= s["latency_ms"]["p99"] <= s["latency_ms"]["max"]
    assert s["ttft_ms"] is None and s["x_cache"] == {"MISS": 1, "HIT-EXACT": 23}
    assert all(r.body["model"] == "fake-model" and r.body["stream"] is False for r in fake.requests)


async def test_stream_measures_ttft_tpot_and_usage_tokens(tmp_path: Path) -> None:
    fake = FakeOpenAI()
    with serve(fake) as srv:
        cfg = LoadConfig(url=srv.url + "/v1", workload=make_workload(str(jsonl(tmp_path, "one two", "x")), None),
                         requests=10, concurrency=3, stream=True, model="fake-model")
        s = (await run_load(cfg)).summary()
    assert s["ok"] == 10 and s["output_tokens"] == 5 * 3 + 5 * 2
    assert s["ttft_ms"] is not None and s["tpot_ms"] is not None
    assert s["ttft_ms"]["p50"] <= s["latency_ms"]["max"]
    assert all(r.body["stream_options"] == {"include_usage": True} for r in fake.requests)


async def test_errors_are_counted_by_kind_with_an_example() -> None:
    fake = FakeOpenAI()
    fake.fail_next(3, status=503)
    with serve(fake) as srv:
        cfg = LoadConfig(url=srv.url, workload=make_workload("chat-short", None), requests=8, concurrency=1,
                         model="fake-model")
        s = (await run_load(cfg)).summary()
    assert s["ok"] == 5 and s["errors"] == {"http_503": 3}
    assert "scripted failure 503" in s["error_examples"]["http_503"]


@pytest.mark.parametrize(("knob", "kind"), [("cut_after", "stream_cut"), ("stream_error_after", "stream_error")])
async def test_broken_streams_are_errors(knob: str, kind: str) -> None:
    fake = FakeOpenAI()
    setattr(fake, knob, 2)
    with serve(fake) as srv:
        cfg = LoadConfig(url=srv.url, workload=make_workload("chat-short", None), requests=3, concurrency=1,
                         stream=True, model="fake-model")
        s = (await run_load(cfg)).summary()
    assert s["ok"] == 0 and set(s["errors"]) <= {kind, "protocol"} and sum(s["errors"].values()) == 3
    if knob == "stream_error_after":
        assert s["errors"] == {"stream_error": 3}


async def test_open_loop_sends_every_request() -> None:
    fake = FakeOpenAI()
    with serve(fake) as srv:
        cfg = LoadConfig(url=srv.url, workload=make_workload("repeat", None), requests=12, rate=400.0,
                         model="fake-model")
        s = (await run_load(cfg)).summary()
    assert s["ok"] == 12 and fake.request_count == 12
    assert {r.body["messages"][0]["content"] for r in fake.requests} == {
        make_workload("repeat", None)(i)["messages"][0]["content"] for i in range(4)
    }


async def test_unreachable_server_counts_connect_errors() -> None:
    cfg = LoadConfig(url=f"http://127.0.0.1:{free_port()}", workload=make_workload("chat-short", None),
                     requests=3, concurrency=2)
    s = (await run_load(cfg)).summary()
    assert s["ok"] == 0 and s["errors"] == {"connect": 3} and s["rps"] == 0


def test_cli_json_output_model_override_and_progress(capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeOpenAI(api_key="bench-key")
    with serve(fake) as srv:
        rc = main(["--url", srv.url, "-n", "10", "-c", "2", "--json", "--model", "fake-model-2",
                   "--api-key", "bench-key", "--workload", "chat-long", "--max-tokens", "7"])
    out, err = capsys.readouterr()
    assert rc == 0
    s = json.loads(out)
    assert s["requests"] == 10 and s["ok"] == 10 and s["output_tokens"] == 70
    assert all(r.body["model"] == "fake-model-2" and r.body["max_tokens"] == 7 for r in fake.requests)
    assert "10/10 100%" in err  # the progress bar (plain lines when stderr is not a terminal)


def test_cli_table_and_exit_1_on_errors(capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeOpenAI(api_key="right")
    with serve(fake) as srv:
        rc = main(["--url", srv.url, "-n", "4", "--api-key", "wrong", "--model", "fake-model", "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 1 and err == ""
    assert "requests      4  (ok 0, errors 4)" in out and "error http_401" in out and "latency" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workload", "chat-medium"], "unknown workload 'chat-medium'"),
        (["--concurrency", "0"], "--concurrency must be >= 1"),
        (["--rate", "-1"], "--rate must be > 0"),
        (["--url", "localhost:8080"], "--url must be an http:// or https:// URL"),
    ],
)
def test_cli_bad_arguments_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--url", "http://127.0.0.1:1", *args])
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_bad_jsonl_names_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "w.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": oops}\n')
    with pytest.raises(SystemExit):
        main(["--url", "http://127.0.0.1:1", "--workload", str(path)])
    assert f"{path}:2: not valid JSON" in capsys.readouterr().err
    path.write_text('{"model": "m"}\n')
    with pytest.raises(SystemExit):
        main(["--url", "http://127.0.0.1:1", "--workload", str(path)])
    assert "expected a request body with messages, prompt or input" in capsys.readouterr().err


def test_percentile_interpolates_like_numpy() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.5 and percentile(values, 99) == pytest.approx(99.01)
    assert percentile([3.0], 95) == 3.0 and percentile(values, 0) == 1.0 and percentile(values, 100) == 100.0


async def test_prompt_bodies_go_to_completions(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"prompt": "alpha beta", "max_tokens": 5}\n')
    fake = FakeOpenAI()
    with serve(fake) as srv:
        cfg = LoadConfig(url=srv.url, workload=make_workload(str(path), None), requests=4, concurrency=2,
                         stream=True, model="fake-model")
        s = (await run_load(cfg)).summary()
    assert s["ok"] == 4 and {r.path for r in fake.requests} == {"/v1/completions"}
    assert s["ttft_ms"] is not None and s["output_tokens"] > 0


def test_builtin_workloads_shape_the_cache_behaviour_they_promise() -> None:
    def contents(name: str, n: int) -> list[str]:
        return [make_workload(name, None)(i)["messages"][-1]["content"] for i in range(n)]

    assert len(set(contents("chat-short", 50))) == 50  # all misses
    assert len(set(contents("repeat", 50))) == 4  # exact repeats
    assert len(set(contents("paraphrase", 20))) == 20  # every exact key differs ...
    topics = {t for c in contents("paraphrase", 20) for t in TOPICS if t in c}
    assert len(topics) == 5  # ... but only five questions are asked
    long = make_workload("chat-long", 64)
    assert long(0)["messages"][0] == long(1)["messages"][0] and long(0)["max_tokens"] == 64  # shared prefix
