"""Each tuning rule pinned with the evidence it quotes, and the advice real vLLM captures produce."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vllmctl.status.advice import Advice, advise
from vllmctl.status.metrics import EngineMetrics, Rates, parse_metrics, rates

FIXTURES = Path(__file__).parents[2] / "fixtures" / "vllm_cpu"
HERE = Path(__file__).parent / "data"


def snap(running: float, waiting: float, kv: float | None, engine: Any = "vllm") -> EngineMetrics:
    return EngineMetrics(
        engine=engine, model="m", requests_running=running, requests_waiting=waiting, kv_usage=kv
    )


def preempting(per_s: float, requests_per_s: float | None) -> Rates:
    return Rates(10.0, per_s, None, None, requests_per_s)


def _real(path: Path) -> EngineMetrics:
    return next(iter(parse_metrics(path.read_text()).values()))


def test_frequent_preemption_asks_vllm_for_more_cache_memory() -> None:
    advice = advise("vllm", {"gpu_memory_utilization": 0.85}, [snap(64, 3, 0.97)], preempting(2.0, 10.0))
    assert advice == [
        Advice(
            "frequent-preemption",
            advice[0].message,
            {
                "preemptions_per_s": 2.0,
                "requests_per_s": 10.0,
                "preemptions_per_request": 0.2,
                "running_max": 64,
            },
            {"gpu_memory_utilization": 0.9},
        )
    ]
    assert "tensor parallelism" in advice[0].message


def test_preemption_at_the_memory_ceiling_shrinks_the_batch_instead() -> None:
    advice = advise("vllm", {"gpu_memory_utilization": 0.95}, [snap(64, 3, 0.97)], preempting(2.0, 10.0))
    assert advice[0].suggested_args == {"max_num_seqs": 48}


def test_sglang_retractions_make_the_scheduler_more_conservative() -> None:
    advice = advise("sglang", {}, [snap(100, 5, 0.95, "sglang")], preempting(3.0, 20.0))
    assert advice[0].code == "frequent-preemption"
    assert advice[0].suggested_args == {"schedule_conservativeness": 1.3}


@pytest.mark.parametrize(
    ("per_s", "requests_per_s"),
    [(0.4, 10.0), (0.9, None), (0.0, 5.0)],  # 4 % of requests; under 1/s with no request rate; none
)
def test_rare_preemption_is_not_advice(per_s: float, requests_per_s: float | None) -> None:
    advice = advise("vllm", {}, [snap(8, 0, 0.3)], preempting(per_s, requests_per_s))
    assert [a.code for a in advice] == ["load-bound"]


def test_waiting_with_a_full_batch_and_free_cache_raises_max_num_seqs() -> None:
    advice = advise("vllm", {"max_num_seqs": 16}, [snap(16, 40, 0.2), snap(16, 35, 0.25)])
    assert advice == [
        Advice(
            "max-num-seqs-too-low",
            advice[0].message,
            {"kv_usage_max": 0.25, "waiting_max": 40, "running_max": 16, "max_num_seqs": 16},
            {"max_num_seqs": 32},  # doubling still fits: 16 / 0.25 * 0.9 = 57
        )
    ]


def test_a_raise_is_capped_by_what_the_cache_holds() -> None:
    advice = advise("vllm", {"max_num_seqs": 20}, [snap(20, 40, 0.49)])
    assert advice[0].suggested_args == {"max_num_seqs": 36}  # 20 / 0.49 * 0.9 = 36.7, not 40


def test_waiting_with_free_slots_points_at_the_prefill_budget() -> None:
    advice = advise("vllm", {"max_num_seqs": 256, "max_num_batched_tokens": 2048}, [snap(40, 12, 0.3)])
    assert advice[0].code == "prefill-budget-too-low"
    assert advice[0].suggested_args == {"max_num_batched_tokens": 4096}


def test_sglang_waiting_with_low_token_usage_is_a_conservative_scheduler() -> None:
    advice = advise("sglang", {"schedule_conservativeness": 1.0}, [snap(30, 50, 0.2, "sglang")])
    assert advice == [
        Advice(
            "scheduler-too-conservative",
            advice[0].message,
            {"kv_usage_max": 0.2, "waiting_max": 50, "running_max": 30},
            {"schedule_conservativeness": 0.7},
        )
    ]


def test_no_waiting_and_low_kv_means_the_load_is_the_bottleneck() -> None:
    advice = advise("vllm", {}, [snap(3, 0, 0.1), snap(5, 0, 0.12)])
    assert advice == [
        Advice("load-bound", advice[0].message, {"kv_usage_max": 0.12, "waiting_max": 0.0, "running_max": 5})
    ]
    assert advice[0].suggested_args == {}


def test_full_cache_with_waiting_asks_for_memory_then_tensor_parallelism() -> None:
    more_memory = advise("vllm", {"gpu_memory_utilization": 0.9}, [snap(200, 30, 0.97)])
    assert more_memory[0].code == "kv-cache-full"
    assert more_memory[0].evidence == {"kv_usage_max": 0.97, "waiting_max": 30}
    assert more_memory[0].suggested_args == {"gpu_memory_utilization": 0.95}
    at_ceiling = advise(
        "vllm", {"gpu_memory_utilization": 0.95, "tensor_parallel_size": 2}, [snap(200, 30, 0.97)]
    )
    assert at_ceiling[0].suggested_args == {"tensor_parallel_size": 4}
    sglang = advise("sglang", {"tp_size": 1}, [snap(200, 30, 0.95, "sglang")])
    assert sglang[0].suggested_args == {"tp_size": 2}


@pytest.mark.parametrize(
    "snapshots",
    [
        [snap(10, 0, 0.7)],  # busy and healthy: nothing to say
        [snap(10, 3, 0.7)],  # waiting with the cache between low and full: no clear single cause
        [snap(10, 4, 0.2), snap(10, 0, 0.2), snap(10, 0, 0.2)],  # waited once in three: a blip
        [snap(10, 3, None)],  # no KV gauge: no KV-based rule can speak
        [],
    ],
)
def test_no_advice_without_clear_evidence(snapshots: list[EngineMetrics]) -> None:
    assert advise("vllm", {}, snapshots) == []


def test_real_queueing_capture_asks_for_more_sequences() -> None:
    # vLLM CPU, 768-token KV cache, --max-num-seqs 2, 8 concurrent requests: 2 run, 6 wait, KV 35 % used.
    advice = advise("vllm", {"max_num_seqs": 2}, [_real(FIXTURES / "metrics_queueing.txt")])
    assert advice == [
        Advice(
            "max-num-seqs-too-low",
            advice[0].message,
            {"kv_usage_max": 0.3478, "waiting_max": 6.0, "running_max": 2.0, "max_num_seqs": 2.0},
            {"max_num_seqs": 4},
        )
    ]


def test_real_preempting_captures_ask_for_more_cache_memory() -> None:
    # Same server, 24 concurrent requests of 440 tokens: 2 preemptions and 10 finished in 6.08 s.
    first, later = _real(FIXTURES / "metrics_preempting.txt"), _real(HERE / "metrics_preempting_later.txt")
    advice = advise("vllm", {"max_num_seqs": 2}, [first, later], rates(first, later, 6.08))
    assert [(a.code, a.suggested_args) for a in advice] == [
        ("frequent-preemption", {"gpu_memory_utilization": 0.95})
    ]
    assert advice[0].evidence["preemptions_per_request"] == 0.2


def test_a_cpu_engine_is_never_told_to_raise_gpu_memory() -> None:
    # vLLM-CPU's KV cache is VLLM_CPU_KVCACHE_SPACE: only the batch can shrink
    (advice,) = advise("vllm", {}, [snap(64, 3, 0.97)], preempting(2.0, 10.0), on_cpu=True)
    assert (advice.code, advice.suggested_args) == ("frequent-preemption", {"max_num_seqs": 48})
    (full,) = advise("vllm", {"gpu_memory_utilization": 0.9}, [snap(200, 30, 0.97)], on_cpu=True)
    assert full.code == "kv-cache-full" and full.suggested_args == {}
    assert "VLLM_CPU_KVCACHE_SPACE" in full.message
