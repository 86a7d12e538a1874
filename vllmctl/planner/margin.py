"""The prediction's known error band, and whether a start stays clear of vLLM's refusals across it: a fit
that only holds at the band's optimistic edge is 'tight', and the planner prefers the safe side.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllmctl.planner.vllm_memory import CUDA_CONTEXT_GIB, MemoryBreakdown

# From replaying public startup logs (benchmarks/planner_accuracy.py): weights land within 2 %, the
# activation peak within about 10 % (samplers and kernels vary by build), and the available KV cache of
# the replays is off by 0.1-0.5 GiB in absolute terms, the part outside PyTorch varying most.
WEIGHTS_BAND = 0.02
ACTIVATION_BAND = 0.10
OUTSIDE_BAND_GIB = 0.15
CONTEXT_BAND_GIB = 0.25  # the CUDA context itself differs by driver and GPU


@dataclass(frozen=True)
class Margin:
    """How far the prediction may be off (GiB) and what is left once that is assumed."""

    band_gib: float
    kv_left_gib: float  # available KV minus one max_model_len request, at the pessimistic edge
    start_left_gib: float  # free memory at start minus the request, at the pessimistic edge

    @property
    def safe(self) -> bool:
        return self.kv_left_gib >= 0 and self.start_left_gib >= 0

    def describe(self) -> str:
        return (
            f"the prediction may be off by {self.band_gib:.2f} GiB; at that edge "
            f"{self.kv_left_gib:+.2f} GiB would be left after one full-length request and "
            f"{self.start_left_gib:+.2f} GiB of free memory at start"
        )


def margin(memory: MemoryBreakdown, gpu_used_gib: float = 0.0) -> Margin:
    """The error band for this breakdown and what survives it (KV for one request, free memory at start)."""
    band = WEIGHTS_BAND * memory.weights_gib + ACTIVATION_BAND * memory.activation_peak_gib + OUTSIDE_BAND_GIB
    if memory.available_kv_cache_gib <= 0:
        kv_left = memory.available_kv_cache_gib
    else:
        kv_left = memory.available_kv_cache_gib - band - memory.needed_kv_gib
    outside_nccl = 0.0 if memory.nccl_in_budget else memory.nccl_gib
    free = memory.total_gib - CUDA_CONTEXT_GIB - outside_nccl - gpu_used_gib
    start_left = free - CONTEXT_BAND_GIB - memory.requested_gib
    return Margin(band, kv_left, start_left)
