"""Group releases for `vllmctl history` and `vllmctl rollback`, pure: one row per group release across the
used nodes (status, where it exists, which pointers every node agrees on), and which groups a host
selection rolls back as a whole.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllmctl.errors import InputError
from vllmctl.inventory.model import Inventory
from vllmctl.releases.host import HostReleases

# A release's group status: the worst any used node says, so "good" means good on every node.
_WORST_FIRST = ("failed", "incomplete", "pending", "missing")


@dataclass(frozen=True)
class GroupNodes:
    """A multi-node model's group as planned: its used nodes (head first) and its spare hosts."""

    group: str
    model: str
    nodes: tuple[str, ...]
    spare: tuple[str, ...] = ()


def _pointer_marks(pointer: str, release: str, targets: Mapping[str, str | None]) -> list[str]:
    on = [node for node, target in targets.items() if target == release]
    if not on:
        return []
    return [pointer] if len(on) == len(targets) else [f"{pointer} on {', '.join(on)}"]


def group_history_rows(nodes: Sequence[str], states: Mapping[str, HostReleases]) -> list[dict[str, Any]]:
    """Oldest first, one row per group release found on any reachable node: its status over the nodes, the
    nodes it exists on (missing on a node counts against it), and the pointers, with the nodes that hold
    one when they disagree. Unreachable nodes (absent from `states`) are left out of the comparison."""
    asked = [node for node in nodes if node in states]
    ids = sorted({r.id for node in asked for r in states[node].releases})
    rows = []
    for release in ids:
        found = {node: states[node].get(release) for node in asked}
        statuses = {node: r.status if r is not None else "missing" for node, r in found.items()}
        status = next((s for s in _WORST_FIRST if s in statuses.values()), "good")
        first = next((r for r in found.values() if r is not None and r.manifest is not None), None)
        manifest = first.manifest if first is not None else None
        verdict = next((r.verdict for r in found.values() if r is not None and r.verdict), None) or {}
        current = {node: states[node].current for node in asked}
        known_good = {node: states[node].known_good for node in asked}
        rows.append(
            {
                "id": release,
                "status": status,
                "statuses": statuses,
                "on": [node for node, r in found.items() if r is not None],
                "pointers": _pointer_marks("current", release, current)
                + _pointer_marks("known-good", release, known_good),
                "created_at": manifest.created_at if manifest else None,
                "created_by": manifest.created_by if manifest else None,
                "engine": f"{manifest.engine} {manifest.engine_version}" if manifest else None,
                "reasons": list(verdict.get("reasons", [])),
            }
        )
    return rows


def multi_node_only(inv: Inventory, host: str) -> bool:
    """The host serves models, and every one of them is a multi-node model: its releases are its groups'."""
    served = [model for model in inv.models.values() if host in model.host_set]
    return bool(served) and all(model.cluster is not None for model in served)


@dataclass(frozen=True)
class GroupSelection:
    groups: tuple[GroupNodes, ...] = ()  # rolled back as a whole: every used node is selected
    covered: dict[str, str] = field(default_factory=dict)  # host -> why it gets no per-host rollback


def select_groups(inv: Inventory, groups: Sequence[GroupNodes], selected: Sequence[str]) -> GroupSelection:
    """Groups whose used nodes are all selected; a selection with only part of them is refused (a group
    release is rolled back on every node at once). Hosts serving only multi-node models are covered by
    their group, so the per-host rollback leaves them alone."""
    chosen, covered = [], {}
    for found in groups:
        picked = [node for node in found.nodes if node in selected]
        if picked and len(picked) < len(found.nodes):
            left = [node for node in found.nodes if node not in picked]
            raise InputError(
                f"--limit selects {', '.join(picked)} but not {', '.join(left)} of group '{found.group}': "
                f"a multi-node group is rolled back as a whole, on all its nodes ({', '.join(found.nodes)})",
                f"select the whole group: --limit {found.group}",
            )
        if picked:
            chosen.append(found)
        for host in selected:
            if host in found.nodes and multi_node_only(inv, host):
                covered[host] = f"rolled back with group '{found.group}' ({found.model})"
            elif host in found.spare and multi_node_only(inv, host):
                covered[host] = f"a spare host of group '{found.group}': no release to roll back"
    return GroupSelection(tuple(chosen), covered)
