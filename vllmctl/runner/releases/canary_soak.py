"""The canary's soak, read at the edge: HAProxy's per-server counters on every gateway host and each
engine's `/metrics` when a canary is back in rotation and when its soak ends, against its model's peers
still on the old release (the comparison: releases/canary_check.py)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from vllmctl.errors import VllmctlError
from vllmctl.releases.canary_check import (
    CanaryBounds,
    Counters,
    EngineReading,
    EngineWindow,
    Reading,
    engine_window,
    judge,
    judge_engines,
    pooled,
    pooled_engines,
    soak_record,
    window,
)
from vllmctl.releases.rollout import ServingReplica
from vllmctl.runner.gateway.control import GatewayControl

Readings = dict[tuple[str, str], Reading]  # (gateway host, backend/server) -> its row
EngineRead = Callable[[ServingReplica], EngineReading | None]  # None: its /metrics did not answer
METRICS_TIMEOUT_S = 5.0


def engine_reader(url_of: Callable[[ServingReplica], str]) -> EngineRead:
    """Reads a replica's latency histograms from its engine's `/metrics` at `url_of` it."""

    def read(replica: ServingReplica) -> EngineReading | None:
        import httpx

        from vllmctl.status.metrics import parse_metrics

        try:
            with httpx.Client(trust_env=False, timeout=METRICS_TIMEOUT_S) as client:
                found = parse_metrics(client.get(f"{url_of(replica)}/metrics").raise_for_status().text)
        except (httpx.HTTPError, VllmctlError):
            return None
        metrics = found.get(replica.model) or next(iter(found.values()), None)
        if metrics is None:
            return None
        ttft, itl = metrics.ttft, metrics.itl
        return EngineReading(
            (ttft.sum, ttft.count) if ttft else (0.0, 0.0), (itl.sum, itl.count) if itl else (0.0, 0.0)
        )

    return read


@dataclass
class SoakJudge:
    """Readings at each canary's return; `verdict` compares the soak's window and keeps what it found in
    `records` for the report. Without `engines` only the gateway's counters are compared."""

    gateway: GatewayControl
    replicas: list[ServingReplica]
    engines: EngineRead | None = None
    started: dict[str, Readings] = field(default_factory=dict)  # model -> at its soak's start
    started_engines: dict[str, dict[str, EngineReading | None]] = field(default_factory=dict)
    records: list[dict[str, Any]] = field(default_factory=list)

    def readings(self) -> Readings:
        """Every server's row on every gateway host (each balances its own clients: windowed apart)."""
        found: Readings = {}
        for host in self.gateway.gateway.hosts:
            for ref, stat in self.gateway.stats(host).items():
                found[(host, ref)] = Reading(stat.requests, stat.errors, stat.ttime_ms, stat.downs)
        return found

    def engine_readings(self, model: str) -> dict[str, EngineReading | None]:
        """Each replica of `model` (by ref): its engine's histograms now, read in parallel."""
        mine = [r for r in self.replicas if r.model == model]
        if self.engines is None or not mine:
            return {}
        with ThreadPoolExecutor(max_workers=min(16, len(mine))) as pool:
            return dict(zip((r.ref for r in mine), pool.map(self.engines, mine), strict=True))

    def begin(self, models: Collection[str]) -> None:
        """At a canary's return: every server's row and engine's histograms now, the soak's start."""
        try:
            now = self.readings()
        except VllmctlError:
            now = {}  # the gateway did not answer: the soak is waited, not judged
        for model in models:
            self.started[model] = now
            self.started_engines[model] = self.engine_readings(model)

    def verdict(
        self, model: str, canaries: Collection[str], out: Collection[str], bounds: Mapping[str, CanaryBounds]
    ) -> str:
        """Why `model`'s canaries did worse than its hosts not taken out over the soak, or ""."""
        if model not in self.gateway.gateway.ports:
            return ""
        started = self.started.get(model)
        try:
            now = self.readings() if started else {}
        except VllmctlError:
            now = {}
        if not started or not now:
            why = "the gateway did not answer at the soak's start or end"
            self.records.append(
                {"model": model, "canaries": sorted(canaries), "verdict": "not judged", "reason": why}
            )
            return ""
        mine = [r for r in self.replicas if r.model == model]
        engines_then, engines_now = self.started_engines.get(model, {}), self.engine_readings(model)

        def over(hosts: list[str]) -> tuple[Counters, EngineWindow]:
            refs = {r.ref for r in mine if r.host in hosts}
            served = pooled(window(started.get(key, Reading()), now[key]) for key in now if key[1] in refs)
            windows = []
            for ref in refs:
                then, later = engines_then.get(ref), engines_now.get(ref)
                if then is not None and later is not None:  # an engine not read twice is left out
                    windows.append(engine_window(then, later))
            return served, pooled_engines(windows)

        canary = over([r.host for r in mine if r.host in canaries])
        peers = over([r.host for r in mine if r.host not in canaries and r.host not in out])
        bound = bounds.get(model, CanaryBounds())
        worse = judge(canary[0], peers[0], bound) or judge_engines(canary[1], peers[1], bound)
        self.records.append(soak_record(model, canaries, (canary[0], peers[0]), (canary[1], peers[1]), worse))
        return worse
