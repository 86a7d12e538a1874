"""Reads an Ansible INI inventory with ansible-core's own `ini` plugin (the optional extra vllmctl[ansible]):
sections, `:children`, `:vars`, host ranges and value types exactly as Ansible reads them, each variable
located at its line; host ranges in YAML inventories expanded the same way. The only module that imports
ansible."""

from __future__ import annotations

import os
import re
from typing import Any

from vllmctl.errors import InvalidInputError, Location, Problem
from vllmctl.inventory.ansible_tree import AnsibleTree, Written
from vllmctl.inventory.positions import FieldPath, Mark, SourceDoc

INSTALL_HINT = (
    "install the extra that reads them: pip install 'vllmctl[ansible]' (ansible-core 2.19 or later)"
)
MAGIC_VARS = {"inventory_file", "inventory_dir"}  # set by Ansible itself; ansible-inventory leaves them out


RANGE = re.compile(r"\[[^\]]*:[^\]]*\]")


def expand_host_range(pattern: str) -> list[str] | None:
    """`gpu[01:16]` as Ansible expands it (ansible.plugins.inventory); None when ansible-core is missing."""
    try:
        from ansible.errors import AnsibleError
        from ansible.plugins.inventory import expand_hostname_range
    except ImportError:
        return None
    try:
        return list(expand_hostname_range(pattern))
    except (AnsibleError, ValueError):
        return []


def _fail(file: str, message: str, hint: str, line: int | None = None) -> InvalidInputError:
    return InvalidInputError([Problem(Location(file, line, 1 if line else None), message, hint)])


class _Located:
    """The INI file as a SourceDoc: group vars under `[GROUP:vars]`, host vars under the host's name, each
    key and value at its line and column."""

    def __init__(self, file: str, lines: list[str]) -> None:
        self.lines = lines
        self.doc = SourceDoc(file, {})

    def place(self, path: FieldPath, line: int | None, key: str | None = None) -> None:
        """Mark `path` at its line: at `key=` (the value just after `=`), else at the key or name itself,
        else at the line's first character."""
        text = self.lines[line - 1] if line and line <= len(self.lines) else ""
        indent = len(text) - len(text.lstrip())
        key_at = value_at = indent
        if key:
            assigned = re.search(rf"(?<![\w.-]){re.escape(key)}\s*=\s*", text)
            named = text.find(key)
            key_at = assigned.start() if assigned else named if named >= 0 else indent
            value_at = assigned.end() if assigned else key_at
        self.doc.keys[path] = Mark(line or 1, key_at + 1)
        self.doc.values[path] = Mark(line or 1, value_at + 1)

    def variable(self, scope: str, key: str, value: Any, line: int | None) -> Written:
        self.doc.data.setdefault(scope, {})[key] = value
        self.place((scope, key), line, key)
        return Written(value, self.doc, (scope, key))


def _plain(value: Any) -> Any:
    """ansible-core's tagged str/int/list/dict as the plain Python values the rest of vllmctl reads."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return str(value)


def ini_tree(file: str, text: str) -> AnsibleTree:
    """Parse with ansible-core; raise InvalidInputError at the failing line, or naming the extra to install
    when ansible-core is missing."""
    try:
        from ansible._internal._datatag._tags import Origin
        from ansible._internal._display_utils import DeferredWarningContext
        from ansible.errors import AnsibleError
        from ansible.inventory.data import InventoryData
        from ansible.parsing.dataloader import DataLoader
        from ansible.plugins.loader import inventory_loader
    except ImportError:
        raise _fail(file, "reading an Ansible INI inventory needs ansible-core", INSTALL_HINT) from None
    located = _Located(file, text.splitlines())
    data = InventoryData()
    plugin = inventory_loader.get("ini")
    first_lines: dict[str, int | None] = {}
    add_host = data.add_host

    def add_noting_line(host: str, group: str | None = None, port: int | None = None) -> str:
        first_lines.setdefault(str(host), _line_now(plugin))
        return str(add_host(host, group, port))

    data.add_host = add_noting_line
    add_group = data.add_group

    def add_group_noting_line(group: str) -> str:
        first_lines.setdefault(f"[{group}]", _line_now(plugin))
        return str(add_group(group))

    data.add_group = add_group_noting_line
    parse_lines = plugin._parse
    failed_at: list[int | None] = []

    def parse_noting_failure(lines: list[str]) -> None:
        try:
            parse_lines(lines)
        except Exception:
            failed_at.append(_line_now(plugin))  # parse() forgets the line before it reports
            raise

    plugin._parse = parse_noting_failure
    try:
        # Ansible's warnings (e.g. on '-' in group names, which vllmctl accepts) would print past the console
        with DeferredWarningContext(variables={}):
            plugin.parse(data, DataLoader(), os.path.abspath(file), cache=False)
    except AnsibleError as exc:
        cause = exc.__cause__
        message = str(getattr(cause, "message", None) or cause or exc.message)
        hint = (
            "fix this line; see https://docs.ansible.com/ansible/latest/inventory_guide/intro_inventory.html"
        )
        raise _fail(file, f"invalid Ansible INI inventory: {message}", hint, *failed_at[:1]) from None
    return _tree(data, located, first_lines, Origin)


def _line_now(plugin: Any) -> int | None:
    """The line the ini plugin is reading (it keeps it in its private `_origin`; None if that changes)."""
    line = getattr(getattr(plugin, "_origin", None), "line_num", None)
    return line if isinstance(line, int) else None


def _line(origin: Any, *values: Any) -> int | None:
    for value in values:
        found = origin.get_tag(value)
        if found is not None and found.line_num:
            return int(found.line_num)
    return None


def _tree(data: Any, located: _Located, first_lines: dict[str, int | None], origin: Any) -> AnsibleTree:
    tree = AnsibleTree()
    for name, host in data.hosts.items():
        line = first_lines.get(name)
        tree.hosts[name] = {}
        tree.anchors[name] = (located.doc, (name,))
        located.place((name,), line)
        for key, value in host.vars.items():
            if key not in MAGIC_VARS:
                written_at = _line(origin, key, value) or line
                tree.hosts[name][str(key)] = located.variable(name, str(key), _plain(value), written_at)
    for name, group in data.groups.items():
        node = tree.group(name)
        node.hosts = [host.name for host in group.hosts]
        node.children = [child.name for child in group.child_groups]
        scope = f"[{name}:vars]"
        if f"[{name}]" in first_lines:
            located.place((f"[{name}]",), first_lines[f"[{name}]"], name)
            tree.group_anchors[name] = (located.doc, (f"[{name}]",))
        for key, value in group.vars.items():
            if key not in MAGIC_VARS:  # a group named like a host gets that host's (Ansible's own quirk)
                node.vars[str(key)] = located.variable(
                    scope, str(key), _plain(value), _line(origin, key, value)
                )
        if group.priority != 1:
            node.vars["ansible_group_priority"] = Written(group.priority, located.doc, (scope,))
    return tree
