"""group_vars/ and host_vars/ beside an Ansible inventory, found as Ansible's `host_group_vars` plugin finds
them (NAME, NAME.yml, NAME.yaml or NAME.json, or a folder NAME/ of such files read in sorted order) and read
with vllmctl's own YAML reader, so every value keeps its file, line and column."""

from __future__ import annotations

import os

from vllmctl.errors import InvalidInputError, Location, Problem
from vllmctl.inventory.ansible_tree import Variables, Written
from vllmctl.inventory.positions import SourceDoc
from vllmctl.inventory.source import read_yaml

EXTENSIONS = ("", ".yml", ".yaml", ".json")
VAULT_HEADER = b"$ANSIBLE_VAULT"
MAX_SNIFF = 64 * 1024
VAULT_HINT = (
    "vllmctl never decrypts Ansible Vault: give vllmctl its secrets under `secrets:` ({env} or {file}), "
    "or keep encrypted variables out of the files vllmctl reads"
)


def _only_comments(text: bytes) -> bool:
    lines = (line.strip() for line in text.splitlines())
    return all(not line or line.startswith(b"#") or line in (b"---", b"...") for line in lines)


def _folder_files(folder: str) -> list[str]:
    found: list[str] = []
    for name in sorted(os.listdir(folder)):
        if name.startswith(".") or name.endswith("~"):  # hidden files and editor backups, as Ansible skips
            continue
        path = os.path.join(folder, name)
        extension = os.path.splitext(name)[1]
        if os.path.isdir(path) and not extension:
            found.extend(_folder_files(path))
        elif os.path.isfile(path) and extension in EXTENSIONS:
            found.append(path)
    return found


def vars_files(base: str, kind: str, name: str) -> list[str]:
    """The files Ansible reads for one group or host: the first of NAME, NAME.yml, ... that exists."""
    for extension in EXTENSIONS:
        path = os.path.join(base, kind, name + extension)
        if os.path.isdir(path):
            return _folder_files(path)
        if os.path.isfile(path):
            return [path]
    return []


class VarsFiles:
    """Reads each file once; problems (unreadable YAML, Vault-encrypted files, not a mapping) collect here."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.docs: dict[str, SourceDoc | None] = {}
        self.problems: list[Problem] = []

    def __call__(self, kind: str, name: str) -> list[Variables]:
        if not os.path.isdir(os.path.join(self.base, kind)) or name.startswith(os.sep):
            return []
        layers = []
        for path in vars_files(self.base, kind, name):
            doc = self.read(path)
            if doc is not None:
                layers.append({key: Written(value, doc, (key,)) for key, value in doc.data.items()})
        return layers

    def read(self, path: str) -> SourceDoc | None:
        if path in self.docs:
            return self.docs[path]
        self.docs[path] = None
        try:
            with open(path, "rb") as handle:
                head = handle.read(MAX_SNIFF)
        except OSError as exc:
            self.problems.append(
                Problem(Location(path), f"cannot read file: {exc.strerror}", "check its mode")
            )
            return None
        if len(head) < MAX_SNIFF and _only_comments(head):  # Ansible reads such a file as no variables
            self.docs[path] = SourceDoc(path, {})
            return self.docs[path]
        if head.startswith(VAULT_HEADER):
            message = "file is encrypted with Ansible Vault"
            self.problems.append(Problem(Location(path, 1, 1), message, VAULT_HINT))
            return None
        try:
            doc = read_yaml(path)
        except InvalidInputError as exc:
            self.problems.extend(exc.problems)
            return None
        self.docs[path] = doc
        return doc
