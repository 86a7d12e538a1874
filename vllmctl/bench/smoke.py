"""The smoke benchmark's one-call entry: every level of a LoadSpec against one endpoint, and the signature the
release gate calls it through."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

from vllmctl.bench.client import Clock, run_benchmark
from vllmctl.bench.prompts import prompt_maker, shaped_prompts
from vllmctl.bench.report import EndpointReport, LoadSpec
from vllmctl.bench.stats import LevelSummary


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
    prompts = shaped_prompts(spec.shapes, tokenizer) if spec.shapes else prompt_maker(input_tokens, tokenizer)
    return asyncio.run(run_benchmark(base_url, model_id, prompts, spec, clock, on_level, api_key))
