"""The metric names each engine release exports, read from its source: vLLM renamed several between
releases, so a dashboard or rule for a model uses the names of the version that model runs."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version


@dataclass(frozen=True)
class EngineMetrics:
    """One release's Prometheus names (counters with prometheus_client's `_total`); None: not exported."""

    running: str
    waiting: str
    kv_usage: str  # a 0-1 fraction
    finished: str  # requests finished, labelled finished_reason in vLLM
    preemptions: str | None
    prompt_tokens: str
    generation_tokens: str
    ttft: str  # histograms: the base name, `_bucket` is appended
    itl: str
    e2e: str | None
    queue_time: str | None
    prefix_hits: str | None
    prefix_queries: str | None


_VLLM_SAME = {
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "finished": "vllm:request_success_total",
    "preemptions": "vllm:num_preemptions_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "ttft": "vllm:time_to_first_token_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
    "queue_time": "vllm:request_queue_time_seconds",
}

# (first release, names) in release order; each row was read in vllm/v1/metrics/loggers.py at that tag.
# Releases before the first row read get its names (V0's vllm/engine/metrics.py has the same ones).
VLLM: tuple[tuple[str, EngineMetrics], ...] = (
    # v0.7.3 loggers.py:114 gpu_cache_usage_perc, :119 gpu_prefix_cache_queries (hits beside it),
    # :184 time_per_output_token_seconds
    (
        "0.7.3",
        EngineMetrics(
            **_VLLM_SAME,
            kv_usage="vllm:gpu_cache_usage_perc",
            itl="vllm:time_per_output_token_seconds",
            prefix_hits="vllm:gpu_prefix_cache_hits_total",
            prefix_queries="vllm:gpu_prefix_cache_queries_total",
        ),
    ),
    # v0.9.2 loggers.py:217 kv_cache_usage_perc, :222 prefix_cache_queries (the old names deprecated, hidden
    # from 0.11, removed in 0.12: loggers.py at v0.12.0 has neither); :330 still time_per_output_token_seconds
    (
        "0.9.2",
        EngineMetrics(
            **_VLLM_SAME,
            kv_usage="vllm:kv_cache_usage_perc",
            itl="vllm:time_per_output_token_seconds",
            prefix_hits="vllm:prefix_cache_hits_total",
            prefix_queries="vllm:prefix_cache_queries_total",
        ),
    ),
    # v0.10.2 loggers.py:396 inter_token_latency_seconds (time_per_output_token_seconds hidden in 0.12,
    # gone from v0.15.0's loggers.py); unchanged through v0.34.0 (loggers.py:620, :662, :941)
    (
        "0.10.2",
        EngineMetrics(
            **_VLLM_SAME,
            kv_usage="vllm:kv_cache_usage_perc",
            itl="vllm:inter_token_latency_seconds",
            prefix_hits="vllm:prefix_cache_hits_total",
            prefix_queries="vllm:prefix_cache_queries_total",
        ),
    ),
)

# SGLang's python/sglang/srt/metrics/collector.py, as docs/status.md lists them; no per-release table yet.
SGLANG = EngineMetrics(
    running="sglang:num_running_reqs",
    waiting="sglang:num_queue_reqs",
    kv_usage="sglang:token_usage",
    finished="sglang:num_requests_total",
    preemptions="sglang:num_retracted_requests_total",
    prompt_tokens="sglang:prompt_tokens_total",
    generation_tokens="sglang:generation_tokens_total",
    ttft="sglang:time_to_first_token_seconds",
    itl="sglang:inter_token_latency_seconds",
    e2e=None,  # not among the names read there
    queue_time=None,
    prefix_hits=None,
    prefix_queries=None,
)


def _release(version: str) -> Version | None:
    try:
        return Version(version)
    except InvalidVersion:
        return None


def engine_metrics(engine: str, version: str) -> EngineMetrics:
    """The names `engine` at `version` exports; a version that is not PEP 440 gets the newest row's."""
    if engine == "sglang":
        return SGLANG
    release = _release(version)
    chosen = VLLM[-1][1]
    if release is not None:
        chosen = VLLM[0][1]
        for first, names in VLLM:
            if release >= Version(first):
                chosen = names
    return chosen
