"""The smoke benchmark: streamed completions at a few concurrency levels, summarized as `vllm bench serve`
does, and checked against a model's SLO. `benchmark_endpoint` is the one-call entry."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

from vllmctl.bench.client import Clock, EndpointReport, LoadSpec, run_benchmark
from vllmctl.bench.endpoints import Endpoint, endpoints_for
from vllmctl.bench.prompts import load_tokenizer, prompt_maker
from vllmctl.bench.stats import LevelSummary, RequestResult, Violation, check_slo, summarize

__all__ = [
    "Endpoint",
    "EndpointReport",
    "LevelSummary",
    "LoadSpec",
    "RequestResult",
    "SmokeBench",
    "Violation",
    "benchmark_endpoint",
    "check_report",
    "check_slo",
    "endpoints_for",
    "load_tokenizer",
    "summarize",
]


class SmokeBench(Protocol):
    """How the gate runs its smoke benchmark on one endpoint; api_key is sent as a bearer token."""

    def __call__(self, base_url: str, model: str, api_key: str | None = None) -> EndpointReport: ...


def benchmark_endpoint(
    base_url: str,
    model_id: str,
    spec: LoadSpec,
    input_tokens: int,
    tokenizer: Any = None,
    clock: Clock = time.perf_counter,
    on_level: Callable[[LevelSummary], None] | None = None,
    api_key: str | None = None,
) -> EndpointReport:
    """Run every level of `spec` against one OpenAI-compatible endpoint and return the summaries."""
    prompts = prompt_maker(input_tokens, tokenizer)
    return asyncio.run(run_benchmark(base_url, model_id, prompts, spec, clock, on_level, api_key))


def check_report(report: EndpointReport, slo: dict[str, float]) -> list[Violation]:
    """SLO violations over every level; an endpoint that never answered breaks `max_error_rate` outright."""
    if report.error:
        return [Violation("max_error_rate", float(slo.get("max_error_rate", 0.0)), 1.0, 0)]
    return [violation for level in report.levels for violation in check_slo(level, slo)]
