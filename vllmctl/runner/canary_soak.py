"""The canary's soak, read from the gateway: HAProxy's per-server counters when a canary is back in
rotation and when its soak ends, against its model's peers still on the old release (canary_check.py)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from vllmctl.errors import VllmctlError
from vllmctl.releases.canary_check import CanaryBounds, Counters, judge, pooled, window
from vllmctl.releases.rollout import ServingReplica
from vllmctl.runner.gateway import GatewayControl


@dataclass
class SoakJudge:
    """Counters per gateway server at each canary's return; `verdict` compares the soak's window."""

    gateway: GatewayControl
    replicas: list[ServingReplica]
    started: dict[str, dict[str, Counters]] = field(
        default_factory=dict
    )  # model -> ref -> at its soak's start

    def counters(self) -> dict[str, Counters]:
        """Every server's counters, summed over the gateway hosts (each balances its own clients)."""
        seen: dict[str, list[Counters]] = {}
        for host in self.gateway.gateway.hosts:
            for ref, stat in self.gateway.stats(host).items():
                seen.setdefault(ref, []).append(Counters(stat.total, stat.errors, float(stat.total_time_ms)))
        return {ref: pooled(found) for ref, found in seen.items()}

    def begin(self, models: Collection[str]) -> None:
        """At a canary's return: every server's counters now, the soak's start of `models`."""
        try:
            now = self.counters()
        except VllmctlError:
            now = {}  # the gateway did not answer: the soak is waited, not judged
        for model in models:
            self.started[model] = now

    def verdict(
        self, model: str, canaries: Collection[str], out: Collection[str], bounds: Mapping[str, CanaryBounds]
    ) -> str:
        """Why `model`'s canaries did worse than its hosts not taken out over the soak, or ""."""
        started = self.started.get(model)
        if model not in self.gateway.gateway.ports or not started:
            return ""
        try:
            now = self.counters()
        except VllmctlError:
            return ""
        mine = [r for r in self.replicas if r.model == model]

        def over(refs: list[str]) -> Counters:
            return pooled(window(started.get(ref, Counters()), now[ref]) for ref in refs if ref in now)

        canary = over([r.ref for r in mine if r.host in canaries])
        peers = over([r.ref for r in mine if r.host not in canaries and r.host not in out])
        return judge(canary, peers, bounds.get(model, CanaryBounds()))
