"""A checkpoint's `quantization_config` read as vLLM reads it: the method vLLM names it by, and the shape
facts that decide weight bytes and which kernels (Marlin or not) can run it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from vllmctl.errors import InputError

# vLLM's own method names (vllm/model_executor/layers/quantization/__init__.py, QuantizationMethods, 0.11.0).
VLLM_QUANTIZATION_METHODS: tuple[str, ...] = (
    "awq", "deepspeedfp", "tpu_int8", "fp8", "ptpc_fp8", "fbgemm_fp8", "modelopt", "modelopt_fp4",
    "bitblas", "gguf", "gptq_marlin_24", "gptq_marlin", "gptq_bitblas", "awq_marlin", "gptq",
    "compressed-tensors", "bitsandbytes", "hqq", "experts_int8", "ipex", "quark", "moe_wna16", "torchao",
    "auto-round", "rtn", "inc", "mxfp4", "petit_nvfp4",
)  # fmt: skip
MARLIN_GROUP_SIZES = (-1, 32, 64, 128)  # marlin_utils.MARLIN_SUPPORTED_GROUP_SIZES


@dataclass(frozen=True)
class QuantConfig:
    """What a checkpoint's `quantization_config` means for weight bytes and for vLLM's checks.

    method: fp8 | w8a8 | awq | gptq | mxfp4 | nvfp4 | bnb4 (how bytes are counted); bits per quantized
    weight; group_size for group-wise scales (0 = per channel); block for fp8 block scales;
    attention_quantized False when the attention projections are left unconverted (gpt-oss).
    `checkpoint_method` is the name vLLM gives the checkpoint's method before any kernel override
    (awq, gptq, fp8, compressed-tensors, ...).
    """

    method: str
    bits: int = 8
    group_size: int = 0
    block: int = 0
    attention_quantized: bool = True
    experts_only: bool = False
    unquantized_mlp_layers: tuple[int, ...] = ()  # e.g. Meta's FP8 405B keeps the first and last FFN
    checkpoint_method: str = ""
    zero_point: bool = True  # AWQ: asymmetric with zero points (the only kind Marlin runs)
    sym: bool = True  # GPTQ: symmetric (Marlin needs it)
    online: bool = False  # quantized by vLLM at load time (`--quantization fp8` on a bf16 checkpoint)

    @property
    def vllm_method(self) -> str:
        """The method name vLLM reads from the checkpoint, before awq_marlin/gptq_marlin overrides."""
        if self.checkpoint_method:
            return self.checkpoint_method
        return {"w8a8": "compressed-tensors", "nvfp4": "modelopt_fp4", "bnb4": "bitsandbytes"}.get(
            self.method, self.method
        )

    @property
    def marlin_shape_ok(self) -> bool:
        """The checkpoint's bits, symmetry and group size are ones a Marlin kernel runs (capability aside)."""
        group = self.group_size or -1
        if group not in MARLIN_GROUP_SIZES:
            return False
        if self.vllm_method == "awq":
            return self.bits == 4 and self.zero_point  # awq_marlin.TYPE_MAP: uint4 with zero points
        if self.vllm_method == "gptq":
            return self.bits in (4, 8) and self.sym  # gptq_marlin.TYPE_MAP: (4, True), (8, True)
        return False


# A dense MLP kept in full precision: the MLP itself or its projections; an MoE router (`mlp.gate`) or shared
# expert gate is always full precision and tiny, so listing it says nothing about the MLP's weights.
UNQUANTIZED_MLP = re.compile(r"layers\.(\d+)\.mlp(?:\.(?:gate_proj|up_proj|down_proj|gate_up_proj))?$")


def parse_quantization(raw: Any) -> QuantConfig | None:
    """Reads a checkpoint's quantization_config; unknown methods are an input error."""
    if not isinstance(raw, dict):
        return None
    method = str(raw.get("quant_method", "")).lower().replace("compressed_tensors", "compressed-tensors")
    ignored = [str(m) for m in raw.get("modules_to_not_convert") or raw.get("ignore") or []]
    attention_quantized = not any("attn" in m for m in ignored)
    mlp_layers = tuple(sorted({int(found[1]) for m in ignored if (found := UNQUANTIZED_MLP.search(m))}))
    if method in ("fp8", "fbgemm_fp8"):
        block = raw.get("weight_block_size")
        return QuantConfig(
            "fp8",
            8,
            block=int(block[0]) if block else 0,
            attention_quantized=attention_quantized,
            unquantized_mlp_layers=mlp_layers,
            checkpoint_method=method,
        )
    if method in ("awq", "awq_marlin"):
        return QuantConfig(
            "awq",
            int(raw.get("bits") or raw.get("w_bit") or 4),
            int(raw.get("group_size") or raw.get("q_group_size") or 128),
            checkpoint_method=method,
            zero_point=bool(raw.get("zero_point", True)),
        )
    if method in ("gptq", "gptq_marlin"):
        return QuantConfig(
            "gptq",
            int(raw.get("bits", 4)),
            int(raw.get("group_size", 128)),
            checkpoint_method=method,
            sym=bool(raw.get("sym", True)),
        )
    if method == "mxfp4":
        return QuantConfig(
            "mxfp4", 4, 32, attention_quantized=False, experts_only=True, checkpoint_method="mxfp4"
        )
    if method == "bitsandbytes":
        return QuantConfig("bnb4", 4, 64, checkpoint_method="bitsandbytes")
    if method in ("modelopt", "modelopt_fp4", "nvfp4"):
        nested = raw["quantization"] if isinstance(raw.get("quantization"), dict) else {}
        algo = str(raw.get("quant_algo") or nested.get("quant_algo") or "nvfp4").lower()
        if "fp8" in algo:
            return QuantConfig("fp8", 8, checkpoint_method="modelopt")
        return QuantConfig("nvfp4", 4, 16, checkpoint_method="modelopt_fp4")
    if method == "compressed-tensors":
        return _compressed_tensors(raw, attention_quantized)
    raise InputError(
        f"unknown quantization method {method!r} in config.json",
        "supported: fp8, fbgemm_fp8, awq, gptq, mxfp4, bitsandbytes, modelopt, compressed-tensors",
    )


def _compressed_tensors(raw: dict[str, Any], attention_quantized: bool) -> QuantConfig:
    groups = raw.get("config_groups") or {}
    weights: dict[str, Any] = {}
    for group in groups.values():
        if isinstance(group, dict) and isinstance(group.get("weights"), dict):
            weights = group["weights"]
            break
    bits = int(weights.get("num_bits", 8))
    kind = str(weights.get("type", "int"))
    group_size = int(weights.get("group_size") or 0)
    method = "compressed-tensors"
    if kind == "float" and bits == 8:
        block = weights.get("block_structure")
        size = int(block[0]) if isinstance(block, list) and block else 0
        return QuantConfig(
            "fp8", 8, block=size, attention_quantized=attention_quantized, checkpoint_method=method
        )
    if kind == "float" and bits == 4:
        return QuantConfig(
            "nvfp4", 4, group_size or 16, attention_quantized=attention_quantized, checkpoint_method=method
        )
    if bits == 8:
        return QuantConfig(
            "w8a8", 8, group_size, attention_quantized=attention_quantized, checkpoint_method=method
        )
    return QuantConfig(
        "gptq",
        bits,
        group_size or 128,
        attention_quantized=attention_quantized,
        checkpoint_method=method,
        sym=bool(weights.get("symmetric", True)),
    )


# What `--quantization X` does to an unquantized checkpoint: vLLM quantizes the weights while loading.
ONLINE_QUANTIZATION: dict[str, QuantConfig] = {
    "fp8": QuantConfig("fp8", 8, checkpoint_method="fp8", online=True),
    "ptpc_fp8": QuantConfig("fp8", 8, checkpoint_method="ptpc_fp8", online=True),
    "bitsandbytes": QuantConfig("bnb4", 4, 64, checkpoint_method="bitsandbytes", online=True),
    "experts_int8": QuantConfig("w8a8", 8, checkpoint_method="experts_int8", online=True, experts_only=True),
}
