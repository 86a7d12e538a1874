"""Weight shapes of a ModelArch, per layer and per tensor-parallel rank, and the total parameter count.

Sharding follows vLLM: column/row-parallel linears split by TP, KV heads never below one per rank,
MLA down-projections and routers replicated, vocabulary padded to 64 and split.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

from vllmctl.catalog.arch import ModelArch

# "state": a linear-attention layer's conv1d, decay and bias vectors, never quantized
Kind = Literal["embed", "lm_head", "attn", "mlp", "expert", "router", "norm", "mla_absorbed", "state"]
VOCAB_PADDING = 64


@dataclass(frozen=True)
class Linear:
    """A weight matrix [out, inp] as held by one rank, repeated `count` times."""

    kind: Kind
    out: int
    inp: int
    count: int = 1
    bias: bool = False
    layer: int = -1  # decoder layer index; -1 for embeddings, head and final norm

    @property
    def params(self) -> int:
        return self.count * (self.out * self.inp + (self.out if self.bias else 0))


def _div(size: int, tp: int) -> int:
    return max(size // tp, 1)


def padded_vocab(arch: ModelArch, tp: int) -> int:
    padded = -(-arch.vocab_size // VOCAB_PADDING) * VOCAB_PADDING
    return -(-padded // tp)


def kv_heads_per_rank(arch: ModelArch, tp: int) -> int:
    return max(arch.num_kv_heads // tp, 1)


def _attention(arch: ModelArch, tp: int) -> list[Linear]:
    h = arch.hidden_size
    if arch.is_mla:
        heads = _div(arch.num_heads, tp)
        qk = arch.qk_nope_head_dim + arch.qk_rope_head_dim
        parts: list[Linear] = []
        if arch.q_lora_rank:
            parts.append(Linear("attn", arch.q_lora_rank, h))
            parts.append(Linear("norm", arch.q_lora_rank, 1))
            parts.append(Linear("attn", heads * qk, arch.q_lora_rank))
        else:
            parts.append(Linear("attn", heads * qk, h))
        parts += [
            Linear("attn", arch.kv_lora_rank + arch.qk_rope_head_dim, h),
            Linear("norm", arch.kv_lora_rank, 1),
            Linear("attn", heads * (arch.qk_nope_head_dim + arch.v_head_dim), arch.kv_lora_rank),
            Linear("attn", h, heads * arch.v_head_dim),
            # vLLM derives W_UK / W_UV from kv_b_proj for weight absorption (a copy only when quantized).
            Linear("mla_absorbed", heads * (arch.qk_nope_head_dim + arch.v_head_dim), arch.kv_lora_rank),
        ]
        return parts
    q_out = _div(arch.num_heads, tp) * arch.head_dim
    kv_out = kv_heads_per_rank(arch, tp) * arch.head_dim
    return [
        Linear("attn", q_out + 2 * kv_out, h, bias=arch.qkv_bias),
        Linear("attn", h, q_out),
    ]


def _hybrid_attention(arch: ModelArch, index: int, tp: int) -> list[Linear]:
    """A hybrid's layer as vLLM's qwen3_next.py builds it: an attention layer's q projection doubled by its
    output gate, with q/k norms; a Gated DeltaNet layer's in_proj_qkvz and in_proj_ba (column-parallel),
    conv1d (conv_dim x kernel, no quantization), dt_bias and A_log per value head, a gated norm of one value
    head and out_proj (row-parallel)."""
    shape = arch.hybrid
    assert shape is not None
    h = arch.hidden_size
    if shape.attends(index):
        gate = 2 if shape.attn_output_gate else 1
        q_out = _div(arch.num_heads, tp) * arch.head_dim
        kv_out = kv_heads_per_rank(arch, tp) * arch.head_dim
        return [
            Linear("attn", gate * q_out + 2 * kv_out, h, bias=arch.qkv_bias),
            Linear("attn", h, q_out),
            Linear("norm", arch.head_dim, 1, count=2),
        ]
    value_heads = _div(shape.num_v_heads, tp)
    return [
        Linear("attn", (2 * shape.key_dim + 2 * shape.value_dim) // tp, h),
        Linear("attn", 2 * value_heads, h),
        Linear("state", shape.conv_dim // tp, shape.conv_kernel),
        Linear("state", value_heads, 1, count=2),
        Linear("norm", shape.head_v_dim, 1),
        Linear("attn", h, shape.value_dim // tp),
    ]


def _round_up(size: int, multiple: int) -> int:
    return -(-size // multiple) * multiple


def _mlp(
    arch: ModelArch,
    index: int,
    tp: int,
    ep: bool = False,
    pad: tuple[int, int] = (1, 1),
    ep_ranks: int = 0,
    extra_experts: int = 0,
) -> list[Linear]:
    h = arch.hidden_size
    if not arch.is_moe_layer(index):
        inter = _div(arch.intermediate_size, tp)
        return [Linear("mlp", 2 * inter, h), Linear("mlp", h, inter)]
    # Expert parallel: each rank holds whole experts (the first ranks one more when tp does not divide
    # them) instead of a 1/tp slice of every expert; the shared expert stays tensor-parallel.
    inter = arch.moe_intermediate_size if ep else _div(arch.moe_intermediate_size, tp)
    # The expert-parallel group is TP x DP ranks; EPLB adds redundant copies spread over it.
    experts = -(-(arch.num_experts + extra_experts) // (ep_ranks or tp)) if ep else arch.num_experts
    gated_bias = arch.model_type == "gpt_oss"
    # Fused-MoE kernels may pad each rank's expert shapes (`pad` = multiples for intermediate and hidden).
    inter, hidden = _round_up(inter, pad[0]), _round_up(h, pad[1])
    parts = [
        Linear("router", arch.num_experts, h, bias=gated_bias),
        Linear("expert", 2 * inter, hidden, count=experts, bias=gated_bias),
        Linear("expert", hidden, inter, count=experts, bias=gated_bias),
    ]
    shared = arch.shared_expert_intermediate_size or arch.num_shared_experts * arch.moe_intermediate_size
    if shared:
        parts += [Linear("mlp", 2 * _div(shared, tp), h), Linear("mlp", h, _div(shared, tp))]
    return parts


@lru_cache(maxsize=4096)
def stage_linears(
    arch: ModelArch,
    tp: int,
    first_layer: int,
    last_layer: int,
    embed: bool,
    head: bool,
    ep: bool = False,
    expert_pad: tuple[int, int] = (1, 1),
    ep_ranks: int = 0,
    extra_experts: int = 0,
) -> tuple[Linear, ...]:
    """Every weight one rank of one pipeline stage holds (layers first_layer..last_layer-1);
    `ep`: experts split across the tp ranks (expert parallel) rather than each expert sharded;
    `expert_pad`: the multiples a fused-MoE kernel rounds each rank's expert intermediate and hidden to;
    `ep_ranks`: the expert-parallel group (TP x DP; 0 = TP) and `extra_experts` EPLB's redundant ones."""
    vocab = padded_vocab(arch, tp)
    parts: list[Linear] = []
    if embed:
        parts.append(Linear("embed", vocab, arch.hidden_size))
    for index in range(first_layer, last_layer):
        attention = _attention(arch, tp) if arch.hybrid is None else _hybrid_attention(arch, index, tp)
        layer_parts = [
            *attention,
            *_mlp(arch, index, tp, ep, expert_pad, ep_ranks, extra_experts),
            *_layer_norms(arch),
        ]
        parts += [replace(part, layer=index) for part in layer_parts]
    if head:
        parts.append(Linear("norm", arch.hidden_size, 1))
        # Tied embeddings share one tensor unless the head sits on a different pipeline stage.
        if not (arch.tie_embeddings and embed):
            parts.append(Linear("lm_head", vocab, arch.hidden_size))
    return tuple(parts)


def _layer_norms(arch: ModelArch) -> list[Linear]:
    """Pre-attention and pre-MLP norms; Gemma 3 also norms after each (sandwich) and normalises q and k."""
    if arch.model_type.startswith("gemma3"):
        return [Linear("norm", arch.hidden_size, 1, count=4), Linear("norm", arch.head_dim, 1, count=2)]
    return [Linear("norm", arch.hidden_size, 1, count=2)]


def pipeline_stages(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """vLLM's get_pp_indices: even split, remainder layers go to the stages before the last."""
    base = num_layers // pp
    sizes = [base] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    bounds, start = [], 0
    for size in sizes:
        bounds.append((start, start + size))
        start += size
    return bounds


def total_params(arch: ModelArch) -> int:
    parts = stage_linears(arch, 1, 0, arch.num_layers, True, True)
    return sum(p.params for p in parts if p.kind != "mla_absorbed")
