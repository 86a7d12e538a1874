"""The status model, pure: what was gathered for one engine process, and a multi-node model's Ray cluster as
its used nodes reported it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vllmctl.status.advice import Advice
from vllmctl.status.metrics import EngineMetrics, Rates

KV_DEVIATION_MAX = 0.05  # measured KV cache this far off the plan is flagged
UNREACHABLE = "unreachable"
NO_RELEASE = "-"


@dataclass(frozen=True)
class ClusterState:
    """What the group's used nodes said: each Ray unit's state, what `ray status` on the head counts, and the
    head's engine unit; `errors` names the nodes that could not be asked and why."""

    group: str
    head: str
    ray_units: Mapping[str, str]  # used node -> systemd ActiveState of its Ray unit, or "unreachable"
    ray_nodes: int
    ray_gpus: float
    missing: str | None  # what the cluster lacks to be whole; None when it is formed
    engine_unit: str
    engine: str  # the head's engine unit state
    errors: Mapping[str, str] = field(default_factory=dict)
    releases: Mapping[str, str] = field(default_factory=dict)  # used node -> its `current` group release
    known_good: Mapping[str, str] = field(default_factory=dict)  # used node -> its `known-good` pointer
    launcher: str = "ray"  # vllm, data_parallel: `ray_units` holds each node's engine (ranks) unit, no Ray
    api_servers: Mapping[str, int] = field(default_factory=dict)  # node -> the port its API server serves on

    @property
    def ray_free(self) -> bool:
        return self.launcher != "ray"

    @property
    def release(self) -> str | None:
        """The group's release when every answering node is on the same one; None when none or mixed."""
        ids = set(self.releases.values())
        return next(iter(ids)) if len(ids) == 1 and NO_RELEASE not in ids else None

    @property
    def formed(self) -> bool:
        return self.missing is None

    @property
    def ray_ok(self) -> bool:
        """Every Ray unit active and the cluster whole (the engine's own health is judged apart)."""
        return self.formed and all(state == "active" for state in self.ray_units.values())

    def summary(self) -> str:
        """Short text for a table cell, e.g. "ray 2/2 active, formed"."""
        active = sum(state == "active" for state in self.ray_units.values())
        kind = "ranks" if self.ray_free else "ray"
        return f"{kind} {active}/{len(self.ray_units)} active, {'formed' if self.formed else 'not formed'}"

    def problems(self) -> list[str]:
        """One sentence per thing that keeps the group from being whole."""
        found = [f"{host}: {why}" for host, why in self.errors.items()]
        unit = "engine unit" if self.ray_free else "Ray unit"
        found += [
            f"{unit} on {host} is {state}"
            for host, state in self.ray_units.items()
            if state not in ("active", UNREACHABLE)
        ]
        if self.missing is not None:
            found.append(f"{'ranks' if self.ray_free else 'ray status'}: {self.missing}")
        if len(set(self.releases.values())) > 1:
            on = ", ".join(f"{host} {release}" for host, release in self.releases.items())
            found.append(f"nodes are on different group releases ({on}): re-run `vllmctl cluster`")
        return found

    def to_json(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "head": self.head,
            "launcher": self.launcher,
            "ray_units": dict(self.ray_units),
            "ray_nodes": self.ray_nodes,
            "ray_gpus": self.ray_gpus,
            "formed": self.formed,
            "engine_unit": self.engine_unit,
            "engine": self.engine,
            "releases": dict(self.releases),
            "known_good": dict(self.known_good),
            "api_servers": dict(self.api_servers),
            "ok": self.ray_ok,
        }


@dataclass(frozen=True)
class ModelStatus:
    """What was gathered for one engine process; None where it could not be learned."""

    host: str
    model: str
    port: int
    service_state: str = "unknown"  # systemd's ActiveState: active, failed, inactive, activating, ...
    release: str | None = None
    healthy: bool | None = None  # None: not checked (the service was not active, or the host unreachable)
    metrics: EngineMetrics | None = None
    rates: Rates | None = None
    advice: tuple[Advice, ...] = ()
    planned_kv_tokens: int | None = None
    measured_kv_tokens: int | None = None  # from the startup log; else the metrics' own KV capacity
    restart_kv_tokens: int | None = None  # planned for a restart that loads its compiled graphs (V2 runner)
    error: str = ""  # why nothing more is known, e.g. "unreachable: connection timed out"
    notes: tuple[str, ...] = ()
    group: ClusterState | None = None  # a multi-node model: its Ray cluster, this entry being the head's
    adapters: tuple[str, ...] | None = None  # the LoRA adapters the replica serves (its /v1/models)
    lock: str | None = None  # the host lock's owner line while held ("" when unreadable)
    left_over: int = 0  # processes left in the unit's cgroup though systemd stopped it: an old engine
    http: str | None = None  # how the controller reached it: "direct" or "tunnel" (an SSH port forward)

    @property
    def kv_tokens(self) -> int | None:
        if self.measured_kv_tokens is not None:
            return self.measured_kv_tokens
        capacity = self.metrics.kv_capacity_tokens if self.metrics else None
        return int(capacity) if capacity is not None else None

    @property
    def kv_deviation(self) -> float | None:
        """(measured - planned) / planned; None unless both are known. A V2 engine restarted with a warm
        torch.compile cache is on plan anywhere up to its restart figure."""
        measured = self.kv_tokens
        if measured is None or not self.planned_kv_tokens:
            return None
        ceiling = max(self.planned_kv_tokens, self.restart_kv_tokens or 0)
        if self.planned_kv_tokens <= measured <= ceiling:
            return 0.0
        base = ceiling if measured > ceiling else self.planned_kv_tokens
        return (measured - base) / base

    @property
    def kv_off_plan(self) -> bool:
        deviation = self.kv_deviation
        return deviation is not None and abs(deviation) > KV_DEVIATION_MAX

    @property
    def ok(self) -> bool:
        engine_ok = not self.error and self.service_state == "active" and self.healthy is True
        return engine_ok and (self.group is None or self.group.ray_ok)
