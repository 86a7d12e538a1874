"""Reads an engine's own numbers, pure: `/metrics` Prometheus text (vLLM or SGLang) into a typed snapshot
per served model, rates between two snapshots, and the measured KV figures from vLLM's startup log.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # parsed only where metrics are scraped, not on every import of the status model
    from prometheus_client.samples import Sample

from vllmctl.errors import VllmctlError

Engine = Literal["vllm", "sglang"]

# Each field reads the first name present, newest first. vLLM V1 names (0.8+), then V0's; SGLang from
# python/sglang/srt/metrics/collector.py (sgl-project/sglang), where a "retraction" is its preemption.
GAUGES: dict[str, tuple[str, ...]] = {
    "requests_running": ("vllm:num_requests_running", "sglang:num_running_reqs"),
    "requests_waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs"),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
    "gen_throughput": ("sglang:gen_throughput",),
    "kv_capacity_tokens": ("sglang:max_total_num_tokens",),
    # Only where the engine has no counters: vLLM V0's gauge and SGLang's are hit rates of their own window.
    "prefix_cache_hit_rate_gauge": ("vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate"),
}
COUNTERS: dict[str, tuple[str, ...]] = {
    "preemptions_total": (
        "vllm:num_preemptions_total",
        "vllm:num_preemptions",
        "sglang:num_retracted_requests_total",
    ),
    "prompt_tokens_total": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
    "generation_tokens_total": ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
    "requests_succeeded_total": ("vllm:request_success_total", "sglang:num_requests_total"),
    # In tokens; vLLM 0.9 renamed them from vllm:gpu_prefix_cache_* (vllm/v1/metrics/loggers.py).
    "prefix_cache_queries_total": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_cache_hits_total": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
}
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "itl": (
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
        "sglang:inter_token_latency_seconds",
        "sglang:time_per_output_token_seconds",
    ),
}
# vLLM's cache_config_info carries no model label: it describes the whole server process.
VLLM_CACHE_INFO = "vllm:cache_config_info"
MODEL_LABELS = ("model_name", "name")
# vLLM counts every finished request in request_success_total, by reason; these two did not succeed.
FAILED_REASONS = frozenset({"abort", "error"})  # SGLang before 0.4 labelled the model `name`


class MetricsParseError(VllmctlError):
    """A `/metrics` answer that is not Prometheus text, or names no engine vllmctl knows."""


@dataclass(frozen=True)
class HistogramSummary:
    sum: float
    count: float

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None


@dataclass(frozen=True)
class EngineMetrics:
    """One model's numbers at one moment. KV usage is a 0–1 fraction for both engines."""

    engine: Engine
    model: str
    requests_running: float = 0.0
    requests_waiting: float = 0.0
    kv_usage: float | None = None
    preemptions_total: float | None = None
    prompt_tokens_total: float | None = None
    generation_tokens_total: float | None = None
    requests_succeeded_total: float | None = None
    gen_throughput: float | None = None
    kv_capacity_tokens: float | None = None
    ttft: HistogramSummary | None = None
    itl: HistogramSummary | None = None
    prefix_cache_queries_total: float | None = None
    prefix_cache_hits_total: float | None = None
    prefix_cache_hit_rate_gauge: float | None = None

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        """Cached prompt tokens over queried ones since the engine started, else the engine's own gauge."""
        if self.prefix_cache_queries_total and self.prefix_cache_hits_total is not None:
            return self.prefix_cache_hits_total / self.prefix_cache_queries_total
        return self.prefix_cache_hit_rate_gauge


@dataclass(frozen=True)
class Rates:
    """Per-second increases between two snapshots; None where either snapshot lacked the counter."""

    dt_s: float
    preemptions_per_s: float | None
    prompt_tokens_per_s: float | None
    generation_tokens_per_s: float | None
    requests_per_s: float | None
    prefix_cache_hit_rate: float | None = None  # cached / queried prompt tokens between the snapshots


def _model_of(sample: Sample) -> str:
    return next((sample.labels[key] for key in MODEL_LABELS if key in sample.labels), "")


def _samples(text: str) -> list[Sample]:
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return [sample for family in text_string_to_metric_families(text) for sample in family.samples]
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsParseError(
            f"the /metrics answer is not Prometheus text: {exc}",
            "check that the port serves an engine's /metrics (SGLang needs --enable-metrics)",
        ) from exc


def _first(values: Mapping[str, float], names: Iterable[str]) -> float | None:
    return next((values[name] for name in names if name in values), None)


def _engine_of(names: Iterable[str]) -> Engine | None:
    prefixes = {name.split(":", 1)[0] for name in names if ":" in name}
    if "vllm" in prefixes:
        return "vllm"
    return "sglang" if "sglang" in prefixes else None


def _histogram(values: Mapping[str, float], names: Iterable[str]) -> HistogramSummary | None:
    for name in names:
        if f"{name}_count" in values:
            return HistogramSummary(values.get(f"{name}_sum", 0.0), values[f"{name}_count"])
    return None


def _kv_tokens_from_cache_info(samples: list[Sample]) -> float | None:
    for sample in samples:
        if sample.name != VLLM_CACHE_INFO:
            continue
        labels = sample.labels
        if labels.get("kv_cache_size_tokens", "None").isdigit():
            return float(labels["kv_cache_size_tokens"])
        if labels.get("num_gpu_blocks", "None").isdigit() and labels.get("block_size", "").isdigit():
            return float(int(labels["num_gpu_blocks"]) * int(labels["block_size"]))
    return None


def parse_metrics(text: str) -> dict[str, EngineMetrics]:
    """Every model the text reports on, by model name. Engines (vLLM data parallel) are summed; KV usage
    takes the fullest engine, since that one decides whether its requests wait."""
    samples = _samples(text)
    engine = _engine_of(sample.name for sample in samples)
    if engine is None:
        raise MetricsParseError(
            "the /metrics answer has no vllm: or sglang: metrics",
            "point at the engine's own port, not at a proxy or another exporter",
        )
    sums: dict[str, dict[str, float]] = {}
    maxima: dict[str, dict[str, float]] = {}
    for sample in samples:
        model = _model_of(sample)
        if not model or sample.name == VLLM_CACHE_INFO or "le" in sample.labels:
            continue
        if sample.labels.get("finished_reason") in FAILED_REASONS:
            continue
        per_model = sums.setdefault(model, {})
        per_model[sample.name] = per_model.get(sample.name, 0.0) + sample.value
        highest = maxima.setdefault(model, {})
        highest[sample.name] = max(highest.get(sample.name, sample.value), sample.value)
    server_kv_tokens = _kv_tokens_from_cache_info(samples)
    result: dict[str, EngineMetrics] = {}
    for model, values in sums.items():
        gauges = {field: _first(values, names) for field, names in GAUGES.items()}
        kv_usage = _first(maxima[model], GAUGES["kv_usage"])
        result[model] = EngineMetrics(
            engine=engine,
            model=model,
            requests_running=gauges["requests_running"] or 0.0,
            requests_waiting=gauges["requests_waiting"] or 0.0,
            kv_usage=kv_usage,
            gen_throughput=gauges["gen_throughput"],
            prefix_cache_hit_rate_gauge=gauges["prefix_cache_hit_rate_gauge"],
            kv_capacity_tokens=gauges["kv_capacity_tokens"] or server_kv_tokens,
            ttft=_histogram(values, HISTOGRAMS["ttft"]),
            itl=_histogram(values, HISTOGRAMS["itl"]),
            **{field: _first(values, names) for field, names in COUNTERS.items()},
        )
    return result


def _increase(prev: float | None, cur: float | None) -> float | None:
    if prev is None or cur is None:
        return None
    # A counter that went down means the server restarted; like Prometheus, count from zero again.
    return cur - prev if cur >= prev else cur


def rates(prev: EngineMetrics, cur: EngineMetrics, dt_s: float) -> Rates:
    """Per-second rates between two snapshots of one model taken `dt_s` seconds apart."""
    if dt_s <= 0:
        raise ValueError(f"snapshots must be taken apart in time, got dt_s={dt_s}")

    def per_s(field: str) -> float | None:
        increase = _increase(getattr(prev, field), getattr(cur, field))
        return None if increase is None else increase / dt_s

    return Rates(
        dt_s,
        per_s("preemptions_total"),
        per_s("prompt_tokens_total"),
        per_s("generation_tokens_total"),
        per_s("requests_succeeded_total"),
        prefix_cache_hit_rate(prev, cur),
    )


def prefix_cache_hit_rate(prev: EngineMetrics, cur: EngineMetrics) -> float | None:
    """Cached over queried prompt tokens between two snapshots; None when no prompt was queried."""
    queried = _increase(prev.prefix_cache_queries_total, cur.prefix_cache_queries_total)
    hit = _increase(prev.prefix_cache_hits_total, cur.prefix_cache_hits_total)
    if not queried or hit is None:
        return None
    return min(hit / queried, 1.0)  # a restart between the two counters' reads must not show over 100 %


@dataclass(frozen=True)
class MeasuredKv:
    """What vLLM reported at startup; None for lines the log did not have."""

    kv_tokens: int | None = None
    max_concurrency: float | None = None
    concurrency_context: int | None = None  # the L in "Maximum concurrency for L tokens per request"
    available_kv_gib: float | None = None
    weights_gib: float | None = None
    num_blocks: int | None = None


_NUMBER = r"(\d[\d,]*(?:\.\d+)?)"
_KV_TOKENS = re.compile(rf"(?:GPU|CPU|XPU|TPU)? ?KV cache size:\s+{_NUMBER} tokens")
_CONCURRENCY = re.compile(rf"Maximum concurrency for {_NUMBER} tokens per request: {_NUMBER}x")
# The second form is the error vLLM raises when max_model_len does not fit: still a measurement.
_AVAILABLE = re.compile(rf"(?:Available KV cache memory: |available KV cache memory \(){_NUMBER} GiB")
# The CPU backend sizes its cache from VLLM_CPU_KVCACHE_SPACE and logs it this way instead.
_CPU_KV_SPACE = re.compile(rf"Explicitly set \({_NUMBER}/{_NUMBER}\) GiB for KV cache")
# Older releases print "GB" for what is GiB (bytes / 2**30); both are read as GiB.
_WEIGHTS_LOADED = re.compile(rf"(?:Loading model weights|Model loading) took {_NUMBER} Gi?B")
# The memory profile's summary rounds to 0.01 GiB, so it only stands in when the loader line is missing.
_WEIGHTS_PROFILED = re.compile(
    rf"(?:Actual usage is {_NUMBER} GiB for weight|model weights take\s+{_NUMBER}\s*GiB)"
)
_BLOCKS = re.compile(rf"(?:# GPU blocks: |num_gpu_blocks is: ){_NUMBER}")


def _last(pattern: re.Pattern[str], text: str, group: int | None = None) -> str | None:
    """The last match's chosen group, or its one non-empty group when the pattern has alternatives."""
    matches = list(pattern.finditer(text))
    if not matches:
        return None
    last = matches[-1]
    value = last.group(group) if group else next(g for g in last.groups() if g is not None)
    return value.replace(",", "")


def parse_startup_log(text: str) -> MeasuredKv:
    """The KV figures from a vLLM startup log; with several ranks logging, the last line of each wins."""
    tokens = _last(_KV_TOKENS, text)
    context = _last(_CONCURRENCY, text, 1)
    concurrency = _last(_CONCURRENCY, text, 2)
    available = _last(_AVAILABLE, text) or _last(_CPU_KV_SPACE, text)
    weights = _last(_WEIGHTS_LOADED, text) or _last(_WEIGHTS_PROFILED, text)
    blocks = _last(_BLOCKS, text)
    return MeasuredKv(
        kv_tokens=int(float(tokens)) if tokens else None,
        max_concurrency=float(concurrency) if concurrency else None,
        concurrency_context=int(float(context)) if context else None,
        available_kv_gib=float(available) if available else None,
        weights_gib=float(weights) if weights else None,
        num_blocks=int(float(blocks)) if blocks else None,
    )
