"""Imports hosts and groups from an Ansible YAML inventory into vllmctl's host settings.

Connection variables map onto `ssh`; other non-`ansible_` variables become host `vars`. Each imported host
is checked against the native host schema, located in the Ansible file; the semantic checks that follow treat
imported and native settings alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllmctl.errors import Problem
from vllmctl.inventory.origins import Origins
from vllmctl.inventory.positions import FieldPath, SourceDoc, VaultValue
from vllmctl.inventory.schema import schema_problems, value_problems

NATIVE_TOP_KEYS = {
    "vllmctl",
    "hosts",
    "groups",
    "models",
    "defaults",
    "secrets",
    "releases",
    "ansible_inventory",
}
SKIPPED_GROUPS = {"all", "ungrouped"}  # implicit in Ansible; vllmctl groups are always explicit
ADDRESS_VARS = ("ansible_host", "ansible_ssh_host")
USER_VARS = ("ansible_user", "ansible_ssh_user")
PORT_VARS = ("ansible_port", "ansible_ssh_port")
KEY_VARS = ("ansible_ssh_private_key_file", "ansible_private_key_file")
READ_VARS = {*ADDRESS_VARS, *USER_VARS, *PORT_VARS, *KEY_VARS, "ansible_become"}


def ignored_var(key: str) -> bool:
    """Ansible's own variables that vllmctl does not read (passwords, interpreters, ...)."""
    return key.startswith("ansible_") and key not in READ_VARS


def looks_like_ansible(data: dict[str, Any]) -> bool:
    """True when a file has none of vllmctl's top-level keys: then it is read as an Ansible inventory."""
    return not (set(data) & NATIVE_TOP_KEYS)


@dataclass
class AnsibleImport:
    """Hosts as partial native host settings, groups as flat member lists, where each setting was written
    in the Ansible file, and the problems found."""

    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    origins: dict[str, Origins] = field(default_factory=dict)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


class _Importer:
    def __init__(self, doc: SourceDoc) -> None:
        self.doc = doc
        self.result = AnsibleImport()
        self.host_vars: dict[str, list[tuple[int, FieldPath, dict[str, Any]]]] = {}
        self.anchors: dict[str, FieldPath] = {}  # where each host is first listed

    def group(self, name: str, body: Any, path: FieldPath, depth: int, parents: tuple[str, ...]) -> list[str]:
        """Walk one group; return all its hosts (its own and its children's)."""
        body = _mapping(body)
        if name in parents:
            self.result.problems.append(
                Problem(
                    self.doc.location(path, at_key=True),
                    f"group '{name}' contains itself",
                    "remove the cycle",
                )
            )
            return []
        members: list[str] = []
        group_vars = _mapping(body.get("vars"))
        for host, host_vars in _mapping(body.get("hosts")).items():
            members.append(host)
            self.anchors.setdefault(host, (*path, "hosts", host))
            entries = self.host_vars.setdefault(host, [])
            if group_vars:
                entries.append((depth, (*path, "vars"), group_vars))
            entries.append((1000, (*path, "hosts", host), _mapping(host_vars)))
        for child, child_body in _mapping(body.get("children")).items():
            child_members = self.group(
                child, child_body, (*path, "children", child), depth + 1, (*parents, name)
            )
            members.extend(child_members)
            if group_vars:
                for host in child_members:
                    self.host_vars.setdefault(host, []).append((depth, (*path, "vars"), group_vars))
        if name not in SKIPPED_GROUPS:
            known = self.result.groups.setdefault(name, [])
            known.extend(member for member in members if member not in known)
        return members

    def host(self, name: str) -> tuple[dict[str, Any], Origins]:
        merged: dict[str, Any] = {}
        origin: dict[str, FieldPath] = {}
        for _, path, variables in sorted(self.host_vars[name], key=lambda entry: entry[0]):
            for key, value in variables.items():
                merged[key] = value
                origin[key] = (*path, key)
        settings: dict[str, Any] = {}
        ssh: dict[str, Any] = {}
        origins = Origins({(): (self.doc, self.anchors[name])}, ("hosts", name))
        for key, value in merged.items():
            target: FieldPath = ()
            if key in ADDRESS_VARS:
                settings["address"], target = value, ("address",)
            elif key in USER_VARS:
                ssh["user"], target = value, ("ssh", "user")
            elif key in KEY_VARS:
                ssh["identity_file"], target = value, ("ssh", "identity_file")
            elif key in PORT_VARS:
                # Ansible takes the port as text too
                number = (
                    int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else value
                )
                ssh["port"], target = number, ("ssh", "port")
            elif key == "ansible_become" and isinstance(value, bool):
                ssh["sudo"], target = value, ("ssh", "sudo")
            elif not key.startswith("ansible_") and not isinstance(value, VaultValue):
                settings.setdefault("vars", {})[key] = value
                target = ("vars", key)
            if target:
                origins.set(target, self.doc, origin[key])
        if ssh:
            settings["ssh"] = ssh
        return settings, origins


def import_ansible(doc: SourceDoc) -> AnsibleImport:
    """Read an Ansible YAML inventory already parsed into doc; problems point into that file."""
    problems = schema_problems(doc, "ansible-schema.json")
    importer = _Importer(doc)
    for name, body in _mapping(doc.data).items():
        importer.group(name, body, (name,), 0, ())
    for name in importer.host_vars:
        settings, origins = importer.host(name)
        importer.result.hosts[name] = settings
        importer.result.origins[name] = origins
        # the same schema a native host entry meets, each problem at the Ansible variable that set it
        problems.extend(value_problems(settings, "host", origins))
    importer.result.problems[:0] = problems
    return importer.result
