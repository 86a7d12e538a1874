"""An Ansible inventory as plain data, whichever format it was written in: groups with their own hosts,
children and variables, hosts with theirs, each variable with where it was written; and Ansible's variable
precedence over it (https://docs.ansible.com/ansible/latest/playbook_guide/playbooks_variables.html)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vllmctl.errors import Problem
from vllmctl.inventory.positions import FieldPath, SourceDoc


@dataclass(frozen=True)
class Written:
    """One variable's value and where it was written (a file and the path to it there)."""

    value: Any
    doc: SourceDoc
    path: FieldPath


Variables = dict[str, Written]


@dataclass
class GroupNode:
    hosts: list[str] = field(default_factory=list)  # its own hosts, not its children's
    children: list[str] = field(default_factory=list)
    vars: Variables = field(default_factory=dict)


@dataclass
class AnsibleTree:
    """What an inventory file declares; `anchors` is where each host is first listed (`group_anchors`, each
    group, where the reader knows it)."""

    groups: dict[str, GroupNode] = field(default_factory=lambda: {"all": GroupNode()})
    hosts: dict[str, Variables] = field(default_factory=dict)
    anchors: dict[str, tuple[SourceDoc, FieldPath]] = field(default_factory=dict)
    group_anchors: dict[str, tuple[SourceDoc, FieldPath]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def group(self, name: str) -> GroupNode:
        return self.groups.setdefault(name, GroupNode())

    def add_host(self, group: str, host: str, doc: SourceDoc, path: FieldPath) -> None:
        self.hosts.setdefault(host, {})
        self.anchors.setdefault(host, (doc, path))
        members = self.group(group).hosts
        if host not in members:
            members.append(host)

    def add_child(self, parent: str, child: str) -> None:
        self.group(child)
        children = self.group(parent).children
        if child not in children:
            children.append(child)


def reconcile(tree: AnsibleTree) -> None:
    """What Ansible's InventoryData.reconcile_inventory does: groups nobody contains become children of
    `all`, and a host in no group but `all` is in `ungrouped` (and only such hosts are)."""
    contained = {child for node in tree.groups.values() for child in node.children}
    ungrouped = tree.group("ungrouped")
    for name in list(tree.groups):
        if name != "all" and name not in contained:
            tree.add_child("all", name)
    named = [node for name, node in tree.groups.items() if name not in ("all", "ungrouped")]
    in_groups = {host for node in named for host in node.hosts}
    ungrouped.hosts = [host for host in tree.hosts if host not in in_groups]


def depths(tree: AnsibleTree) -> dict[str, int]:
    """Each group's depth as Ansible counts it: the longest chain of parents up to `all`."""
    found = {"all": 0}
    pending = ["all"]
    while pending:
        name = pending.pop()
        for child in tree.groups[name].children:
            if found.get(child, -1) < found[name] + 1 and found[name] < len(tree.groups):
                found[child] = found[name] + 1
                pending.append(child)
    return found


def host_groups(tree: AnsibleTree) -> dict[str, set[str]]:
    """Every group each host is in, directly or through children (`all` included)."""
    member: dict[str, set[str]] = {host: set() for host in tree.hosts}

    def visit(name: str, trail: tuple[str, ...]) -> set[str]:
        node = tree.groups[name]
        hosts = set(node.hosts)
        for child in node.children:
            if child not in trail:  # a cycle is reported by the reader that found it
                hosts |= visit(child, (*trail, child))
        for host in hosts:
            member[host].add(name)
        return hosts

    visit("all", ("all",))
    return member


def _own(node: GroupNode) -> Variables:
    # Ansible keeps ansible_group_priority as the group's priority, not as a variable
    return {key: value for key, value in node.vars.items() if key != "ansible_group_priority"}


def priority(node: GroupNode) -> int:
    found = node.vars.get("ansible_group_priority")
    value = found.value if found is not None else 1
    return int(value) if isinstance(value, int | str) and str(value).lstrip("-").isdigit() else 1


VarsFiles = Callable[[str, str], list[Variables]]  # ("group_vars" or "host_vars", name) -> files' variables


def layered(tree: AnsibleTree, files: VarsFiles) -> dict[str, Variables]:
    """Each host's variables with Ansible's precedence, lowest first: the inventory's `all` vars, the other
    groups' inventory vars, group_vars/all, group_vars/GROUP, the host's inventory vars, host_vars/HOST.
    Groups go in Ansible's order: shallower first, then by ansible_group_priority, then by name."""
    depth = depths(tree)
    result: dict[str, Variables] = {}
    for host, groups in host_groups(tree).items():
        ordered = sorted(
            (name for name in groups if name != "all"),
            key=lambda name: (depth.get(name, 0), priority(tree.groups[name]), name),
        )
        layers = [_own(tree.groups["all"]), *(_own(tree.groups[name]) for name in ordered)]
        layers += files("group_vars", "all")
        for name in ordered:
            layers += files("group_vars", name)
        layers += [tree.hosts[host], *files("host_vars", host)]
        merged: Variables = {}
        for layer in layers:
            merged.update(layer)
        result[host] = merged
    return result
