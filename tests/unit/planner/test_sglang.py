"""SGLang's defaults by GPU memory and version, cell sizes and KV token capacity."""

from __future__ import annotations

from dataclasses import replace

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import custom_gpu, lookup_gpu
from vllmctl.catalog.loader import load_arch
from vllmctl.planner.sglang_memory import SglangSettings, cell_size, sglang_memory
from vllmctl.planner.versions import parse_version, sglang_gpu_defaults, sglang_mem_fraction_static
from vllmctl.planner.weights import stage_weight_bytes

GIB = 1 << 30


def test_gpu_defaults_by_memory_and_tp() -> None:
    assert sglang_gpu_defaults(15360, 1) == (2048, 8)  # T4
    assert sglang_gpu_defaults(24564, 1) == (2048, 24)  # RTX 4090
    assert sglang_gpu_defaults(24564, 4) == (2048, 80)
    assert sglang_gpu_defaults(46068, 1) == (4096, 32)  # L40S
    assert sglang_gpu_defaults(81559, 1) == (8192, 256)  # H100
    assert sglang_gpu_defaults(143771, 8) == (8192, 512)  # H200
    assert sglang_gpu_defaults(183359, 1) == (16384, 512)  # B200


def test_mem_fraction_static_new_formula_and_old_tp_table() -> None:
    new = parse_version("0.5.2")
    # H100: 512 + 8192*1.5 + 256*2 + 1/8*1024 = 13440 MiB reserved (above the 10 GiB floor).
    assert (
        sglang_mem_fraction_static(new, 81559, 1, 1, 8192, 256) == round((81559 - 13440) / 81559, 3) == 0.835
    )
    # L4: 512 + 2048*1.5 + 24*2 + 128 = 3760 MiB.
    assert sglang_mem_fraction_static(new, 23034, 1, 1, 2048, 24) == 0.837
    # Above 60 GiB at least 10 GiB stays reserved.
    assert sglang_mem_fraction_static(new, 81559, 1, 1, 2048, 8) == round((81559 - 10240) / 81559, 3)
    old = parse_version("0.3.0")
    assert [sglang_mem_fraction_static(old, 81559, tp, 1, 8192, 256) for tp in (1, 2, 4, 8)] == [
        0.90,
        0.85,
        0.82,
        0.80,
    ]


def test_cell_sizes_mha_and_mla() -> None:
    llama = load_arch("meta-llama/Llama-3.1-8B", online=False)
    assert cell_size(llama, 1, 32, "auto") == 2 * 8 * 128 * 32 * 2
    assert cell_size(llama, 16, 32, "auto") == 2 * 1 * 128 * 32 * 2
    assert cell_size(llama, 1, 32, "fp8_e4m3") == 2 * 8 * 128 * 32
    r1 = load_arch("deepseek-ai/DeepSeek-R1", online=False)
    assert cell_size(r1, 8, 61, "auto") == 576 * 61 * 2


def test_kv_tokens_from_fraction_of_pre_load_memory(tiny: ModelArch) -> None:
    gpu = custom_gpu(80.0)
    settings = SglangSettings(parse_version("0.5.2"), 1, 1, 8192, mem_fraction_static=0.8)
    mem = sglang_memory(tiny, gpu, settings)
    pre_load = int(80.0 * GIB) - 0.5 * GIB  # minus the CUDA context
    rest = pre_load * 0.8 - stage_weight_bytes(tiny, 1, 1)[0]
    assert mem.kv_cache_tokens == int(rest) // (2 * 2 * 128 * 2 * 2)
    assert mem.max_running_requests == 4096  # min(max(tokens / 8192 * 512, 2048), 4096)
    assert mem.fits


def test_max_running_requests_floor_and_fit() -> None:
    llama = load_arch("meta-llama/Llama-3.1-8B", online=False)
    settings = SglangSettings(parse_version("0.5.2"), 1, 1, 131072)
    mem = sglang_memory(llama, lookup_gpu("H100-80GB"), settings)
    assert mem.max_running_requests == 2048
    assert mem.mem_fraction_static == 0.835
    too_long = sglang_memory(llama, lookup_gpu("L4"), replace(settings, context_length=131072))
    assert not too_long.fits and too_long.max_model_len_that_fits == too_long.kv_cache_tokens
