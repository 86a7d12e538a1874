"""The used nodes of a multi-node group for one run: one SSH connection each (head first), steps run on
them, and what each node says about its group releases and its group units.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from vllmctl.desired import unit_name
from vllmctl.errors import VllmctlError
from vllmctl.inventory.model import Inventory
from vllmctl.multinode.group_ops import parse_unit_state, unit_state_script
from vllmctl.multinode.group_release import group_listing_command, parse_group_listing
from vllmctl.multinode.units import ray_unit_name
from vllmctl.ops import Step, Upload
from vllmctl.releases import HostReleases
from vllmctl.runner.fleet import fan_out
from vllmctl.transport import SshTransport

T = TypeVar("T")
FORKS = 32


class Nodes:
    """One SSH connection per used node of the group for the whole run, head first."""

    def __init__(self, inv: Inventory, nodes: Sequence[str], timeout_s: float) -> None:
        self.names = tuple(nodes)
        self.transports = {node: SshTransport(inv.hosts[node]) for node in nodes}
        self.timeout_s = timeout_s

    def each(self, work: Callable[[str], T]) -> dict[str, T]:
        """`work` on every node at once; the first node's error is raised after all have answered."""
        done = fan_out(self.names, work, FORKS)
        for answer in done.values():
            if isinstance(answer, VllmctlError):
                raise answer
        return {node: answer for node, answer in done.items() if not isinstance(answer, VllmctlError)}

    def shell(self, node: str, command: str, sudo: bool = True) -> str:
        result = self.transports[node].run(command, sudo=sudo, timeout=self.timeout_s)
        return result.stdout

    def step(self, node: str, step: Step) -> None:
        transport = self.transports[node]
        for action in step.actions:
            if isinstance(action, Upload):
                content, path = action.content.encode(), action.path
                result = transport.put(
                    content, path, action.mode, action.owner, action.group, timeout=self.timeout_s
                )
            else:
                result = transport.run(action.render(), sudo=action.sudo, timeout=self.timeout_s)
            if not result.ok:
                raise VllmctlError(
                    f"{node}: `{action.render()}` failed (exit {result.exited})",
                    f"stderr: {(result.stderr or result.stdout).strip()[-500:] or '(none)'}",
                )

    def close(self) -> None:
        for transport in self.transports.values():
            transport.close()


def read_states(nodes: Nodes, group: str) -> dict[str, HostReleases]:
    command = group_listing_command(group)
    return nodes.each(lambda node: parse_group_listing(nodes.shell(node, command), node, group))


def read_units(
    nodes: Nodes, units: Mapping[str, Sequence[str]]
) -> dict[str, dict[str, tuple[str, str | None]]]:
    return nodes.each(lambda node: parse_unit_state(nodes.shell(node, unit_state_script(units[node]))))


def group_units(group: str, model: str, nodes: Sequence[str]) -> dict[str, list[str]]:
    """The units a group's node may carry: its Ray unit; on the head also the engine unit."""
    return {
        node: [ray_unit_name(group), *([unit_name(model, 0)] if i == 0 else [])]
        for i, node in enumerate(nodes)
    }
