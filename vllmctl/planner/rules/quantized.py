"""vLLM's quantization checks: the method the checkpoint declares against `--quantization`, each method's
minimum compute capability and activation dtypes, and quantized shapes that must stay aligned after TP.
"""

from __future__ import annotations

from vllmctl.catalog.quant import VLLM_QUANTIZATION_METHODS, QuantConfig
from vllmctl.planner.rules.base import RuleInput, Violation
from vllmctl.planner.versions import Version

# get_min_capability() per method (vllm/model_executor/layers/quantization/*.py, 0.11.0); compressed-tensors
# is checked per scheme (its FP8 falls back to the W8A16 Marlin scheme on Ampere, so 80).
MIN_CAPABILITY: dict[str, int] = {
    "fp8": 80, "fbgemm_fp8": 80, "ptpc_fp8": 94, "awq": 75, "awq_marlin": 80, "gptq": 60, "gptq_marlin": 80,
    "gptq_marlin_24": 80, "mxfp4": 80, "modelopt": 89, "modelopt_fp4": 80, "bitsandbytes": 70, "gguf": 60,
    "experts_int8": 80, "moe_wna16": 70, "torchao": 75, "petit_nvfp4": 90, "compressed-tensors": 70,
}  # fmt: skip
COMPRESSED_SCHEME_CAPABILITY = {"fp8": 80, "w8a8": 75, "gptq": 80, "nvfp4": 80}
FP8_MIN_CAPABILITY_75_SINCE: Version = (0, 14, 0)  # Fp8Config.get_min_capability: 80 in 0.13.0, 75 in 0.14.0
# get_supported_act_dtypes() where it is narrower than {bfloat16, float16}.
ACT_DTYPES: dict[str, tuple[str, ...]] = {"awq": ("float16",), "gptq": ("float16",), "mxfp4": ("bfloat16",)}
# Methods whose get_config_filenames() is empty: vLLM quantizes an unquantized checkpoint while loading it.
ONLINE_METHODS = ("fp8", "ptpc_fp8", "bitsandbytes", "experts_int8", "rtn", "fbgemm_fp8")


def effective_method(quant: QuantConfig | None, flag: str | None, cc: int) -> str | None:
    """The method vLLM ends up with (config/model.py:878-958): the checkpoint's, upgraded to its Marlin
    kernel where the GPU and the shapes allow and the flag does not force the plain kernel."""
    if quant is None or quant.online:
        return flag
    method = quant.vllm_method
    marlin = f"{method}_marlin"
    if method in ("awq", "gptq") and quant.marlin_shape_ok and cc >= 80 and flag in (None, "marlin", marlin):
        return marlin
    return method


def resolved_dtype(given: RuleInput) -> str:
    """--dtype as vLLM resolves it: 'auto' takes the checkpoint's, or float16 where bf16 is unsupported."""
    wanted = given.settings.dtype
    aliases = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16"}
    if wanted != "auto":
        return aliases.get(wanted, wanted)
    config = aliases.get(given.arch.dtype, given.arch.dtype)
    if config == "float32":
        return "bfloat16" if given.cc >= 80 else "float16"
    if config == "bfloat16" and given.cc < 80:
        return "float16"  # _resolve_auto_dtype falls back with a warning
    return config


def matches_checkpoint(given: RuleInput) -> Violation | None:
    # vllm/config/model.py:950-958, ModelConfig._verify_quantization
    flag, quant = given.settings.quantization, given.arch.quantization
    if flag is None or quant is None or quant.online:
        return None
    method = effective_method(quant, flag, given.cc)
    if method == flag or (flag == "marlin" and method and method.endswith("_marlin")):
        return None
    return Violation(
        f"Quantization method specified in the model config ({method}) does not match the quantization "
        f"method specified in the `quantization` argument ({flag}).",
        f"the checkpoint is quantized with {quant.vllm_method}; vLLM loads it only as that method",
        f"remove quantization (vLLM reads {quant.vllm_method} from the checkpoint) or set it to {method}",
    )


def known_method(given: RuleInput) -> Violation | None:
    # vllm/config/model.py:960-964 (unknown method) and
    # vllm/model_executor/model_loader/weight_utils.py:284-289 (no quantization config for it)
    flag, quant = given.settings.quantization, given.arch.quantization
    if flag is None:
        return None
    if flag not in (*VLLM_QUANTIZATION_METHODS, "marlin"):
        return Violation(
            f"Unknown quantization method: {flag}. Must be one of {list(VLLM_QUANTIZATION_METHODS)}.",
            f"{flag!r} is not a quantization method vLLM knows",
            "remove quantization or use one of vLLM's methods (fp8, awq_marlin, gptq_marlin, ...)",
        )
    if (quant is None or quant.online) and flag not in ONLINE_METHODS:
        return Violation(
            f"Cannot find the config file for {flag}",
            f"{flag} loads a checkpoint that was quantized beforehand; {given.arch.name} has no "
            "quantization_config",
            f"use a {flag} checkpoint of the model, or quantize while loading with "
            f"{', '.join(ONLINE_METHODS[:3])}",
        )
    return None


def min_capability(given: RuleInput) -> Violation | None:
    # vllm/config/__init__.py:257-266, VllmConfig._get_quantization_config
    quant = given.arch.quantization
    method = effective_method(quant, given.settings.quantization, given.cc)
    if method is None:
        return None
    needed = MIN_CAPABILITY.get(method, 0)
    if method == "compressed-tensors" and quant is not None:
        needed = COMPRESSED_SCHEME_CAPABILITY.get(quant.method, 70)
    if method == "fp8" and given.settings.version >= FP8_MIN_CAPABILITY_75_SINCE:
        needed = 75
    if given.cc >= needed:
        return None
    major, minor = given.gpu.compute_capability
    return Violation(
        f"The quantization method {method} is not supported for the current GPU. Minimum capability: "
        f"{needed}. Current capability: {given.cc}.",
        f"{given.gpu.name} is compute capability {major}.{minor}; {method} kernels need "
        f"{needed // 10}.{needed % 10}",
        f"a GPU of compute capability {needed // 10}.{needed % 10} or newer, or a checkpoint quantized for "
        f"this GPU (AWQ/GPTQ run on 7.5)",
    )


def activation_dtype(given: RuleInput) -> Violation | None:
    # vllm/config/__init__.py:267-272 (get_supported_act_dtypes); mxfp4.py:129-130, awq.py:56-57, gptq.py:102
    method = effective_method(given.arch.quantization, given.settings.quantization, given.cc)
    allowed = ACT_DTYPES.get(method or "")
    dtype = resolved_dtype(given)
    if not allowed or dtype in allowed:
        return None
    return Violation(
        f"torch.{dtype} is not supported for quantization method {method}. Supported dtypes: "
        f"[{', '.join('torch.' + d for d in allowed)}]",
        f"{method} kernels compute in {' or '.join(allowed)} only",
        f"dtype: {allowed[0]}",
    )


def _row_inputs(given: RuleInput) -> list[tuple[str, int]]:
    """Input sizes per rank of the row-parallel projections (attention output, MLP down, expert down)."""
    arch, s = given.arch, given.settings
    tp = s.tp
    head_dim = arch.v_head_dim if arch.is_mla else arch.head_dim
    sizes = [("o_proj", arch.num_heads * head_dim // tp)]
    if not arch.is_moe or arch.first_k_dense:
        sizes.append(("down_proj", arch.intermediate_size // tp))
    if arch.is_moe:
        sizes.append(("experts.down_proj", arch.moe_intermediate_size // (1 if s.expert_parallel else tp)))
    return sizes


def _column_outputs(given: RuleInput) -> list[tuple[str, int]]:
    """Output sizes per rank of the column-parallel projections (q, k, v, gate/up, expert gate/up)."""
    arch, s = given.arch, given.settings
    tp = s.tp
    sizes: list[tuple[str, int]] = []
    if not arch.is_mla:
        kv = max(arch.num_kv_heads // tp, 1)
        sizes += [("q_proj", arch.num_heads // tp * arch.head_dim), ("k_proj", kv * arch.head_dim)]
    if not arch.is_moe or arch.first_k_dense:
        sizes.append(("gate_up_proj", arch.intermediate_size // tp))
    if arch.is_moe:
        sizes.append(("experts.gate_up_proj", arch.moe_intermediate_size // (1 if s.expert_parallel else tp)))
    return sizes


def fp8_block_alignment(given: RuleInput) -> Violation | None:
    # vllm/model_executor/layers/quantization/utils/fp8_utils.py:760-782 (validate_fp8_block_shape) and
    # vllm/model_executor/layers/quantization/fp8.py:504-519 (Fp8MoEMethod.create_weights)
    quant, s = given.arch.quantization, given.settings
    if quant is None or quant.method != "fp8" or not quant.block:
        return None
    block = quant.block
    checks = [(f"{name} input_size_per_partition", size) for name, size in _row_inputs(given) if s.tp > 1]
    checks += [(f"{name} output_partition_size", size) for name, size in _column_outputs(given)]
    for what, size in checks:
        if not quant.attention_quantized and what.startswith(("q_proj", "k_proj", "o_proj")):
            continue
        if size % block:
            experts = what.startswith("experts")
            return Violation(
                f"Weight {what} = {size} is not divisible by weight quantization block_n = {block}.",
                f"FP8 block quantization scales {block}x{block} tiles; at TP {s.tp} a shard of {size} "
                "cuts through a tile",
                "a tensor_parallel_size whose shards stay multiples of the block"
                + (", or enable_expert_parallel (experts are not split)" if experts else ""),
                flags=None if experts else ("tensor_parallel_size",),
            )
    return None


def group_alignment(given: RuleInput) -> Violation | None:
    # vllm/model_executor/layers/quantization/awq.py:145-149 and gptq.py:209-213 (input aligned to the
    # group); awq_marlin falls back to those kernels for a layer Marlin cannot take (awq_marlin.py:136-142)
    quant, s = given.arch.quantization, given.settings
    if quant is None or quant.method not in ("awq", "gptq") or quant.group_size <= 0 or s.tp == 1:
        return None
    group = quant.group_size
    for name, size in _row_inputs(given):
        if name.startswith("experts") and size % 32 == 0:
            continue  # moe_wna16 halves the group down to 32 (moe_wna16.py:196-203)
        if not quant.attention_quantized and name == "o_proj":
            continue
        if size % group:
            return Violation(
                "The input size is not aligned with the quantized weight shape. This can be caused by too "
                "large tensor parallel size.",
                f"{name}'s input per rank is {size}, not a multiple of the {group}-wide quantization groups "
                f"at TP {s.tp}",
                "a smaller tensor_parallel_size (or a checkpoint padded for this TP)",
            )
    return None
