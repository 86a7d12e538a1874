"""What the semantic checks share: hosts merged with their origins, groups and model hosts resolved, and the
Checker that collects problems at their file positions (the checks themselves are functions over it)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Protocol

from vllmctl.engine_flags import KNOWN_FLAGS
from vllmctl.errors import Location, Problem
from vllmctl.inventory.ansible import AnsibleImport
from vllmctl.inventory.origins import MERGED_SECTIONS, Origins
from vllmctl.inventory.positions import FieldPath, SourceDoc
from vllmctl.inventory.schema import did_you_mean


def mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def group_members(raw: Any) -> list[Any]:
    """A group's member names: the list itself, or the `hosts:` of a group written as a mapping."""
    members = raw.get("hosts") if isinstance(raw, dict) else raw
    return members if isinstance(members, list) else []


class ControllerFiles(Protocol):
    """The controller's filesystem as the checks see it (LocalFiles in controller.py; fakes in tests)."""

    uid: int

    def expand(self, path: str) -> str: ...
    def stat(self, path: str) -> os.stat_result | None: ...
    def realpath(self, path: str) -> str: ...


@dataclass
class Resolved:
    """Hosts with defaults merged in (plain dicts), and groups flattened to host names."""

    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    model_hosts: dict[str, tuple[str, ...]] = field(default_factory=dict)
    model_clusters: dict[str, str] = field(default_factory=dict)  # model -> the multi_node group it names
    gateway_hosts: tuple[str, ...] = ()
    origins: dict[str, Origins] = field(
        default_factory=dict
    )  # host -> where each of its settings was written


def merge_host(name: str, defaults: dict[str, Any], *layers: dict[str, Any]) -> dict[str, Any]:
    """Defaults, then each layer on top; sections merge key by key, other fields are replaced."""
    merged: dict[str, Any] = {"address": name, "gpus": defaults.get("gpus")}
    for section in MERGED_SECTIONS:
        merged[section] = dict(mapping(defaults.get(section)))
    for layer in layers:
        for key, value in layer.items():
            if key in MERGED_SECTIONS:
                merged[key].update(mapping(value))
            else:
                merged[key] = value
    return merged


class Checker:
    """Runs every semantic check over one inventory; `files` (the controller's filesystem) is given only
    when the caller wants the controller's keys, secret files and model folders checked too."""

    def __init__(self, doc: SourceDoc, imported: AnsibleImport, files: ControllerFiles | None = None) -> None:
        self.doc = doc
        self.data = mapping(doc.data)
        self.imported = imported
        self.files = files
        self.problems: list[Problem] = []
        self._reported: set[Problem] = set()
        self.resolved = Resolved()
        self._engines: dict[tuple[str, int, int], list[str]] = {}
        self._models_per_host: dict[str, list[str]] | None = None

    def add(self, path: FieldPath, message: str, hint: str, at_key: bool = False) -> None:
        self.add_at(self.doc.location(path, at_key), message, hint)

    def add_at(self, location: Location, message: str, hint: str) -> None:
        problem = Problem(location, message, hint)
        if problem not in self._reported:  # nested groups, and defaults, are met once per host that uses them
            self._reported.add(problem)
            self.problems.append(problem)

    def where(self, host: str, path: FieldPath, at_key: bool = False) -> Location:
        """Where a merged host's setting was written: defaults, the host entry or an Ansible variable."""
        return self.resolved.origins[host].location(path, at_key)

    def merge_hosts(self) -> None:
        defaults = mapping(self.data.get("defaults"))
        native = {name: mapping(body) for name, body in mapping(self.data.get("hosts")).items()}
        for name in [*self.imported.hosts, *(n for n in native if n not in self.imported.hosts)]:
            layers = [self.imported.hosts.get(name, {}), native.get(name, {})]
            self.resolved.hosts[name] = merge_host(name, defaults, *layers)
            origins = Origins(native=("hosts", name))
            origins.record(self.doc, ("defaults",), defaults)
            if name in self.imported.origins:
                origins.update(self.imported.origins[name])
            if name in native:
                origins.entries[()] = (self.doc, ("hosts", name))
                origins.record(self.doc, ("hosts", name), native[name])
            self.resolved.origins[name] = origins

    def resolve_groups(self) -> None:
        native = mapping(self.data.get("groups"))
        for name in native:
            if name in self.resolved.hosts:
                self.add(("groups", name), f"group '{name}' has the same name as a host", "rename one", True)
            elif name in self.imported.groups:
                hint = "rename the group here, or drop it and use the Ansible one"
                self.add(
                    ("groups", name), f"group '{name}' is also defined by the Ansible inventory", hint, True
                )
        groups: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in self.imported.groups.items()}
        for name in native:
            groups[name] = self.expand_group(name, native, ())
            cycle = find_cycle(name, native)
            if cycle:
                message = f"group '{name}' includes itself: {' → '.join(cycle)}"
                self.add(("groups", name), message, "remove one of the group references", True)
        self.resolved.groups = {k: v for k, v in groups.items() if k not in self.resolved.hosts}

    def expand_group(self, name: str, native: dict[str, Any], seen: tuple[str, ...]) -> tuple[str, ...]:
        members: list[str] = []
        raw = native.get(name)
        for index, member in enumerate(group_members(raw)):
            if not isinstance(member, str):
                continue
            path = ("groups", name, "hosts", index) if isinstance(raw, dict) else ("groups", name, index)
            if member in self.resolved.hosts:
                found: tuple[str, ...] = (member,)
            elif member in native:
                if member in seen or member == name:
                    continue  # a cycle, reported once per group by find_cycle
                found = self.expand_group(member, native, (*seen, name))
            elif member in self.imported.groups:
                found = tuple(self.imported.groups[member])
            else:
                choices = {*self.resolved.hosts, *native, *self.imported.groups}
                self.add(
                    path, f"unknown host or group '{member}'", did_you_mean(member, choices) or "define it"
                )
                continue
            members.extend(found)
        return tuple(dict.fromkeys(members))  # each once, in first-named order (linear, for 10,000 hosts)

    def model_hosts(self, name: str, model: dict[str, Any]) -> tuple[str, ...]:
        selectors = model.get("hosts")
        items = (
            [selectors] if isinstance(selectors, str) else selectors if isinstance(selectors, list) else None
        )
        if items is None:
            return ()
        hosts: list[str] = []
        for index, selector in enumerate(items):
            path: FieldPath = (
                ("models", name, "hosts", index) if isinstance(selectors, list) else ("models", name, "hosts")
            )
            if not isinstance(selector, str):
                continue
            if selector in self.resolved.hosts:
                found: tuple[str, ...] = (selector,)
            elif selector in self.resolved.groups:
                found = self.resolved.groups[selector]
            else:
                choices = {*self.resolved.hosts, *self.resolved.groups}
                self.add(
                    path,
                    f"unknown host or group '{selector}'",
                    did_you_mean(selector, choices) or "define it",
                )
                continue
            hosts.extend(found)
        hosts = list(dict.fromkeys(hosts))
        if not hosts and not any(p.location.path.startswith(f"models.{name}.hosts") for p in self.problems):
            self.add(
                ("models", name, "hosts"), f"model '{name}' resolves to no hosts", "add hosts to the group"
            )
        return tuple(hosts)

    def engines_for(self, name: str, model: dict[str, Any]) -> list[str]:
        # asked once per host by some checks: each answer walks the model's hosts, so it is kept
        hosts = self.resolved.model_hosts.get(name, ())
        key = (name, id(model), id(hosts))
        if key not in self._engines:
            self._engines[key] = self._engines_of(model, hosts)
        return self._engines[key]

    def _engines_of(self, model: dict[str, Any], hosts: tuple[str, ...]) -> list[str]:
        override = mapping(model.get("engine")).get("name")
        if isinstance(override, str):
            return [override] if override in KNOWN_FLAGS else []
        names = {str(self.resolved.hosts[host]["engine"].get("name", "vllm")) for host in hosts}
        if not hosts:
            names = {str(mapping(mapping(self.data.get("defaults")).get("engine")).get("name", "vllm"))}
        return sorted(names & set(KNOWN_FLAGS))

    def models_of(self, host: str) -> list[str]:
        """The models the host serves, in inventory order (kept: asked once per host by several checks)."""
        if self._models_per_host is None:
            served: dict[str, list[str]] = {}
            for model, hosts in self.resolved.model_hosts.items():
                for each in dict.fromkeys(hosts):
                    served.setdefault(each, []).append(model)
            self._models_per_host = served
        return self._models_per_host.get(host, [])


def find_cycle(start: str, native: dict[str, Any]) -> list[str] | None:
    """The group names on a path from start back to itself, if there is one."""
    stack: list[tuple[str, list[str]]] = [(start, [start])]
    visited: set[str] = set()
    while stack:
        name, trail = stack.pop()
        for member in group_members(native.get(name)):
            if member == start:
                return [*trail, start]
            if isinstance(member, str) and member in native and member not in visited:
                visited.add(member)
                stack.append((member, [*trail, member]))
    return None
