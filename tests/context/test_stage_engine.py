"""Through the gateway to the real bundled engine: the budget's count is exactly what the engine prefills."""

from __future__ import annotations

from openai import OpenAI

from tests.context.test_stage import budget, metric


def test_engine_prompt_count_equals_the_engines_prompt_tokens(serve_gateway) -> None:
    srv = serve_gateway("""
backends:
  local: {type: engine, model: smollm2-135m, options: {device: cpu, num_threads: 2, max_model_len: 2048}}
routes:
  - match: {model: smollm2-135m}
    backends: [local]
    budget: {max_output_tokens: 4}
""")
    api = OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    messages = [
        {"role": "system", "content": "You are terse. 你必须简短回答。"},
        {"role": "user", "content": "Name a colour 🎨."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another one?"},
    ]
    docs = [{"id": "palette", "content": "The palette has teal, ochre and crimson.", "score": 1.0}]
    raw = api.chat.completions.with_raw_response.create(
        model="smollm2-135m", messages=messages, temperature=0, extra_body={"documents": docs})
    report = budget(raw.headers)
    completion = raw.parse()
    assert report["tokenizer"] == "engine/smollm2-135m" and "estimate" not in report
    assert report["window"] == "2048"  # the engine's max_model_len, not the model's 8,192
    assert int(report["total"]) == completion.usage.prompt_tokens
    assert completion.usage.completion_tokens <= 4  # the reserved output was forwarded as max_tokens

    # The next turn reuses the prefix the engine cached; the stage counts what the engine reports.
    messages += [{"role": "assistant", "content": completion.choices[0].message.content or "Red."},
                 {"role": "user", "content": "And a third?"}]
    again = api.chat.completions.create(model="smollm2-135m", messages=messages, temperature=0,
                                        extra_body={"documents": docs})
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert cached > 0
    assert metric(srv, "gateway_tokens_total", kind="cached_upstream") == cached
