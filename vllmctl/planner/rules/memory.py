"""vLLM's memory checks at startup, read from the planner's predicted breakdown: room for KV blocks, one
full-length request, free memory before the budget is taken, and room to capture CUDA graphs.
"""

from __future__ import annotations

from vllmctl.planner.rules.base import RuleInput, Violation
from vllmctl.planner.versions import V1_DEFAULT_SINCE
from vllmctl.planner.vllm_memory import CUDA_CONTEXT_GIB, MemoryBreakdown


def _memory(given: RuleInput) -> MemoryBreakdown:
    assert given.memory is not None  # Rule.run skips memory rules without a breakdown
    return given.memory


def kv_has_memory(given: RuleInput) -> Violation | None:
    # vllm/v1/core/kv_cache_utils.py:697-701, check_enough_kv_cache_memory
    mem = _memory(given)
    if mem.available_kv_cache_gib > 0:
        return None
    return Violation(
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine.",
        f"weights {mem.weights_gib:.2f} GiB + activation peak {mem.activation_peak_gib:.2f} GiB + other "
        f"{mem.non_torch_gib:.2f} GiB fill the {mem.requested_gib:.2f} GiB budget",
        "more GPUs (a wider tensor_parallel_size), a quantized checkpoint, or a higher "
        "gpu_memory_utilization",
    )


def kv_holds_one_request(given: RuleInput) -> Violation | None:
    # vllm/v1/core/kv_cache_utils.py:703-724, check_enough_kv_cache_memory; before 0.8 (V0)
    # vllm/worker/worker.py:486-503 (0.6.4), raise_if_cache_size_invalid
    mem = _memory(given)
    if mem.available_kv_cache_gib <= 0 or mem.fits:
        return None
    longest = mem.max_model_len_that_fits
    if given.settings.version < V1_DEFAULT_SINCE:
        return Violation(
            f"The model's max seq len ({mem.max_model_len}) is larger than the maximum number of tokens that "
            f"can be stored in KV cache ({mem.kv_cache_tokens}). Try increasing `gpu_memory_utilization` or "
            "decreasing `max_model_len` when initializing the engine.",
            f"the V0 profile run covers a whole {mem.max_model_len:,}-token prompt, leaving "
            f"{mem.available_kv_cache_gib:.2f} GiB of KV cache",
            f"max_model_len at most {longest}, enable_chunked_prefill (a smaller profile step), or more GPUs",
        )
    estimate = (
        f"Based on the available memory, the estimated maximum model length is {longest}." if longest else ""
    )
    return Violation(
        f"To serve at least one request with the models's max seq len ({mem.max_model_len}), "
        f"({mem.needed_kv_gib:.2f} GiB KV cache is needed, which is larger than the available KV cache "
        f"memory ({mem.available_kv_cache_gib:.2f} GiB). {estimate} Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
        f"one request of {mem.max_model_len:,} tokens needs {mem.needed_kv_gib:.2f} GiB of KV cache",
        f"max_model_len at most {longest}, fp8 KV cache, or more GPUs" if longest else "more GPUs",
    )


def _before_start_gib(given: RuleInput, mem: MemoryBreakdown) -> float:
    outside_nccl = 0.0 if mem.nccl_in_budget else mem.nccl_gib
    return CUDA_CONTEXT_GIB + outside_nccl + (given.host.gpu_used_gib or 0.0)


def free_memory_at_start(given: RuleInput) -> Violation | None:
    # vllm/v1/worker/gpu_worker.py:181-194, Worker.init_device
    mem = _memory(given)
    free = mem.total_gib - _before_start_gib(given, mem)
    if free >= mem.requested_gib:
        return None
    others = f", other processes {given.host.gpu_used_gib:.2f} GiB" if given.host.gpu_used_gib else ""
    most = int(free / mem.total_gib * 100) / 100
    return Violation(
        f"Free memory on device ({free:.2f}/{mem.total_gib:.2f} GiB) on startup is less than desired GPU "
        f"memory utilization ({given.settings.gpu_memory_utilization}, {mem.requested_gib:.2f} GiB). "
        "Decrease GPU memory utilization or reduce GPU memory used by other processes.",
        f"before vLLM takes its budget the CUDA context ({CUDA_CONTEXT_GIB} GiB)"
        + (f", NCCL buffers {mem.nccl_gib:.2f} GiB" if not mem.nccl_in_budget and mem.nccl_gib else "")
        + f"{others} are already allocated",
        f"gpu_memory_utilization at most {most}",
    )


def graphs_fit_headroom(given: RuleInput) -> Violation | None:
    # before v0.20 CUDA graphs are captured after the KV cache is allocated (gpu_model_runner.capture_model),
    # out of what the budget leaves plus the freed activations: an out-of-memory error, not a named check
    mem = _memory(given)
    if mem.cudagraph_in_budget or given.settings.enforce_eager:
        return None
    headroom = mem.total_gib - mem.requested_gib + mem.activation_peak_gib
    needed = _before_start_gib(given, mem) + mem.cudagraph_gib
    if headroom >= needed:
        return None
    return Violation(
        "torch.OutOfMemoryError: CUDA out of memory (while capturing CUDA graphs)",
        f"graphs need {mem.cudagraph_gib:.2f} GiB but only {headroom - _before_start_gib(given, mem):.2f} "
        "GiB is left outside gpu_memory_utilization once the KV cache is allocated",
        "a lower gpu_memory_utilization, fewer cudagraph_capture_sizes, or enforce_eager: true",
    )
