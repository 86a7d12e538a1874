"""Reads an Ansible YAML inventory, already parsed with positions and checked against ansible-schema.json,
into an AnsibleTree the way Ansible's `yaml` inventory plugin reads it, host ranges (`gpu[01:16]`) too."""

from __future__ import annotations

from typing import Any

from vllmctl.errors import Problem
from vllmctl.inventory.ansible_ini import INSTALL_HINT, RANGE, expand_host_range
from vllmctl.inventory.ansible_tree import AnsibleTree, Written
from vllmctl.inventory.positions import FieldPath, SourceDoc


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _group(
    tree: AnsibleTree, doc: SourceDoc, name: str, body: Any, path: FieldPath, parents: tuple[str, ...]
) -> None:
    if name in parents:
        hint = "remove the cycle"
        tree.problems.append(
            Problem(doc.location(path, at_key=True), f"group '{name}' contains itself", hint)
        )
        return
    body = _mapping(body)
    node = tree.group(name)
    for key, value in _mapping(body.get("vars")).items():
        node.vars[key] = Written(value, doc, (*path, "vars", key))
    for pattern, variables in _mapping(body.get("hosts")).items():
        where = (*path, "hosts", pattern)
        for host in _expanded(tree, doc, pattern, where):
            tree.add_host(name, host, doc, where)
            for key, value in _mapping(variables).items():
                tree.hosts[host][key] = Written(value, doc, (*where, key))
    for child, child_body in _mapping(body.get("children")).items():
        tree.add_child(name, child)
        _group(tree, doc, child, child_body, (*path, "children", child), (*parents, name))


def _expanded(tree: AnsibleTree, doc: SourceDoc, pattern: str, where: FieldPath) -> list[str]:
    if not RANGE.search(pattern):
        return [pattern]
    hosts = expand_host_range(pattern)
    if hosts is None:
        message = f"host range '{pattern}' is expanded by ansible-core, which is not installed"
        tree.problems.append(Problem(doc.location(where, at_key=True), message, INSTALL_HINT))
        return []
    if not hosts:
        message = f"host range '{pattern}' is not a range Ansible expands"
        hint = "write it as prefix[START:END] or prefix[START:END:STEP], e.g. gpu[01:16]"
        tree.problems.append(Problem(doc.location(where, at_key=True), message, hint))
    return hosts


def yaml_tree(doc: SourceDoc) -> AnsibleTree:
    """Top-level keys are groups (usually just `all`); a group or host listed twice gathers both."""
    tree = AnsibleTree()
    for name, body in _mapping(doc.data).items():
        _group(tree, doc, name, body, (name,), ())
    return tree
