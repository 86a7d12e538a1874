"""SGLang decisions from the tuning guides: data over tensor parallelism, expert parallel, scheduling policy
and conservativeness, the overlap scheduler and torch.compile; each with its documented limit.
"""

from __future__ import annotations

from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.params import total_params
from vllmctl.planner.types import Decision, DeploymentRequest

SMALL_MODEL_PARAMS = 8e9  # torch.compile pays off for small models at small batch sizes
NO_GRAMMAR = (None, "none")


def _explicit_or(flag: str, explicit: dict[str, Any], value: Any, why: str) -> Decision:
    if flag in explicit:
        return Decision(flag, explicit[flag], "explicit")
    return Decision(flag, value, why)


def sglang_guide_decisions(
    arch: ModelArch, request: DeploymentRequest, explicit: dict[str, Any], tp: int, dp: int
) -> list[Decision]:
    decisions = [
        _explicit_or(
            "dp_size",
            explicit,
            dp,
            f"{dp} data-parallel workers of tp {tp} behind one port: the model fits at tp {tp}, and data "
            "parallelism gives more throughput than a wider tp (no all-reduce per layer)"
            if dp > 1
            else f"one worker: all GPUs go to tp {tp}"
            + (
                " (latency profile: the widest tp cuts inter-token latency)"
                if request.profile == "latency"
                else ""
            ),
        )
    ]
    if arch.is_moe and tp > 1:
        ep = tp if arch.num_experts > tp else 1
        why = (
            f"{arch.num_experts} experts outnumber the {tp} GPUs: whole experts per GPU (expert parallel) "
            "instead of a 1/tp slice of each; attention stays tp"
            if ep > 1
            else f"{arch.num_experts} experts do not outnumber {tp} GPUs: experts stay tp-sharded"
        )
        decisions.append(_explicit_or("ep_size", explicit, ep, why))
    shared = request.workload == "shared_prefix"
    decisions.append(
        _explicit_or(
            "schedule_policy",
            explicit,
            "lpm" if shared else "fcfs",
            "workload shared_prefix: longest-prefix-match runs requests that share cached prefixes together, "
            "raising radix-cache hits"
            if shared
            else "independent requests gain nothing from prefix ordering; first-come-first-served is fair "
            "and cheaper than sorting the queue each step",
        )
    )
    decisions.append(
        _explicit_or(
            "schedule_conservativeness",
            explicit,
            1.0,
            "SGLang default: reserves KV for running requests' future tokens; lower it (e.g. 0.5) in "
            "engine_args when status advice reports KV underused while requests queue",
        )
    )
    grammar = explicit.get("grammar_backend")
    decisions.append(
        _explicit_or(
            "disable_overlap_schedule",
            explicit,
            grammar not in NO_GRAMMAR,
            f"grammar_backend {grammar} (constrained decoding): the overlap scheduler is documented as "
            "not supporting it, so it is turned off"
            if grammar not in NO_GRAMMAR
            else "overlap scheduler on (SGLang default): CPU scheduling hides behind GPU compute; it does "
            "not support constrained decoding, so declare grammar_backend if clients send grammars",
        )
    )
    params = total_params(arch)
    small = params <= SMALL_MODEL_PARAMS and not arch.is_moe
    compile_it = small and request.profile == "latency"
    decisions.append(
        _explicit_or(
            "enable_torch_compile",
            explicit,
            compile_it,
            f"latency profile and a small model ({params / 1e9:.1f}B): torch.compile fuses kernels "
            "for the small decode batches (up to torch_compile_max_bs); costs minutes of startup"
            if compile_it
            else f"off: torch.compile helps small models (<= {SMALL_MODEL_PARAMS / 1e9:.0f}B, dense) at "
            "small batch sizes, i.e. the latency profile; elsewhere it only adds startup time",
        )
    )
    return decisions
