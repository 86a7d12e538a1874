"""Waves at the edge of a run: `apply --max-unavailable` over every model for one run, and the waves an
`apply --check` would take, from the hosts whose planned steps stop, restart or reboot what serves."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from vllmctl.releases.waves import MaxUnavailable, WavePlan, plan_waves

if TYPE_CHECKING:
    from vllmctl.inventory.model import Inventory
    from vllmctl.runner.core.results import RunResult
    from vllmctl.runner.releases.rollout import RolloutGuard


def with_max_unavailable(inventory: Inventory, bound: MaxUnavailable | None) -> Inventory:
    """The inventory with every model's max_unavailable set to `bound` (None: as written)."""
    if bound is None:
        return inventory
    models = {name: replace(model, max_unavailable=bound) for name, model in inventory.models.items()}
    return replace(inventory, models=models)


def planned_waves(inventory: Inventory, result: RunResult) -> WavePlan:
    """The waves of a checked run, in inventory order: every replica is taken as serving (a check asks no
    engine), and multi-node models restart as group releases after them, so they are not counted."""
    stopping = {
        name
        for name, host in result.hosts.items()
        if any(s.status == "planned" and s.step.stops_engines for s in host.steps)
    }
    single = [m for m in inventory.models.values() if m.cluster is None]
    serves = {host: [m.name for m in single if host in m.host_set] for host in inventory.hosts}
    hosts_of = {m.name: list(m.hosts) for m in single}
    changing = [host for host in inventory.hosts if host in stopping]
    return plan_waves(changing, serves, hosts_of, {m.name: m.limits for m in single})


def ran_waves(guard: RolloutGuard, rolled: dict[str, Any]) -> dict[str, Any]:
    """The rollout as it ran, for the report: its waves, each canary soak's figures and verdict, and the
    canaries a soak found worse, rolled back."""
    soaks = guard.soak.records if guard.soak is not None else []
    return {
        "waves": guard.waves.to_json(),
        **({"soaks": soaks} if soaks else {}),
        **({"canaries_rolled_back": rolled} if rolled else {}),
    }
