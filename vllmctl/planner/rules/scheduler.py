"""vLLM's checks on scheduler and cache arguments: sequences within the batched-token budget, the memory
fraction, swap space against host memory, and max_model_len against what the model config allows.
"""

from __future__ import annotations

from vllmctl.planner.rules.base import RuleInput, Violation
from vllmctl.planner.versions import V1_DEFAULT_SINCE


def seqs_within_batched_tokens(given: RuleInput) -> Violation | None:
    # vllm/config/scheduler.py:245-249, SchedulerConfig._verify_args
    s = given.settings
    if s.max_num_batched_tokens >= s.max_num_seqs:
        return None
    return Violation(
        f"max_num_batched_tokens ({s.max_num_batched_tokens}) must be greater than or equal to max_num_seqs "
        f"({s.max_num_seqs}).",
        "every scheduled sequence needs at least one token of the step's budget",
        f"max_num_seqs at most {s.max_num_batched_tokens}, or max_num_batched_tokens at least "
        f"{s.max_num_seqs}",
    )


def batched_tokens_cover_context(given: RuleInput) -> Violation | None:
    # vllm/config/scheduler.py:236-244: only without chunked prefill, which the V1 engine always enables
    s = given.settings
    if s.version >= V1_DEFAULT_SINCE or s.enable_chunked_prefill:
        return None
    if s.max_num_batched_tokens >= s.max_model_len:
        return None
    return Violation(
        f"max_num_batched_tokens ({s.max_num_batched_tokens}) is smaller than max_model_len "
        f"({s.max_model_len}). This effectively limits the maximum sequence length to max_num_batched_tokens "
        "and makes vLLM reject longer sequences. Please increase max_num_batched_tokens or decrease "
        "max_model_len.",
        "without chunked prefill a whole prompt must fit one step",
        f"max_num_batched_tokens at least {s.max_model_len}, or enable_chunked_prefill: true",
    )


def utilization_in_range(given: RuleInput) -> Violation | None:
    # vllm/config/cache.py:168-171, CacheConfig._verify_args
    util = given.settings.gpu_memory_utilization
    if 0 < util <= 1:
        return None
    return Violation(
        f"GPU memory utilization must be less than 1.0. Got {util}.",
        "gpu_memory_utilization is the fraction of each GPU vLLM may use",
        "a value in (0, 1], typically 0.85-0.95",
    )


def swap_space_within_host_memory(given: RuleInput) -> Violation | None:
    # vllm/config/cache.py:204-218, CacheConfig.verify_with_parallel_config
    ram = given.host.ram_gib
    s = given.settings
    if ram is None:
        return None
    used = s.swap_space_gib * s.tp
    if used <= 0.7 * ram:
        return None
    most = int(0.7 * ram / s.tp * 10) / 10
    return Violation(
        f"Too large swap space. {used:.2f} GiB out of the {ram:.2f} GiB total CPU memory is allocated for "
        "the swap space.",
        f"vLLM pins swap_space ({s.swap_space_gib:g} GiB) of host memory per GPU of a TP group: "
        f"{s.tp} x {s.swap_space_gib:g} GiB is over 70 % of the host's {ram:.1f} GiB",
        f"swap_space at most {most:g} (0 is fine: V1 recomputes instead of swapping)",
    )


def max_model_len_within_derived(given: RuleInput) -> Violation | None:
    # vllm/config/model.py:1867-1911, _get_and_verify_max_len
    s, arch = given.settings, given.arch
    derived = arch.max_position_embeddings
    if s.max_model_len <= derived or s.allow_long_max_model_len:
        return None
    return Violation(
        f"User-specified max_model_len ({s.max_model_len}) is greater than the derived max_model_len "
        f"(max_position_embeddings={derived} or model_max_length=None in model's config.json). To allow "
        "overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",
        f"{arch.name} was trained for {derived:,} positions (rope scaling included); beyond that RoPE "
        "produces NaN or the position table overflows",
        f"max_model_len at most {derived}, or VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 in the engine's env if you "
        "know the model extrapolates",
    )
