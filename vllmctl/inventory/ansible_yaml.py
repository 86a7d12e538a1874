"""Reads an Ansible YAML inventory, already parsed with positions and checked against ansible-schema.json,
into an AnsibleTree the way Ansible's `yaml` inventory plugin reads it."""

from __future__ import annotations

from typing import Any

from vllmctl.errors import Problem
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
    for host, variables in _mapping(body.get("hosts")).items():
        tree.add_host(name, host, doc, (*path, "hosts", host))
        for key, value in _mapping(variables).items():
            tree.hosts[host][key] = Written(value, doc, (*path, "hosts", host, key))
    for child, child_body in _mapping(body.get("children")).items():
        tree.add_child(name, child)
        _group(tree, doc, child, child_body, (*path, "children", child), (*parents, name))


def yaml_tree(doc: SourceDoc) -> AnsibleTree:
    """Top-level keys are groups (usually just `all`); a group or host listed twice gathers both."""
    tree = AnsibleTree()
    for name, body in _mapping(doc.data).items():
        _group(tree, doc, name, body, (name,), ())
    return tree
