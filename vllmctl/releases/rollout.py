"""The rollout policy, pure: when a run that restarts engines may take a host out of service (each model it
serves keeps `min_available` serving replicas elsewhere, and fewer than its `max_unavailable` other hosts
are out), what its wait follows, and when the rollout stops (more failed hosts than `--max-fail` allows)."""

from __future__ import annotations

import re
from collections.abc import Collection, Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

Verdict = Literal["go", "wait", "stop"]
_MAX_FAIL = re.compile(r"(\d+)(%?)")


@dataclass(frozen=True)
class MaxFail:
    """How many failed hosts a rollout tolerates: a count, or a percentage of the rollout's hosts. Past
    it, no further host is taken out of service (Ansible's `max_fail_percentage`)."""

    count: int = 0
    percent: float | None = None

    @classmethod
    def parse(cls, text: str) -> MaxFail:
        """`N` (hosts) or `P%` (of the rollout's hosts); raises ValueError with what is accepted."""
        found = _MAX_FAIL.fullmatch(text.strip())
        if found is None:
            raise ValueError(f"--max-fail {text!r}: give a number of hosts (0, 2) or a percentage (10%)")
        number, percent = int(found[1]), found[2] == "%"
        if percent and number > 100:
            raise ValueError(f"--max-fail {text!r}: a percentage is at most 100%")
        return cls(0, float(number)) if percent else cls(number)

    def exceeded(self, failed: int, total: int) -> bool:
        if self.percent is not None:
            return failed > 0 and 100.0 * failed / max(total, 1) > self.percent
        return failed > self.count

    def __str__(self) -> str:
        return f"{self.percent:g}%" if self.percent is not None else str(self.count)


@dataclass(frozen=True)
class ServingReplica:
    """One engine endpoint of a model: `ref` is the gateway's `backend/server` for a model behind the gateway,
    else its URL; `url` is where its /health answers from a routed controller, `port` its port on the host
    (a tunnel to it is opened only when it is probed)."""

    model: str
    host: str
    ref: str
    url: str = ""
    port: int = 0


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reason: str = ""
    notes: tuple[str, ...] = ()  # said in the report when the host goes (a model with no spare replica)
    # a wait only for hosts this run holds out of service: each is bounded by its own deadlines (its health
    # wait, its gate, --host-timeout) and comes back or fails, so the wait follows them, not a fixed bound
    peers_out: tuple[str, ...] = ()
    counted: tuple[str, ...] = ()  # the models it takes a serving replica from, that other hosts serve


def may_take_out(
    host: str,
    min_available: Mapping[str, int],
    replicas: Sequence[ServingReplica],
    serving: Container[str],
    out: Collection[str],
    max_out: Mapping[str, int] | None = None,
) -> Decision:
    """May `host` stop its engines now? `min_available`: model -> replicas that must keep serving, for the
    models the host serves; `serving`: the refs that serve now; `out`: hosts already out of service.

    A host whose replicas of a model do not serve takes nothing away, so it may go (a first deploy, or a
    broken replica being fixed). A model served only by this host has no spare: its restart is allowed and
    noted. Otherwise fewer than `max_out` (model -> hosts out at once; default 1: one serving host at a time,
    so a failure is counted before the next one is touched) other hosts of the model may be out, and the
    other hosts' serving replicas, not out, must number at least `min_available`. A model whose
    `min_available` is 0 and whose `max_out` is all its hosts asks for nothing: its hosts may all go at once.

    A wait names `peers_out` only when every model that keeps the host waiting waits for hosts in `out`
    (they progress); a model short of serving replicas with none of its hosts out is waited for first."""
    notes: list[str] = []
    counted: list[str] = []
    busy_models: list[tuple[str, list[str], int]] = []
    bounds = max_out or {}
    for model, wanted in sorted(min_available.items()):
        mine = [r for r in replicas if r.model == model and r.host == host]
        others = [r for r in replicas if r.model == model and r.host != host]
        hosts = len({r.host for r in others}) + 1
        if wanted <= 0 and bounds.get(model, hosts) >= hosts:  # no limit: asks nothing, probes nothing
            continue
        if not any(r.ref in serving for r in mine):
            continue
        if not others:
            notes.append(f"{model} is served only by {host}: it does not serve while {host} restarts")
            continue
        counted.append(model)
        busy = sorted({r.host for r in others if r.host in out})
        bound = bounds.get(model, 1)
        if len(busy) >= bound:
            busy_models.append((model, busy, bound))
            continue
        left = 0
        for replica in others:  # `serving` may ask each engine: stop asking once enough serve
            if left >= wanted:
                break
            left += replica.host not in out and replica.ref in serving
        if left < wanted:
            down = [r.ref for r in others if r.ref not in serving]
            return Decision(
                "wait",
                f"{model} would be left with {left} serving replica(s) (min_available {wanted}); "
                f"not serving: {', '.join(down)}",
            )
    if busy_models:
        said = (f"{m}: {', '.join(h)} {_out(h)} of service; {_at_a_time(n)}" for m, h, n in busy_models)
        why = "; ".join(said)
        peers = tuple(sorted({h for _, hosts, _ in busy_models for h in hosts}))
        return Decision("wait", why, peers_out=peers)
    return Decision("go", notes=tuple(notes), counted=tuple(counted))


def _out(hosts: Sequence[str]) -> str:
    return "is out" if len(hosts) == 1 else "are out"


def _at_a_time(bound: int) -> str:
    return "one of its hosts at a time" if bound == 1 else f"{bound} of its hosts at a time (max_unavailable)"


@dataclass
class RolloutLedger:
    """What a rollout has done so far: hosts out of service, hosts that failed and why, and whether it has
    stopped. Mutated only under the runner's lock; every decision is a pure function of it."""

    max_fail: MaxFail
    total: int
    out: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)  # host (or group) -> why

    def fail(self, name: str, why: str) -> None:
        self.failed.setdefault(name, why)

    @property
    def stopped(self) -> str:
        """Why the rollout stopped, or "" while it goes on."""
        if not self.max_fail.exceeded(len(self.failed), self.total):
            return ""
        names = ", ".join(sorted(self.failed))
        count = len(self.failed)
        return f"the rollout stopped: {count} failed ({names}), more than --max-fail {self.max_fail}"
