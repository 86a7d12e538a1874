"""vLLM's checks that depend on the GPU generation: bfloat16, the FP8 KV cache of the attention backend vLLM
picks for the GPU, fp8_e5m2 with an FP8 checkpoint, and the KV block size the backends accept.
"""

from __future__ import annotations

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GpuModel
from vllmctl.planner.rules.base import RuleInput, Violation
from vllmctl.planner.rules.quantized import resolved_dtype
from vllmctl.planner.versions import Version

# 0.12.0 chooses backends from a priority list; FlashInfer (fp8 KV on 7.5 and newer) follows FlashAttention.
BACKEND_PRIORITIES_SINCE: Version = (0, 12, 0)


def _capability(gpu: GpuModel) -> int:
    major, minor = gpu.compute_capability
    return major * 10 + minor


def fp8_kv_supported(arch: ModelArch, gpu: GpuModel, version: Version) -> tuple[bool, str]:
    """Whether the attention backend vLLM picks for this GPU can hold an FP8 KV cache, and why not."""
    cc = _capability(gpu)
    if gpu.vendor != "nvidia":
        return True, ""
    if arch.is_mla:
        if cc // 10 in (9, 10) or version >= (0, 21, 0) or version < (0, 10, 0):
            return True, ""
        return False, (
            f"MLA models off Hopper/Blackwell run the Triton MLA backend, which has no FP8 KV cache "
            f"({gpu.name} is {cc // 10}.{cc % 10})"
        )
    if version < (0, 11, 0):
        return True, ""  # older releases fall back to the V0 engine, which has FP8 KV kernels
    if version >= BACKEND_PRIORITIES_SINCE:
        if cc >= 75:
            return True, ""
        return False, f"no attention backend with an FP8 KV cache runs on compute capability {cc / 10:.1f}"
    if cc < 80:
        return False, f"{gpu.name} ({cc / 10:.1f}) gets the FlexAttention backend, which has no FP8 KV cache"
    if cc >= 89:
        return True, ""  # FlashAttention 3 on Hopper; Triton on Ada and Blackwell
    return False, (
        f"on {gpu.name} ({cc / 10:.1f}) FP8 KV selects the Triton backend, whose fp8e4nv type needs "
        "compute capability 8.9 (vllm#26431)"
    )


def bfloat16_capability(given: RuleInput) -> Violation | None:
    # vllm/platforms/cuda.py:497-515 (check_if_supports_dtype), called from v1/worker/gpu_worker.py:163
    if resolved_dtype(given) != "bfloat16" or given.cc >= 80 or given.gpu.vendor != "nvidia":
        return None
    return Violation(
        "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your "
        f"{given.gpu.smi_name} GPU has compute capability {given.cc // 10}.{given.cc % 10}. You can use "
        "float16 instead by explicitly setting the `dtype` flag in CLI, for example: --dtype=half.",
        f"{given.gpu.name} predates Ampere: it has no bfloat16 arithmetic",
        "dtype: float16 (or leave dtype unset: vLLM then casts to float16 itself)",
    )


def fp8_kv_backend(given: RuleInput) -> Violation | None:
    # vllm/platforms/cuda.py:358-373 (backend choice), v1/attention/backends/flex_attention.py:703-705,
    # v1/attention/backends/mla/triton_mla.py:68-70; vllm#26431 (Triton fp8e4nv on sm80/86)
    s = given.settings
    if not s.kv_cache_dtype.startswith("fp8"):
        return None
    ok, why = fp8_kv_supported(given.arch, given.gpu, s.version)
    if ok:
        return None
    message = (
        "NotImplementedError: TritonMLA V1 with FP8 KV cache not yet supported"
        if given.arch.is_mla
        else "NotImplementedError: FlexAttention does not support quantized kv-cache. Yet"
        if given.cc < 80
        else "triton.CompilationError: type fp8e4nv not supported in this architecture"
    )
    return Violation(message, why, "kv_cache_dtype: auto (or a Hopper/Ada/Blackwell GPU)")


def fp8_e5m2_with_fp8_checkpoint(given: RuleInput) -> Violation | None:
    # vllm/attention/layer.py:165-175 (Attention.__init__ with a checkpoint's KV-cache scales)
    quant = given.arch.quantization
    if given.settings.kv_cache_dtype != "fp8_e5m2" or quant is None or quant.method != "fp8":
        return None
    return Violation(
        "fp8_e5m2 kv-cache is not supported with fp8 checkpoints.",
        "an FP8 checkpoint carries e4m3 KV scales",
        "kv_cache_dtype: fp8 (e4m3) or auto",
    )


def block_size_multiple_of_16(given: RuleInput) -> Violation | None:
    # vllm/v1/attention/backends/flash_attn.py:85-86 and triton_attn.py:176-177 (get_kv_cache_shape)
    size = given.settings.block_size
    if size is None or size % 16 == 0 or given.arch.is_mla or given.cc < 80:
        return None
    return Violation(
        "Block size must be a multiple of 16.",
        f"the FlashAttention and Triton backends vLLM uses on {given.gpu.name} lay KV out in 16-token tiles",
        "block_size: 16, 32, 64 or 128 (or leave it unset)",
    )
