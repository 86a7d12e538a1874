"""Weight bytes one GPU holds: parameter shapes per rank times the bytes each quantization stores.

Quantized formats keep embeddings, the LM head, norms and routers in the checkpoint dtype; group-wise
int4 stores fp16 scales (and AWQ packed zero points) per group of input channels.
"""

from __future__ import annotations

from functools import lru_cache

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.params import Linear, pipeline_stages, stage_linears
from vllmctl.catalog.quant import QuantConfig
from vllmctl.planner.allocator import allocated_block_bytes
from vllmctl.planner.versions import Version

GIB = 1 << 30
TRITON_KERNELS_BUNDLED_SINCE: Version = (0, 12, 0)  # vllm/third_party/triton_kernels appears in 0.12.0
SCALE_BYTES = 4  # fp32 per-channel / per-block scales


def _quantized(part: Linear, quant: QuantConfig | None) -> bool:
    if quant is None or part.kind in ("embed", "lm_head", "norm", "router", "mla_absorbed", "state"):
        return False
    if quant.experts_only:
        return part.kind == "expert"
    if part.kind == "mlp" and part.layer in quant.unquantized_mlp_layers:
        return False
    return not (part.kind == "attn" and not quant.attention_quantized)


def linear_tensors(
    part: Linear, quant: QuantConfig | None, dtype_bytes: int, marlin: bool = False
) -> tuple[float, ...]:
    """The bytes of each tensor vLLM allocates for one Linear on one rank: weight, scales, bias. A fused-MoE
    layer stacks its experts into one tensor per projection; other repeated parts are separate tensors.
    With `marlin` (FP8 on a GPU without FP8 compute), the weight keeps its bytes (repacked as int32) and the
    scales become Marlin's group-wise ones: one per output channel and 128 inputs of a block-quantized
    checkpoint, one per output channel otherwise, in the activation dtype (marlin_utils_fp8.py,
    prepare_fp8_layer_for_marlin / prepare_moe_fp8_layer_for_marlin: repeat_interleave(block_n), then
    .to(orig_dtype)); the checkpoint's fp32 scales are deleted."""
    stacked = part.kind == "expert"
    per = part.count if stacked else 1
    weights = part.out * part.inp * per
    bias = (part.out * dtype_bytes * per,) if part.bias else ()
    copies = 1 if stacked else part.count
    if not _quantized(part, quant):
        return (weights * dtype_bytes, *bias) * copies
    assert quant is not None
    method = quant.method
    if method in ("fp8", "w8a8") and quant.bits == 8:
        if marlin and method == "fp8":
            groups = -(-part.inp // quant.block) if quant.block else 1
            return (float(weights), float(groups * part.out * dtype_bytes * per), *bias) * copies
        if quant.block:
            scales = -(-part.out // quant.block) * -(-part.inp // quant.block) * SCALE_BYTES * per
        else:
            scales = part.out * SCALE_BYTES * per
        return (float(weights), float(scales), *bias) * copies
    group = quant.group_size or part.inp
    groups = -(-part.inp // group) * part.out * per
    packed = weights * quant.bits / 8
    extra: tuple[float, ...]
    if method == "awq":
        extra = (groups * 2, groups * quant.bits / 8)  # fp16 scales, packed zero points
    elif method in ("gptq", "bnb4"):
        extra = (groups * 2,)
    elif method == "mxfp4":
        extra = (groups * 1,)  # one e8m0 exponent per 32 weights
    elif method == "nvfp4":
        extra = (groups * 1, SCALE_BYTES * per)  # per-group e4m3 scales, one fp32 global scale per matrix
    else:
        extra = (part.out * SCALE_BYTES * per,)
    return (packed, *(float(e) for e in extra), *bias) * copies


def linear_bytes(part: Linear, quant: QuantConfig | None, dtype_bytes: int) -> float:
    """Bytes for one Linear on one rank, including its scales and bias."""
    return float(sum(linear_tensors(part, quant, dtype_bytes)))


ROPE_IN_FLOAT32 = frozenset({"gpt_oss"})  # models/gpt_oss.py builds its YaRN rope with dtype=torch.float32


def rope_cache_tensors(arch: ModelArch) -> tuple[float, ...]:
    """The rotary embeddings' cos/sin caches, buffers of every GPU's model in the model dtype, one per rope
    configuration (rotary_embedding get_rope caches the instance): positions (the derived length: YaRN's
    original length x factor, Llama 3's own; Gemma 3's two ropes their own) x rotary dim. Logged loads match
    to 0.01 %: Llama-3.1-8B 0.031 GiB above its parameters, Qwen3-0.6B 0.0098; gemma-3-4b-it 0.5625 (its
    global rope's 131,072 x 8 positions). A partial_rotary_factor rotates (and caches) that share of head_dim
    (rotary_embedding get_rope: rotary_dim = head_size x partial_rotary_factor): Qwen3-Next's 0.25 makes its
    262,144 positions 0.031 GiB, and its 0.10.2 load 74.28 GiB exact."""
    dim = arch.qk_rope_head_dim if arch.is_mla else int(arch.head_dim * arch.rotary_factor)
    dtype_bytes = 4 if arch.model_type in ROPE_IN_FLOAT32 else arch.dtype_bytes
    positions = arch.rope_positions or (arch.max_position_embeddings,)
    return tuple(float(length * dim * dtype_bytes) for length in positions)


@lru_cache(maxsize=4096)
def stage_weight_bytes(
    arch: ModelArch,
    tp: int,
    pp: int,
    ep: bool = False,
    expert_pad: tuple[int, int] = (1, 1),
    ep_ranks: int = 0,
    extra_experts: int = 0,
    max_split: float | None = None,
    marlin: bool = False,
) -> tuple[float, ...]:
    """Weight bytes per GPU for each pipeline stage (every TP rank of a stage holds the same; with expert
    parallel `ep`, the rank holding the most experts; `expert_pad` as the MoE kernel pads expert shapes);
    with `max_split` (the allocator's max_split_size), as PyTorch's caching allocator counts them: whole
    blocks (planner/allocator.py); without it, their bytes."""
    stages = pipeline_stages(arch.num_layers, pp)
    sizes = []
    for number, (first, last) in enumerate(stages):
        ep_moe = ep and arch.is_moe
        head = number == pp - 1
        parts = stage_linears(
            arch, tp, first, last, number == 0, head, ep_moe, expert_pad, ep_ranks, extra_experts
        )
        # The absorbed MLA copies are views of kv_b_proj unless it had to be de-quantized first.
        kept = [p for p in parts if p.kind != "mla_absorbed" or arch.quantization is not None]
        tensors = [t for p in kept for t in linear_tensors(p, arch.quantization, arch.dtype_bytes, marlin)]
        if max_split is None:
            sizes.append(sum(tensors))
        else:
            sizes.append(sum(allocated_block_bytes(t, max_split) for t in tensors))
    return tuple(sizes)


def weight_gib(
    arch: ModelArch, tp: int = 1, pp: int = 1, ep: bool = False, expert_pad: tuple[int, int] = (1, 1)
) -> float:
    """The largest per-GPU weight footprint, in GiB, as vLLM logs 'Model loading took'."""
    return max(stage_weight_bytes(arch, tp, pp, ep, expert_pad)) / GIB


def expert_padding(
    arch: ModelArch, compute_capability: tuple[int, int], version: Version, backend: str = "auto"
) -> tuple[int, int]:
    """How vLLM's MXFP4 MoE backend rounds each rank's expert (intermediate, hidden) sizes
    (quantization/mxfp4.py, Mxfp4MoEMethod.create_weights): Marlin pads to (128, 256); FlashInfer on
    Blackwell to (256, 256); the Triton backend to (64, 1), and its Hopper swizzled layout to (64, 256).
    Triton runs where triton_kernels is importable: bundled in vLLM from 0.12 ("auto" on Hopper), earlier
    only in the vllm/vllm-openai images. Logged: gpt-oss-120b 65.97 GiB on an H100 with Marlin (vllm#23278,
    pip 0.10.1); 64.38 GiB and gpt-oss-20b 13.47 GiB on an H100 from the image (llm-d's empirical results);
    gpt-oss-20b 12.88 GiB on an RTX 3090 from the gptoss image (vllm#22331)."""
    quant = arch.quantization
    if quant is None or quant.method != "mxfp4" or not arch.is_moe:
        return (1, 1)
    major = compute_capability[0]
    if major == 10 and backend != "marlin":
        return (256, 256)
    triton = backend == "triton" or (
        backend == "auto" and major == 9 and version >= TRITON_KERNELS_BUNDLED_SINCE
    )
    if triton:
        return (64, 256) if major == 9 else (64, 1)
    return (128, 256)


def fp8_marlin(arch: ModelArch, compute_capability: tuple[int, int], vendor: str = "nvidia") -> bool:
    """FP8 weights on an NVIDIA GPU without FP8 compute (before Ada, 8.9) run weight-only through Marlin
    (quantization/fp8.py: cutlass_fp8_supported false -> use_marlin; 'Your GPU does not have native support
    for FP8 computation'). Checked on vllm#21428: Qwen3-30B-A3B FP8 on an A100 loads 29.4988 GiB."""
    quant = arch.quantization
    fp8 = quant is not None and quant.method == "fp8" and quant.bits == 8
    return fp8 and vendor == "nvidia" and compute_capability < (8, 9)


def checkpoint_gib(arch: ModelArch) -> float:
    return sum(stage_weight_bytes(arch, 1, 1)) / GIB
