"""Imports hosts and groups from an Ansible inventory (YAML, or INI through ansible-core) with the
group_vars/ and host_vars/ beside it into vllmctl's host settings, with Ansible's variable precedence.

Connection variables map onto `ssh`; other non-`ansible_` variables become host `vars`. Each imported host
is checked against the native host schema, located at the Ansible variable that set each value; the
semantic checks that follow treat imported and native settings alike.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from vllmctl.errors import InvalidInputError, Location, Problem
from vllmctl.inventory.ansible_ini import ini_tree
from vllmctl.inventory.ansible_tree import AnsibleTree, Variables, Written, layered, reconcile
from vllmctl.inventory.ansible_vars import VAULT_HINT, VarsFiles
from vllmctl.inventory.ansible_yaml import yaml_tree
from vllmctl.inventory.origins import Origins
from vllmctl.inventory.positions import FieldPath, SourceDoc, VaultValue
from vllmctl.inventory.scan import scan_strings
from vllmctl.inventory.schema import ansible_schema, schema_problems, value_problems
from vllmctl.inventory.source import read_text, read_yaml
from vllmctl.inventory.ssh_args import SshArgsProblem, jump_host

NATIVE_TOP_KEYS = {
    "vllmctl",
    "hosts",
    "groups",
    "models",
    "defaults",
    "secrets",
    "releases",
    "staging",
    "ansible_inventory",
}
SKIPPED_GROUPS = {"all", "ungrouped"}  # implicit in Ansible; vllmctl groups are always explicit
ADDRESS_VARS = ("ansible_host", "ansible_ssh_host")
USER_VARS = ("ansible_user", "ansible_ssh_user")
PORT_VARS = ("ansible_port", "ansible_ssh_port")
KEY_VARS = ("ansible_ssh_private_key_file", "ansible_private_key_file")
READ_VARS = {*ADDRESS_VARS, *USER_VARS, *PORT_VARS, *KEY_VARS, "ansible_become", "ansible_ssh_common_args"}


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


YAML_EXTENSIONS = (".yml", ".yaml", ".json")
TRUE_WORDS = {"y", "yes", "on", "1", "true", "t"}  # Ansible's boolean(), as it reads ansible_become
FALSE_WORDS = {"n", "no", "off", "0", "false", "f"}
VAULT_PREFIX = "$ANSIBLE_VAULT"
TEMPLATE_HINT = "vllmctl does not evaluate Ansible's templates: write the value itself"


def ansible_format(path: str) -> str:
    """How Ansible picks a reader: "yaml" for .yml/.yaml/.json, "either" (YAML, else INI) without an
    extension, "ini" for anything else."""
    extension = os.path.splitext(path)[1].lower()
    return "yaml" if extension in YAML_EXTENSIONS else "either" if not extension else "ini"


@dataclass
class AnsibleVariables:
    """An Ansible inventory read with its group_vars/ and host_vars/: its tree, each host's variables after
    Ansible's precedence, every file read (for scanning) and the problems found."""

    tree: AnsibleTree
    hosts: dict[str, Variables]
    docs: list[SourceDoc]
    problems: list[Problem]


def read_ansible(file: str, doc: SourceDoc | None = None) -> AnsibleVariables:
    """`doc` is the inventory already read as YAML; without it the file is INI, read through ansible-core."""
    problems: list[Problem] = []
    if doc is not None:
        problems.extend(schema_problems(doc, "ansible-schema.json"))
        tree = yaml_tree(doc)
        problems.extend(_name_problems(file, tree))
    else:
        text = read_text(file)
        if text.startswith(VAULT_PREFIX):
            raise InvalidInputError(
                [Problem(Location(file, 1, 1), "file is encrypted with Ansible Vault", VAULT_HINT)]
            )
        tree = ini_tree(file, text)
        problems.extend(_name_problems(file, tree))
    reconcile(tree)
    files = VarsFiles(os.path.dirname(file))
    hosts = layered(tree, files)
    docs = [*(written[0] for written in tree.anchors.values()), *(d for d in files.docs.values() if d)]
    unique = list({id(found): found for found in ([doc] if doc is not None else []) + docs}.values())
    return AnsibleVariables(tree, hosts, unique, [*problems, *tree.problems, *files.problems])


def _name_problems(file: str, tree: AnsibleTree) -> list[Problem]:
    """Host and group names (INI ones, and YAML hosts expanded from a range) meet the rule ansible-schema.json
    holds YAML names to: they become vllmctl names."""
    rule = ansible_schema()["$defs"]["name"]
    found = []
    for kind, anchors, names in (
        ("host", tree.anchors, list(tree.hosts)),
        ("group", tree.group_anchors, list(tree.groups)),
    ):
        for name in names:
            if not re.match(rule["pattern"], name):
                doc, path = anchors.get(name) or (None, ())
                where = doc.location(path, at_key=True) if doc else Location(file)
                message = f"{kind} name '{name}' is not a name vllmctl accepts"
                found.append(Problem(where, message, rule["x-message"]))
    return found


def _members(tree: AnsibleTree, name: str, trail: tuple[str, ...]) -> list[str]:
    node = tree.groups[name]
    found = list(node.hosts)
    for child in node.children:
        if child not in trail:
            found.extend(host for host in _members(tree, child, (*trail, child)) if host not in found)
    return found


def _boolean(value: Any) -> Any:
    if isinstance(value, str) and value.lower() in TRUE_WORDS | FALSE_WORDS:
        return value.lower() in TRUE_WORDS
    return value


def _vault(value: Any) -> bool:
    return isinstance(value, VaultValue) or (isinstance(value, str) and value.startswith(VAULT_PREFIX))


def _setting(key: str, written: Written) -> tuple[tuple[str, ...], Any]:
    """The native setting an Ansible variable becomes, and its value; () for one vllmctl does not read."""
    value = written.value
    # INI types `ansible_host=10` as a number; Ansible turns such values back into text where it uses them
    text = str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
    if key in ADDRESS_VARS:
        return ("address",), text
    if key in USER_VARS:
        return ("ssh", "user"), text
    if key in KEY_VARS:
        return ("ssh", "identity_file"), text
    if key in PORT_VARS:  # Ansible takes the port as text too
        number = value.isascii() and value.isdigit() if isinstance(value, str) else False
        return ("ssh", "port"), int(value) if number else value
    if key == "ansible_become":
        return ("ssh", "sudo"), _boolean(value)
    if key == "ansible_ssh_common_args":  # other types are the schema's to report
        return ("ssh", "jump_host"), jump_host(value) if isinstance(value, str) else value
    if not key.startswith("ansible_"):
        return ("vars", key), value
    return (), None


def _host(
    name: str, variables: Variables, anchor: tuple[SourceDoc, FieldPath]
) -> tuple[dict[str, Any], Origins, list[Problem]]:
    settings: dict[str, Any] = {}
    origins = Origins({(): anchor}, ("hosts", name))
    problems: list[Problem] = []
    for key, written in variables.items():
        where = written.doc.location(written.path)
        if _vault(written.value) and not ignored_var(key):
            problems.append(Problem(where, f"'{key}' is encrypted with Ansible Vault", VAULT_HINT))
            continue
        if isinstance(written.value, str) and "{{" in written.value and key in READ_VARS:
            problems.append(Problem(where, f"'{key}' is a Jinja template", TEMPLATE_HINT))
            continue
        try:
            target, value = _setting(key, written)
        except SshArgsProblem as problem:
            problems.append(Problem(where, problem.message, problem.hint))
            continue
        if not target or (target == ("ssh", "jump_host") and value is None):
            continue
        section = settings.setdefault(target[0], {}) if len(target) == 2 else settings
        section[target[-1]] = value
        origins.set(target, written.doc, written.path)
    return settings, origins, problems


def import_ansible(file: str, doc: SourceDoc | None = None) -> AnsibleImport:
    """Read an Ansible inventory (YAML already parsed into `doc`, else INI) and the group_vars/ and
    host_vars/ beside it; problems point into the file and line that set each value."""
    read = read_ansible(file, doc)
    result = AnsibleImport(problems=list(read.problems))
    for found in read.docs:
        result.problems.extend(scan_strings(found, ignored_var, vault_ok=True))
        result.problems.extend(found.problems)
    for name in read.tree.groups:
        if name not in SKIPPED_GROUPS:
            result.groups[name] = _members(read.tree, name, (name,))
    for name, variables in read.hosts.items():
        settings, origins, problems = _host(name, variables, read.tree.anchors[name])
        result.hosts[name], result.origins[name] = settings, origins
        result.problems.extend(problems)
        # the same schema a native host entry meets, each problem at the Ansible variable that set it
        result.problems.extend(value_problems(settings, "host", origins))
    result.problems = list(dict.fromkeys(result.problems))  # a group's variable is met once per host
    return result


def _yaml_like(text: str) -> bool:
    """Whether the first line that says something is a YAML key or `---` (INI's is a section or a host)."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith(("#", ";")):
            return stripped == "---" or re.match(r"^[\w.-]+\s*:(\s|$)", stripped) is not None
    return False


def yaml_document(file: str) -> SourceDoc | None:
    """The file as YAML, or None when Ansible would read it as INI. A .yml/.yaml/.json file, or a file
    without an extension whose text looks like YAML, must be YAML: its YAML problems are raised."""
    kind = ansible_format(file)
    try:
        return read_yaml(file)
    except InvalidInputError:
        if kind == "yaml" or (kind == "either" and _yaml_like(read_text(file))):
            raise
        return None


def load_ansible_file(file: str, doc: SourceDoc | None) -> AnsibleImport:
    """An Ansible inventory, given what yaml_document made of it: YAML, or INI as Ansible would pick."""
    return import_ansible(file, doc if doc is not None and ansible_format(file) != "ini" else None)
