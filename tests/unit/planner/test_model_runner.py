"""Which model runner vLLM starts (config/vllm.py of each release) and what the V2 runner changes in the
startup accounting: no CUDA-graph estimate before 0.29, per-request buffers counted from 0.27, the cold
torch.compile peak; checked against the public V2 starts of benchmarks/data/vllm_startup_public.jsonl."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import lookup_gpu
from vllmctl.catalog.loader import load_arch
from vllmctl.errors import InputError
from vllmctl.inventory.model import DriverSpec, EngineSpec, Host, SshSettings
from vllmctl.planner.inventory_plan import model_runner_for
from vllmctl.planner.model_runner import (
    COLD_COMPILE_GIB,
    cold_compile_bytes,
    graph_estimate_in_budget,
    persistent_buffer_bytes,
    uses_v2_runner,
)
from vllmctl.planner.settings import SpeculativeSettings, VllmSettings
from vllmctl.planner.versions import CUDAGRAPH_PROFILING_SINCE, parse_version
from vllmctl.planner.vllm_memory import vllm_memory

GIB = 1 << 30
# these logs come from a WSL2 desktop, where the card reports 23.99 GiB (Linux: 23.64, the catalog's)
RTX_4090 = replace(lookup_gpu("RTX 4090"), cuda_gib=23.99)
QWEN3_8B = load_arch("Qwen/Qwen3-8B", online=False)
QWEN25_7B = load_arch("Qwen/Qwen2.5-7B", online=False)
QWEN3_MOE = load_arch("Qwen/Qwen3-30B-A3B", online=False)
LLAMA = load_arch("meta-llama/Llama-3.1-8B", online=False)
PUBLIC = Path(__file__).resolve().parents[3] / "benchmarks" / "data" / "vllm_startup_public.jsonl"


def at(version: str, **kw: object) -> VllmSettings:
    return replace(VllmSettings(parse_version(version), 1, 1, 0.9, 4096, 256, 2048), **kw)  # type: ignore[arg-type]


def quantized(arch: ModelArch) -> ModelArch:
    awq = load_arch("Qwen/Qwen2.5-7B-Instruct-AWQ", online=False)
    return replace(arch, quantization=awq.quantization)


@pytest.mark.parametrize(
    ("arch", "version", "v2"),
    [
        (QWEN3_8B, "0.21.0", False),  # V2 is opt-in before 0.22
        (QWEN3_8B, "0.22.0", True),  # Qwen3ForCausalLM, dense, unquantized
        (LLAMA, "0.22.0", False),  # not yet listed
        (LLAMA, "0.23.0", True),
        (quantized(LLAMA), "0.23.0", False),  # 0.22-0.23 keep quantized checkpoints on V1
        (quantized(LLAMA), "0.24.0", True),
        (QWEN25_7B, "0.24.0", False),  # Qwen2ForCausalLM is not listed in 0.24
        (QWEN25_7B, "0.25.0", True),  # every dense model from 0.25
        (QWEN3_MOE, "0.28.0", False),  # MoE models only when listed
        (QWEN3_MOE, "0.29.0", True),  # 0.29: V2 unless a feature needs V1
    ],
)
def test_the_runner_follows_each_release(arch: ModelArch, version: str, v2: bool) -> None:
    assert uses_v2_runner(arch, at(version)) is v2


def test_the_environment_and_unsupported_features_decide_first() -> None:
    assert uses_v2_runner(QWEN3_MOE, at("0.28.0", model_runner="v2"))
    assert not uses_v2_runner(QWEN3_8B, at("0.29.0", model_runner="v1"))
    draft_model = SpeculativeSettings(method="draft_model", num_speculative_tokens=3)
    assert not uses_v2_runner(QWEN3_8B, at("0.29.0", speculative=draft_model))
    assert uses_v2_runner(QWEN3_8B, at("0.29.0", speculative=replace(draft_model, method="eagle3")))


def test_v2_takes_no_graph_estimate_before_029() -> None:
    since = CUDAGRAPH_PROFILING_SINCE
    assert not graph_estimate_in_budget(QWEN3_8B, at("0.28.0"), since)  # V2 returns 0 before 0.29
    assert graph_estimate_in_budget(QWEN3_MOE, at("0.28.0"), since)  # V1 runner: estimated since 0.20
    assert graph_estimate_in_budget(QWEN3_8B, at("0.29.0"), since)
    assert not graph_estimate_in_budget(QWEN3_MOE, at("0.19.1"), since)
    before, after = (vllm_memory(QWEN3_8B, RTX_4090, at(v)) for v in ("0.28.0", "0.29.0"))
    assert not before.cudagraph_in_budget and after.cudagraph_in_budget


def test_v2_buffers_count_from_027_and_cold_compiles_only_without_cache_or_eager_v1_from_018() -> None:
    assert persistent_buffer_bytes(QWEN3_8B, at("0.26.0")) == 0.0
    assert persistent_buffer_bytes(QWEN3_8B, at("0.27.1")) == 256 * QWEN3_8B.vocab_size * 4
    assert persistent_buffer_bytes(QWEN3_MOE, at("0.27.1")) == 0.0  # V1 runner
    assert cold_compile_bytes(QWEN3_8B, at("0.27.1")) == COLD_COMPILE_GIB * GIB
    assert cold_compile_bytes(QWEN3_8B, at("0.27.1", compile_cache="warm")) == 0.0
    assert cold_compile_bytes(QWEN3_8B, at("0.27.1", enforce_eager=True)) == 0.0
    # the V1 runner: none up to 0.17, the same peak from 0.18 (cold 0.19.1-0.22.1 V1 starts)
    assert cold_compile_bytes(QWEN3_MOE, at("0.17.1")) == 0.0
    assert cold_compile_bytes(QWEN3_MOE, at("0.27.1")) == COLD_COMPILE_GIB * GIB
    assert cold_compile_bytes(QWEN3_MOE, at("0.19.1", compile_cache="warm")) == 0.0
    cold, warm = (vllm_memory(QWEN3_8B, RTX_4090, at("0.27.1", compile_cache=c)) for c in ("cold", "warm"))
    assert cold.available_kv_cache_gib == pytest.approx(warm.available_kv_cache_gib - COLD_COMPILE_GIB)


def _logged(model: str, kv: float) -> dict[str, object]:
    for line in PUBLIC.read_text().splitlines():
        record = json.loads(line)
        if record["model"] == model and record.get("available_kv_cache_gib") == kv:
            return dict(record)
    raise AssertionError(f"no public record of {model} with {kv} GiB of KV")


@pytest.mark.parametrize(
    ("kv", "cache", "util"),
    [(5.87, "warm", 0.90), (4.67, "warm", 0.85), (4.92, "cold", 0.90)],
)
def test_qwen3_8b_on_an_rtx_4090_warm_and_cold_within_3_percent_of_the_logs(
    kv: float, cache: str, util: float
) -> None:
    """vLLM 0.27.1, V2 runner, max_model_len 4096 or 8192 (KV per token is what differs, not the budget)."""
    record = _logged("Qwen/Qwen3-8B", kv)
    assert (record.get("other_figures") or {}).get("compile") == cache  # type: ignore[union-attr]
    settings = at("0.27.1", gpu_memory_utilization=util, compile_cache=cache)
    predicted = vllm_memory(QWEN3_8B, RTX_4090, settings).available_kv_cache_gib
    assert predicted == pytest.approx(kv, rel=0.03)


def test_the_inventory_env_picks_the_runner_as_vllm_reads_it() -> None:
    def host(env: dict[str, object]) -> Host:
        return Host("a", "a.lan", SshSettings(), None, DriverSpec(), EngineSpec(), vars={"env": env})

    assert model_runner_for(host({})) == "auto"
    assert model_runner_for(host({"VLLM_USE_V2_MODEL_RUNNER": "0"})) == "v1"
    assert model_runner_for(host({"VLLM_USE_V2_MODEL_RUNNER": 1})) == "v2"
    with pytest.raises(InputError, match="read as an integer"):
        model_runner_for(host({"VLLM_USE_V2_MODEL_RUNNER": "yes"}))  # bool(int("yes")) stops vLLM
