"""A running rollout's canaries and waves, pure (times are passed in): which hosts went first for each model,
whether the others may follow (canaries back, passed and soaked), and the waves as they happened."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from vllmctl.releases.waves import RolloutLimits

NO_CANARY = RolloutLimits(canary=0)  # a model the rollout was given no limits for
WORSE = "worse than its peers over its soak: "


@dataclass(frozen=True)
class CanaryVerdict:
    verdict: Literal["go", "wait", "stop"]
    reason: str = ""
    canary_of: tuple[str, ...] = ()  # the models it goes for as a canary


@dataclass
class Canaries:
    """Per model, its first `canary` hosts to go out; the rest of its hosts follow once every canary is back,
    passed its release, and served `soak_s` seconds. A failed canary stops the model's rollout."""

    limits: Mapping[str, RolloutLimits]
    chosen: dict[str, list[str]] = field(default_factory=dict)  # model -> its canary hosts, in order
    back: dict[str, float] = field(default_factory=dict)  # canary host -> when it was back, passed
    failed: dict[str, str] = field(default_factory=dict)  # canary host -> why it failed
    judged: dict[str, str] = field(default_factory=dict)  # model -> why its soaked canary was worse, or ""

    def verdict(self, models: Iterable[str], out: Collection[str], now: float) -> CanaryVerdict:
        """May a host go now for `models` (those it takes a serving replica from)? As a canary where a model
        still has a canary slot, else once the model's canaries are back and soaked."""
        mine: list[str] = []
        for model in sorted(models):
            limits = self.limits.get(model, NO_CANARY)
            wanted = limits.canary
            chosen = self.chosen.get(model, [])
            bad = [h for h in chosen if h in self.failed]
            if bad and limits.canary_holds:
                why = f"{model}: its canary {bad[0]} failed ({self.failed[bad[0]]}); its rollout stopped"
                return CanaryVerdict("stop", why)
            if len(chosen) < wanted:
                mine.append(model)
                continue
            waiting = [h for h in chosen if h in out or (h not in self.back and h not in self.failed)]
            if waiting:
                return CanaryVerdict("wait", f"{model}: its canary {', '.join(waiting)} goes first, alone")
            soak = limits.soak_s
            left = max((self.back[h] for h in chosen if h in self.back), default=now - soak) + soak - now
            if left > 0:
                why = f"{model}: its canary {', '.join(chosen)} soaks {soak:g} s ({left:.0f} s left)"
                return CanaryVerdict("wait", why)
        return CanaryVerdict("go", canary_of=tuple(mine))

    @property
    def worse(self) -> list[str]:
        """The canaries their soak found worse than their peers."""
        return sorted(h for h, why in self.failed.items() if why.startswith(WORSE))

    def soaked(self, model: str, now: float) -> bool:
        """Its canaries all went, came back passed and served their soak (a soak of 0 is not judged)."""
        limits = self.limits.get(model, NO_CANARY)
        chosen = self.chosen.get(model, [])
        if limits.soak_s <= 0 or len(chosen) < limits.canary or not all(h in self.back for h in chosen):
            return False
        return now >= max(self.back[h] for h in chosen) + limits.soak_s

    def reject(self, model: str, why: str) -> None:
        """Its soak found the canaries worse than their peers: they count as failed from now on."""
        self.judged[model] = why
        for host in self.chosen.get(model, []) if why else ():
            self.failed.setdefault(host, f"{WORSE}{why}")

    def took(self, host: str, canary_of: Iterable[str]) -> None:
        for model in canary_of:
            self.chosen.setdefault(model, []).append(host)

    def returned(self, host: str, failure: str, now: float) -> None:
        if not any(host in hosts for hosts in self.chosen.values()):
            return
        if failure:
            self.failed[host] = failure
        else:
            self.back[host] = now


@dataclass
class WaveLog:
    """The waves as they ran: a host taken out while the open wave has none of its hosts back yet joins
    it; otherwise it starts the next wave. A wave ends when its last host is back."""

    waves: list[dict[str, Any]] = field(default_factory=list)

    def out(self, host: str, canary_of: Iterable[str], now: float) -> None:
        canary = sorted(canary_of)
        last = self.waves[-1] if self.waves else None
        joins = last is not None and not last["back"] and bool(last["canary"]) == bool(canary)
        if last is None or not joins:
            last = {"hosts": [], "canary": [], "start": now, "end": None, "back": []}
            self.waves.append(last)
        last["hosts"].append(host)
        last["canary"] = sorted({*last["canary"], *canary})

    def returned(self, host: str, now: float) -> None:
        for wave in self.waves:
            if host in wave["hosts"] and host not in wave["back"]:
                wave["back"].append(host)
                if len(wave["back"]) == len(wave["hosts"]):
                    wave["end"] = now
                return

    def to_json(self) -> list[dict[str, Any]]:
        """Each wave's hosts, the models it was the canary of, its start and end (epoch seconds)."""
        keys = ("hosts", "canary", "start", "end")
        return [{key: wave[key] for key in keys} for wave in self.waves]


def max_out(limits: Mapping[str, RolloutLimits], hosts_of: Mapping[str, Collection[str]]) -> dict[str, int]:
    """Model -> how many of its hosts may be out of service at once."""
    return {m: limits.get(m, RolloutLimits()).max_out(len(hosts)) for m, hosts in hosts_of.items()}
