"""Reads a YAML file into plain data plus the line:column of every key and value.

Rejects what PyYAML lets through: duplicate keys, alias bombs, binary or non-UTF-8 text, empty files.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, NoReturn

import yaml
from yaml.constructor import SafeConstructor

from vllmctl.errors import InvalidInputError, Location, Problem

FieldPath = tuple[str | int, ...]
MAX_NODES = 100_000  # far above any real fleet, far below what an alias bomb expands to
MAX_DEPTH = 64
MAX_BYTES = 8 * 1024 * 1024
MERGE_TAG = "tag:yaml.org,2002:merge"


def render_path(path: FieldPath) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


class VaultValue(str):
    """An Ansible Vault (`!vault`) scalar: kept as its encrypted text, never decrypted or used as a value."""


@dataclass(frozen=True)
class Mark:
    line: int
    column: int


@dataclass
class SourceDoc:
    """One parsed file: its data and where each field path starts (key and value marks)."""

    file: str
    data: Any
    keys: dict[FieldPath, Mark] = field(default_factory=dict)
    values: dict[FieldPath, Mark] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)  # found while reading but not fatal

    def location(self, path: FieldPath, at_key: bool = False) -> Location:
        """The closest known position for a path: the path itself, else its nearest ancestor's key."""
        marks = self.keys if at_key else self.values
        mark = marks.get(path) or self.keys.get(path)
        probe = path
        while mark is None and probe:
            probe = probe[:-1]
            mark = self.keys.get(probe) or self.values.get(probe)
        if mark is None:
            mark = Mark(1, 1)
        return Location(self.file, mark.line, mark.column, render_path(path))


def _mark(yaml_mark: yaml.Mark | None) -> Mark:
    if yaml_mark is None:
        return Mark(1, 1)
    return Mark(yaml_mark.line + 1, yaml_mark.column + 1)


class _Walk:
    """Turns a composed node graph into data, recording marks and stopping runaway alias expansion."""

    def __init__(self, doc: SourceDoc) -> None:
        self.doc = doc
        self.visited = 0
        self.problems: list[Problem] = []
        self.constructor = SafeConstructor()
        self.active: set[int] = set()  # collections being walked, to catch self-referencing aliases

    def problem(self, mark: Mark, path: FieldPath, message: str, hint: str = "") -> None:
        self.problems.append(
            Problem(Location(self.doc.file, mark.line, mark.column, render_path(path)), message, hint)
        )

    def node(self, node: yaml.Node, path: FieldPath) -> Any:
        self.visited += 1
        if self.visited > MAX_NODES:
            raise _TooBig
        self.doc.values.setdefault(path, _mark(node.start_mark))
        if len(path) > MAX_DEPTH:
            self.problem(_mark(node.start_mark), path, f"nested more than {MAX_DEPTH} levels deep")
            return None
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, path)
        if id(node) in self.active:
            self.problem(_mark(node.start_mark), path, "an alias refers to the value that contains it")
            return None
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self.mapping(node, path)
            return [self.node(item, (*path, index)) for index, item in enumerate(node.value)]
        finally:
            self.active.discard(id(node))

    def scalar(self, node: yaml.Node, path: FieldPath) -> Any:
        if node.tag == "!vault":
            return VaultValue(node.value)
        try:
            return self.constructor.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            self.problem(_mark(node.start_mark), path, f"cannot read value: {exc}".splitlines()[0])
            return None

    def mapping(self, node: yaml.MappingNode, path: FieldPath) -> dict[str, Any]:
        result: dict[str, Any] = {}
        explicit: set[str] = set()
        merged: list[dict[str, Any]] = []
        for key_node, value_node in node.value:
            key_mark = _mark(key_node.start_mark)
            if key_node.tag == MERGE_TAG:
                merged.extend(self.merge_sources(value_node, path))
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                self.problem(key_mark, path, "a key must be a plain name, not a list or mapping")
                continue
            key = str(key_node.value)
            if key in explicit:
                first = self.doc.keys[(*path, key)]
                self.problem(
                    key_mark,
                    (*path, key),
                    f"duplicate key '{key}' (first defined at line {first.line})",
                    "YAML keeps only the last one; remove or rename one of them",
                )
                continue
            explicit.add(key)
            self.doc.keys[(*path, key)] = key_mark
            result[key] = self.node(value_node, (*path, key))
        for source in merged:
            for key, value in source.items():
                result.setdefault(key, value)
        return result

    def merge_sources(self, node: yaml.Node, path: FieldPath) -> list[dict[str, Any]]:
        items = node.value if isinstance(node, yaml.SequenceNode) else [node]
        sources = []
        for item in items:
            value = self.node(item, path)
            if isinstance(value, dict):
                sources.append(value)
            else:
                self.problem(_mark(item.start_mark), path, "'<<' merge needs a mapping or a list of mappings")
        return sources


class _TooBig(Exception):
    pass


def _fail(
    file: str, message: str, hint: str = "", line: int | None = None, column: int | None = None
) -> NoReturn:
    raise InvalidInputError([Problem(Location(file, line, column), message, hint)])


def _read_text(file: str) -> str:
    try:
        with open(file, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        _fail(file, "file not found", "check the path; relative paths are read from the current directory")
    except IsADirectoryError:
        _fail(file, "is a directory, not a file", "give the path of the inventory YAML file")
    except OSError as exc:
        _fail(file, f"cannot read file: {exc.strerror}", "check the path and its permissions")
    if len(raw) > MAX_BYTES:
        _fail(
            file, f"file is larger than {MAX_BYTES // (1024 * 1024)} MiB", "an inventory is a small text file"
        )
    if b"\x00" in raw:
        _fail(file, "file is binary (contains NUL bytes)", "give the path of the inventory YAML file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        _fail(file, "file is not valid UTF-8 text", "save the file as UTF-8", line, column)
    if not text.strip() or all(
        not line.strip() or line.lstrip().startswith("#") for line in text.splitlines()
    ):
        _fail(file, "file is empty", "an inventory needs at least `vllmctl: 1` and `hosts:`")
    return text


def _compose(file: str, text: str) -> yaml.Node | None:
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = f"invalid YAML: {exc.problem or exc.context}"
        hint = "check indentation and quoting around this spot"
        if text.lstrip().startswith("[") and "=" in text:
            hint = "Ansible INI inventories are not read; convert with `ansible-inventory -i FILE --list -y`"
        _fail(file, message, hint, *(_position(mark)))
    except yaml.YAMLError as exc:
        _fail(file, f"invalid YAML: {exc}", "check the file's syntax")
    except RecursionError:
        _fail(file, "YAML is nested too deeply", f"an inventory needs at most {MAX_DEPTH} levels")
    return None


def _position(mark: yaml.Mark | None) -> tuple[int | None, int | None]:
    if mark is None:
        return None, None
    return mark.line + 1, mark.column + 1


def read_yaml(path: str | os.PathLike[str]) -> SourceDoc:
    """Parse one YAML file; raise InvalidInputError when it cannot be read at all.

    Problems that leave usable data (a duplicate key: the first one is kept) are in `doc.problems`.
    """
    file = os.fspath(path)
    root = _compose(file, _read_text(file))
    if root is None:
        _fail(file, "file is empty", "an inventory needs at least `vllmctl: 1` and `hosts:`")
    doc = SourceDoc(file, None)
    walk = _Walk(doc)
    try:
        doc.data = walk.node(root, ())
    except _TooBig:
        _fail(
            file,
            f"YAML expands to more than {MAX_NODES} values (aliases that multiply, a 'billion laughs' file?)",
            "use fewer nested aliases (*name); write the repeated parts out or use `defaults:`",
        )
    doc.problems = walk.problems
    if not isinstance(doc.data, dict):
        mark = _mark(root.start_mark)
        kind = "a list" if isinstance(doc.data, list) else "a single value"
        _fail(
            file, f"top level is {kind}, not a mapping", "start with `vllmctl: 1` then `hosts:`", mark.line, 1
        )
    return doc
