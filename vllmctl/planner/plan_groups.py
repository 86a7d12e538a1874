"""Hosts whose plan for a model is the same, shown once: a 10,000-host fleet's `plan` is a page per distinct
plan, not 10,000 copies of one table."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import replace

from vllmctl.planner.inventory_plan import HostModelPlan

LISTED_HOSTS = 3


def same_plan_groups(
    entries: Iterable[HostModelPlan], extra: Sequence[Hashable] | None = None
) -> list[tuple[HostModelPlan, tuple[str, ...]]]:
    """Each distinct (model, plan) once, in first-seen order, with every host it covers; `extra[i]` (e.g. a
    CPU engine's plan) must match too."""
    groups: dict[Hashable, tuple[HostModelPlan, list[str]]] = {}
    # the planner mostly hands hosts with the same (model, GPUs, engine) one plan object: each object's
    # repr is taken once, so 10,000 hosts sharing one plan cost one repr
    shown: dict[int, str] = {}
    for index, entry in enumerate(entries):
        if id(entry.plan) not in shown:
            shown[id(entry.plan)] = repr(entry.plan)
        plan = shown[id(entry.plan)]
        key = (plan, replace(entry, host="", plan=None), extra[index] if extra is not None else None)
        groups.setdefault(key, (entry, []))[1].append(entry.host)
    return [(entry, tuple(hosts)) for entry, hosts in groups.values()]


def hosts_label(hosts: Sequence[str]) -> str:
    """`a`, `a, b, c`, or `a, b, …, z (1,000 hosts)`."""
    if len(hosts) <= LISTED_HOSTS:
        return ", ".join(hosts)
    return f"{hosts[0]}, {hosts[1]}, …, {hosts[-1]} ({len(hosts):,} hosts)"
