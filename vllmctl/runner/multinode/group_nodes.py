"""The used nodes of a multi-node group for one run: one connection each (head first, SSH unless the caller
passes another `connect`), vllmctl's host lock on every node for runs that change them, steps run on them,
and what each node says about its group releases and its group units.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import TypeVar

from vllmctl.catalog.loader import load_arch
from vllmctl.errors import VllmctlError
from vllmctl.inventory.model import Host, Inventory
from vllmctl.multinode.group_ops import (
    EngineEnv,
    engine_env_record,
    env_state_script,
    parse_env_state,
    parse_unit_state,
    unit_state_script,
)
from vllmctl.multinode.plan import plan_cluster
from vllmctl.multinode.units import ray_unit_name
from vllmctl.ops import Command, Step
from vllmctl.releases.group import group_listing_command, parse_group_listing
from vllmctl.releases.group_history import GroupNodes
from vllmctl.releases.host import HostReleases
from vllmctl.runner.core.remote import Remote, SshRemote, finish_script
from vllmctl.runner.fleet.hosts import fan_out
from vllmctl.tasks.desired import env_path, unit_name
from vllmctl.transport import Result, SshTransport
from vllmctl.transport.tunnel import base_url

T = TypeVar("T")
FORKS = 32
Connect = Callable[[Host], Remote]


def ssh_node(host: Host) -> Remote:
    return SshRemote(SshTransport(host))


class Nodes:
    """One connection per used node of the group for the whole run, head first.

    With `lock_owner`, the host lock (the one apply and rollback take) is taken on every node before
    anything else and released on close; a node locked by someone else stops the run, changing nothing."""

    def __init__(
        self,
        inv: Inventory,
        nodes: Sequence[str],
        timeout_s: float,
        lock_owner: str | None = None,
        break_lock: bool = False,
        connect: Connect = ssh_node,
    ) -> None:
        self.names = tuple(nodes)
        self.hosts = {node: inv.hosts[node] for node in nodes}
        self.remotes = {node: connect(inv.hosts[node]) for node in nodes}
        self.timeout_s = timeout_s
        self.locked: tuple[str, ...] = ()
        if lock_owner is not None:
            self._lock(lock_owner, break_lock)

    def url_of(self, node: str) -> Callable[[int], str]:
        """A port of `node` -> the base URL the controller reaches it at (direct or tunnelled)."""
        return partial(base_url, self.hosts[node])

    def _lock(self, owner: str, break_lock: bool) -> None:
        def take(node: str) -> str:
            # as apply's: a stale lock is broken there, with a line in the node's audit log
            self.remotes[node].begin({}, owner, break_lock, self.timeout_s)
            return node

        done = fan_out(self.names, take, FORKS)
        self.locked = tuple(node for node, answer in done.items() if answer == node)
        refused = [answer for answer in done.values() if isinstance(answer, VllmctlError)]
        if refused:  # give back what was taken: the run does not start on part of the group
            self.close()
            raise refused[0]

    def each(self, work: Callable[[str], T]) -> dict[str, T]:
        """`work` on every node at once; the first node's error is raised after all have answered."""
        done = fan_out(self.names, work, FORKS)
        for answer in done.values():
            if isinstance(answer, VllmctlError):
                raise answer
        return {node: answer for node, answer in done.items() if not isinstance(answer, VllmctlError)}

    def shell(self, node: str, command: str, sudo: bool = True) -> str:
        return self.remotes[node].execute(Command(shell=command, sudo=sudo), self.timeout_s).stdout

    def run(self, node: str, argv: Sequence[str], timeout_s: float) -> Result:
        return self.remotes[node].execute(Command(argv=tuple(argv), sudo=False), timeout_s)

    def step(self, node: str, step: Step) -> None:
        for action in step.actions:
            result = self.remotes[node].execute(action, self.timeout_s)
            if not result.ok:
                raise replace(result, host=node).error(f"`{action.render()}`")

    def close(self) -> None:
        """Releases the lock where it was taken (every node at once), then closes the connections."""
        release = Command(shell=finish_script(release_lock=True, audit=False))
        fan_out(self.locked, lambda node: self.remotes[node].execute(release, 60), FORKS)
        self.locked = ()
        for remote in self.remotes.values():
            remote.close()


def read_states(nodes: Nodes, group: str) -> dict[str, HostReleases]:
    command = group_listing_command(group)
    return nodes.each(lambda node: parse_group_listing(nodes.shell(node, command), node, group))


def read_units(
    nodes: Nodes, units: Mapping[str, Sequence[str]]
) -> dict[str, dict[str, tuple[str, str | None]]]:
    return nodes.each(lambda node: parse_unit_state(nodes.shell(node, unit_state_script(units[node]))))


def read_engine_env(nodes: Nodes, group: str, model: str) -> EngineEnv:
    """The head's env file for `model` now and as the group's engine last started with it."""
    script = env_state_script(env_path(model), engine_env_record(group))
    return parse_env_state(nodes.shell(nodes.names[0], script))


def group_units(group: str, model: str, nodes: Sequence[str]) -> dict[str, list[str]]:
    """The units a group's node may carry: its Ray unit and the engine unit (launcher ray: on the head only;
    launcher vllm: on every node). Both are read everywhere, so a change of launcher removes the other's."""
    return {node: [ray_unit_name(group), unit_name(model, 0)] for node in nodes}


def multi_node_groups(inv: Inventory) -> tuple[list[GroupNodes], dict[str, VllmctlError]]:
    """Every multi-node model's group planned offline (as `status` does), or why it could not be planned."""
    found: list[GroupNodes] = []
    failed: dict[str, VllmctlError] = {}
    for model in inv.models.values():
        if model.cluster is None:
            continue
        try:
            arch = load_arch(model.source, model.revision, online=False)
            plan = plan_cluster(inv, model, model.cluster, None, arch)
        except VllmctlError as exc:
            failed[model.name] = exc
            continue
        found.append(GroupNodes(model.cluster.group, model.name, plan.hosts, plan.spare))
    return found, failed


def read_group_listings(
    inv: Inventory, nodes: Sequence[str], group: str, timeout_s: float, connect: Connect = ssh_node
) -> dict[str, HostReleases | VllmctlError]:
    """Each node's group releases, one round trip per node, no lock; an unreachable node is its error."""
    command = Command(shell=group_listing_command(group))

    def listing(node: str) -> HostReleases:
        remote = connect(inv.hosts[node])
        try:
            result = remote.execute(command, timeout_s)
            if not result.ok:
                raise replace(result, host=node).error("listing group releases")
            return parse_group_listing(result.stdout, node, group)
        finally:
            remote.close()

    return fan_out(tuple(nodes), listing, FORKS)
