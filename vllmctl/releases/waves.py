"""Rollout waves, pure: how many hosts of a model may be out at once (`max_unavailable`), the canary that
goes alone first, and the waves a rollout of given hosts takes when each wave comes back before the next."""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

_AMOUNT = re.compile(r"(\d+)(%?)")


@dataclass(frozen=True)
class MaxUnavailable:
    """Hosts of a model that may be out of service at once: a count, or a percentage of its hosts."""

    count: int = 1
    percent: float | None = None

    @classmethod
    def parse(cls, text: str | int) -> MaxUnavailable:
        """`N` (hosts, at least 1) or `P%` (of the model's hosts, 1–100); raises ValueError saying so."""
        found = _AMOUNT.fullmatch(str(text).strip())
        if found is None:
            raise ValueError(f"max_unavailable {text!r}: give a number of hosts (1, 2) or a percentage (25%)")
        number, percent = int(found[1]), found[2] == "%"
        if percent and not 1 <= number <= 100:
            raise ValueError(f"max_unavailable {text!r}: a percentage is from 1% to 100%")
        if not percent and number < 1:
            raise ValueError(f"max_unavailable {text!r}: at least 1 host, or the rollout never moves")
        return cls(0, float(number)) if percent else cls(number)

    def hosts(self, total: int) -> int:
        """Of `total` hosts, how many: a percentage rounds down, but never below 1."""
        if self.percent is None:
            return self.count
        return max(1, math.floor(total * self.percent / 100.0))

    def __str__(self) -> str:
        return f"{self.percent:g}%" if self.percent is not None else str(self.count)


@dataclass(frozen=True)
class RolloutLimits:
    """One model's rollout: `min_available` replicas keep serving, at most `max_unavailable` of its hosts
    are out (None: 1, or all of them where min_available is 0), its first `canary` hosts go alone, then
    serve `soak_s` seconds, no worse than their peers within the two bounds, before the next host goes."""

    min_available: int = 1
    max_unavailable: MaxUnavailable | None = None
    canary: int = 1
    soak_s: float = 0.0
    max_error_rate: float = 0.01  # the canary's error rate over its soak may exceed its peers' by this much
    max_latency_ratio: float = 1.5  # and its average session time may be this many times theirs
    # a canary the inventory asked for stops its model when it fails; the implicit one (no `canary` given)
    # only goes first, and its failure counts against --max-fail as any host's does
    canary_holds: bool = True

    def max_out(self, hosts: int) -> int:
        """How many of the model's `hosts` may be out of service at once."""
        if self.max_unavailable is None:
            return max(hosts, 1) if self.min_available <= 0 else 1
        return self.max_unavailable.hosts(hosts)


@dataclass(frozen=True)
class Wave:
    hosts: tuple[str, ...]
    canary: bool = False  # each model's first hosts, alone: the next wave waits for them and their soak

    def to_json(self) -> dict[str, object]:
        return {"hosts": list(self.hosts), "canary": self.canary}


@dataclass(frozen=True)
class WavePlan:
    waves: tuple[Wave, ...] = ()
    held: dict[str, str] = field(default_factory=dict)  # host -> why it cannot go in any wave

    def to_json(self) -> dict[str, object]:
        return {"waves": [w.to_json() for w in self.waves], "held": dict(self.held)}


def budget(
    model: str,
    limits: RolloutLimits,
    hosts: Sequence[str],
    out: Collection[str],
    down: Collection[str],
) -> tuple[int, str]:
    """How many serving hosts of `model` one wave may take out, and why no more: `max_unavailable` less its
    hosts already out, and no more than leaves `min_available` serving. A lone host may always go."""
    if len(hosts) <= 1:
        return 1, ""
    already = sum(h in out for h in hosts)
    serving = sum(h not in out and h not in down for h in hosts)
    most = limits.max_out(len(hosts))
    by_bound, by_floor = most - already, serving - max(limits.min_available, 0)
    if by_bound <= by_floor:
        return by_bound, f"{model}: {already} of its hosts out, max_unavailable {most}"
    return by_floor, f"{model}: {serving} serving, min_available {limits.min_available}"


def plan_waves(
    changing: Sequence[str],
    serves: Mapping[str, Sequence[str]],
    hosts_of: Mapping[str, Sequence[str]],
    limits: Mapping[str, RolloutLimits],
    out: Collection[str] = (),
    down: Collection[str] = (),
) -> WavePlan:
    """The waves that take `changing` hosts (in order) out of service, each wave back before the next:
    `serves` host -> models, `hosts_of` model -> all its hosts, `out` hosts already out of service (another
    run's), `down` hosts whose replicas do not serve (they take nothing away: a first wave of their own).

    Wave 1 is the canary: of each model, its first `canary` serving changing hosts, alone. Then each wave
    takes hosts in order while every model each one serves allows one more; a host no wave can take
    (a model short of min_available) is `held`."""
    free = [h for h in changing if h in down]
    rest = [h for h in changing if h not in down]
    room: dict[str, int] = {}
    why_full: dict[str, str] = {}
    for model, hosts in hosts_of.items():
        room[model], why_full[model] = budget(model, limits.get(model, RolloutLimits()), hosts, out, down)
    waves: list[Wave] = []
    canaries = _canaries(rest, serves, limits, room)
    if canaries:
        waves.append(Wave(tuple(canaries), canary=True))
    held: dict[str, str] = {}
    for host in rest:
        if host in canaries:
            continue
        short = [why_full[m] for m in serves.get(host, ()) if room.get(m, 1) <= 0]
        if short:
            held[host] = "; ".join(short)
    left = [h for h in rest if h not in canaries and h not in held]
    while left:
        taken: dict[str, int] = {}
        wave: list[str] = []
        for host in left:
            models = serves.get(host, ())
            if all(taken.get(m, 0) < room.get(m, 1) for m in models):
                wave.append(host)
                for model in models:
                    taken[model] = taken.get(model, 0) + 1
        waves.append(Wave(tuple(wave)))
        left = [h for h in left if h not in wave]
    if free:
        waves.insert(0, Wave(tuple(free)))
    return WavePlan(tuple(waves), held)


def _canaries(
    rest: Sequence[str],
    serves: Mapping[str, Sequence[str]],
    limits: Mapping[str, RolloutLimits],
    room: Mapping[str, int],
) -> list[str]:
    """The canary wave: hosts in order while some model they serve still wants a canary, and every model
    they serve has a canary slot and room left (a host serving two models counts for both)."""
    slots = {m: min(limits.get(m, RolloutLimits()).canary, room.get(m, 1)) for m in room}
    chosen: list[str] = []
    for host in rest:
        models = serves.get(host, ())
        if not any(slots.get(m, 0) > 0 for m in models):
            continue
        if all(slots.get(m, 0) > 0 for m in models):
            chosen.append(host)
            for model in models:
                slots[model] -= 1
    return chosen
