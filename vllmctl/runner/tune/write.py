"""`tune --write`: the winner goes into the model's engine_args, which every host of the model shares, so it
is written only when all of them have what it was measured on (GPU kind, the model's share of them, engine
release); otherwise it is refused before the sweep, naming the hosts that differ."""

from __future__ import annotations

from pathlib import Path

from vllmctl.errors import InputError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Inventory, runs_on_cpu
from vllmctl.planner.inventory_plan import host_gpus
from vllmctl.runner.tune.sweep import TuneRequest, _chosen_host
from vllmctl.status.proposals import Proposal, changed_inventory

SHOWN = 5  # hosts named in a refusal; the rest are counted


def hardware(inventory: Inventory, model: str, host: str) -> str:
    """What the model runs on at this host, as the planner plans it: the GPU kind, the share of the host's
    GPUs it gets (models on one host split them), the engine package and its release (a CPU build has no
    GPU plan: its GPUs, if any, do not count)."""
    spec = inventory.hosts[host]
    deployment = inventory.models[model]
    sharing = sum(1 for m in inventory.models.values() if host in m.host_set)
    engine = deployment.engine or spec.engine
    if runs_on_cpu(inventory, host, model):
        gpus = "a CPU build"
    elif spec.gpus is None:
        gpus = "no GPUs"
    else:
        found = host_gpus(spec, None)
        kind = found[0].name if found else spec.gpus.model
        gpus = f"{spec.gpus.count // max(sharing, 1)} x {kind}"
    return f"{gpus}, {engine.distribution} {engine.version}"


def check_write_scope(inventory: Inventory, model: str, host: str) -> None:
    """Refuses (InputError) when a host of the model differs from the measured one in what plans it."""
    measured = hardware(inventory, model, host)
    differ = {
        other: found
        for other in inventory.models[model].hosts
        if (found := hardware(inventory, model, other)) != measured
    }
    if not differ:
        return
    named = "; ".join(f"{name}: {found}" for name, found in list(differ.items())[:SHOWN])
    more = f" and {len(differ) - SHOWN} more" if len(differ) > SHOWN else ""
    raise InputError(
        f"tune --write: {model}'s engine_args are shared by all its hosts, but the sweep measures {host} "
        f"({measured}) and these differ: {named}{more}; the winner would reach them unmeasured and "
        "unplanned (a tensor-parallel change included)",
        f"give the hosts of each kind their own model entry (models.NAME.hosts) and tune each, or drop "
        f"--write and take the printed diff to {model}'s hosts like {host} yourself",
    )


def write_scope(request: TuneRequest) -> None:
    """The check above for the host the tune would pick, before anything runs."""
    inventory = load_inventory(request.inventory)
    check_write_scope(inventory, request.model, _chosen_host(inventory, request.model, request.host))


def write_tuned(inventory_path: str, out: str, proposal: Proposal) -> None:
    """The inventory with the winner in the model's engine_args, written to `out` (the current writer's
    rendering: YAML comments and anchors are not kept)."""
    Path(out).write_text(changed_inventory(Path(inventory_path).read_text(), [proposal]))
