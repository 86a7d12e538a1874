"""The profile run's torch peak as vLLM's startup profiler sees it: one forward over max_num_batched_tokens,
then the dummy sampler over full-vocabulary fp32 logits, by the sampler each release picks."""

from __future__ import annotations

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.params import padded_vocab
from vllmctl.planner.versions import Version

ACT_BYTES = 2  # activations run in bf16/fp16
# Dummy sampler bytes per logit element: the PyTorch-native top-k/top-p path sorts fp32 logits (values,
# int64 indices, sort scratch, masks, re-scatter); FlashInfer's sampler needs no full sort, nor does the
# Triton top-k/top-p that 0.17.0 runs for 8 rows and more (v1/sample/ops/topk_topp_triton.py: logits masked in
# place, then softmax and the exponential race; the nine 0.17.1 RTX 3090 starts of
# TheBuccaneer/vllm-offload-profiles imply 11.5-13.7 bytes per logit, and 14 keeps the safe side of them).
# FlashInfer samples by default in V1 where it is installed: an optional extra up to 0.11 (so pip installs
# sort), installed but opt-in (VLLM_USE_FLASHINFER_SAMPLER=1) in 0.12-0.20, on by default from 0.21
# (v1/sample/ops/topk_topp_sampler.py and envs.py of each version).
# The native sort: 38.5 bytes per logit, the median over the 10 public H100 starts whose profile peak is the
# sampler (0.10-0.11: llm-d's eight, vllm#23278 and #27508; 38.2-39.0 each, benchmarks/planner_accuracy.py).
SORTING_SAMPLER_BYTES = 38.5
LIGHT_SAMPLER_BYTES = 8
TRITON_SAMPLER_BYTES = 14
TRITON_SAMPLER_SINCE: Version = (0, 17, 0)
TRITON_SAMPLER_MIN_ROWS = 8  # fewer rows take the PyTorch sort (topk_topp_sampler.apply_top_k_top_p)
LIGHT_SAMPLER_SINCE: Version = (0, 21, 0)
# Data parallel with expert parallel in 0.10: FusedMoE.forward_impl runs the naive dispatch when dp_size > 1
# (fused_moe/layer.py: do_naive_dispatch_combine, get_ep_group().dispatch; VLLM_ALL2ALL_BACKEND "naive" by
# default, envs.py), whose naive_multicast (device_communicators/all2all.py) gathers every DP rank's hidden
# states and router logits, so each rank's fused-MoE profile runs dp x its tokens; fused_experts_impl
# (fused_moe.py) sizes its workspaces by min(tokens, VLLM_FUSED_MOE_CHUNK_SIZE = 32768) and, for FP8
# activations, quantizes each chunk (moe_kernel_quantize_input), the previous chunk's copy still bound while
# the next is made. Bounded to the 0.10 releases whose source this was read from.
NAIVE_DP_DISPATCH_SINCE: Version = (0, 10, 0)
NAIVE_DP_DISPATCH_UNTIL: Version = (0, 11, 0)
FUSED_MOE_CHUNK_SIZE = 32768
FP8_GROUP = 128  # per-token-group activation scales of block-FP8 experts (fp32, one per 128 values)


def activation_peak_bytes(
    arch: ModelArch,
    tp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    version: Version = (0, 11, 0),
    last_stage: bool = True,
    expert_parallel: bool = False,
    sampler: str = "auto",
    data_parallel: int = 1,
) -> float:
    """Torch peak of the profile run: a forward over max_num_batched_tokens, then the dummy sampler.

    The forward peaks in the MLP (gate_up output plus activated half, or the fused-MoE workspaces);
    the sampler (last pipeline stage only) works on full-vocabulary fp32 logits for min(seqs, tokens) rows.
    """
    tokens = max_num_batched_tokens
    hidden = arch.hidden_size
    residual = 2 * tokens * hidden * ACT_BYTES
    dense = tokens * 3 * (arch.intermediate_size // tp) * ACT_BYTES
    mlp = dense if not arch.is_moe or arch.first_k_dense else 0.0
    if arch.is_moe:
        # With expert parallel every rank runs the fused-MoE kernel over all tokens at full expert width.
        inter = arch.moe_intermediate_size if expert_parallel else max(arch.moe_intermediate_size // tp, 1)
        routed = tokens * arch.experts_per_token
        moe = float(routed * (max(2 * inter, hidden) + inter) * ACT_BYTES + tokens * arch.num_experts * 4)
        shared = arch.shared_expert_intermediate_size or arch.num_shared_experts * arch.moe_intermediate_size
        moe += tokens * 3 * (shared // tp) * ACT_BYTES
        if gathers_dp_tokens(arch, data_parallel, expert_parallel, version):
            moe = max(moe, dp_dispatch_moe_bytes(arch, tokens, data_parallel, inter))
        mlp = max(mlp, moe)
    if arch.is_mla:
        heads = max(arch.num_heads // tp, 1)
        per_head = 2 * (arch.qk_nope_head_dim + arch.qk_rope_head_dim) + arch.v_head_dim
        attention = tokens * heads * per_head * ACT_BYTES
    else:
        heads = max(arch.num_heads // tp, 1) * 2 + 2 * max(arch.num_kv_heads // tp, 1)
        attention = tokens * heads * arch.head_dim * ACT_BYTES
    forward = residual + max(mlp, attention)
    if not last_stage:
        return forward
    rows = min(max_num_seqs, max_num_batched_tokens)
    per_logit = sampler_bytes_per_logit(sampler, version, rows)
    sampling = tokens * hidden * ACT_BYTES + rows * padded_vocab(arch, 1) * per_logit
    return max(forward, sampling)


def gathers_dp_tokens(arch: ModelArch, data_parallel: int, expert_parallel: bool, version: Version) -> bool:
    """Whether each rank's MoE layers run every DP rank's tokens in the profile run: 0.10's naive dispatch,
    data parallel above 1 with expert parallel."""
    in_release = NAIVE_DP_DISPATCH_SINCE <= version < NAIVE_DP_DISPATCH_UNTIL
    return arch.is_moe and expert_parallel and data_parallel > 1 and in_release


def dp_dispatch_moe_bytes(arch: ModelArch, tokens: int, data_parallel: int, inter: int) -> float:
    """The MoE layer's peak when the naive dispatch gathers data_parallel x tokens (0.10): the gathered hidden
    states (written over in place by the experts' output) and router logits, the top-k ids and weights, the
    fused-MoE workspaces of one chunk (cache1 and cache3 sharing one buffer, cache2 beside it) and, for FP8
    activations, the chunk's quantized input and two chunks' quantized intermediate (the next is made while
    the previous is still bound)."""
    gathered = tokens * data_parallel
    chunk = min(gathered, FUSED_MOE_CHUNK_SIZE)
    k, hidden = arch.experts_per_token, arch.hidden_size
    held = gathered * (hidden + arch.num_experts) * ACT_BYTES + gathered * k * 3 * 4
    workspace = chunk * k * (max(2 * inter, hidden) + inter) * ACT_BYTES
    quant = arch.quantization
    if quant is not None and quant.method == "fp8" and quant.bits == 8:
        chunks_alive = 2 if gathered > FUSED_MOE_CHUNK_SIZE else 1
        first = chunk * (hidden + -(-hidden // FP8_GROUP) * 4)
        second = chunk * k * (inter + -(-inter // FP8_GROUP) * 4)
        workspace += first + chunks_alive * second
    return float(held + workspace)


def sampler_bytes_per_logit(sampler: str, version: Version, rows: int) -> float:
    """What the profile run's dummy sampler holds per full-vocabulary logit, by the sampler vLLM picks."""
    if sampler == "flashinfer" or (sampler == "auto" and version >= LIGHT_SAMPLER_SINCE):
        return LIGHT_SAMPLER_BYTES
    if version >= TRITON_SAMPLER_SINCE and rows >= TRITON_SAMPLER_MIN_ROWS:
        return TRITON_SAMPLER_BYTES
    return SORTING_SAMPLER_BYTES
