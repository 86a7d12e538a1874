"""One candidate's load on one replica for `vllmctl tune` (an edge: HTTP): the smoke benchmark's client at
rising concurrency, KV-cache usage sampled from `/metrics` while it runs, preemptions counted; and a host's
replicas combined into one trial."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from vllmctl.bench.report import LoadSpec
from vllmctl.bench.smoke import benchmark_endpoint
from vllmctl.errors import VllmctlError
from vllmctl.status.metrics import parse_metrics
from vllmctl.tune.goodput import goodput
from vllmctl.tune.search import Trial


def _peak_kv(url: str, stop: threading.Event, found: list[float]) -> None:
    """KV-cache usage sampled while the load runs: the gauge reads 0 again once it ends."""
    with httpx.Client(trust_env=False, timeout=5.0) as client:
        while not stop.wait(0.5):
            try:
                metrics = parse_metrics(client.get(f"{url}/metrics").text)
            except (httpx.HTTPError, VllmctlError):
                continue
            found.extend(m.kv_usage for m in metrics.values() if m.kv_usage is not None)


def _preemptions(url: str) -> float:
    try:
        metrics = parse_metrics(httpx.get(f"{url}/metrics", timeout=5.0, trust_env=False).text)
    except (httpx.HTTPError, VllmctlError):
        return 0.0
    return sum(m.preemptions_total or 0.0 for m in metrics.values())


def measure(
    url: str, model: str, spec: LoadSpec, input_tokens: int, slo: Mapping[str, float], api_key: str | None
) -> dict[str, Any]:
    """The load levels against one replica: its goodput under the SLO and what it showed."""
    peaks: list[float] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_peak_kv, args=(url, stop, peaks), daemon=True)
    before = _preemptions(url)
    sampler.start()
    try:
        report = benchmark_endpoint(url, model, spec, input_tokens, api_key=api_key)
    finally:
        stop.set()
        sampler.join()
    rate, level = goodput(report.levels, slo)
    found: dict[str, Any] = {
        "goodput": None if report.error else rate,
        "kv_usage_peak": max(peaks, default=None),
        "preemptions": _preemptions(url) - before,
        "levels": [lv.to_json() for lv in report.levels],
        "error": report.error or None,
    }
    if level is not None:
        found.update(
            concurrency=level.concurrency, ttft_p99_ms=level.ttft.p99_ms, itl_p99_ms=level.itl.p99_ms
        )
    return found


def combine(changes: dict[str, int], loads: Sequence[dict[str, Any]]) -> Trial:
    """A host's trial: the replicas' goodputs summed (None when one did not serve); the worst percentiles,
    the highest KV peak and all preemptions; the first replica's levels."""
    rates = [load["goodput"] for load in loads]
    total = None if not rates or any(r is None for r in rates) else sum(rates)
    detail: dict[str, Any] = {**loads[0], "replicas": len(loads), "goodput_each": rates}
    detail.pop("goodput", None)
    for key in ("ttft_p99_ms", "itl_p99_ms"):
        values = [load[key] for load in loads if load.get(key) is not None]
        if values:
            detail[key] = max(values)
    peaks = [load["kv_usage_peak"] for load in loads if load.get("kv_usage_peak") is not None]
    detail["kv_usage_peak"] = max(peaks, default=None)
    detail["preemptions"] = sum(load["preemptions"] for load in loads)
    detail["error"] = next((load["error"] for load in loads if load.get("error")), None)
    return Trial(changes, total, detail=detail)
