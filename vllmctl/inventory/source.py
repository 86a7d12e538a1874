"""Reads a YAML file into plain data plus the line:column of every key and value.

Rejects what PyYAML lets through: duplicate keys, alias bombs, tags on collections, binary or non-UTF-8
text, empty files.
"""

from __future__ import annotations

import os
from typing import Any, NoReturn

import yaml
from yaml.constructor import SafeConstructor

from vllmctl.errors import InvalidInputError, Location, Problem
from vllmctl.inventory.positions import FieldPath, Mark, SourceDoc, VaultValue, escape_text, render_path

MAX_NODES = 100_000  # far above any real fleet, far below what an alias bomb expands to
MAX_DEPTH = 64
MAX_BYTES = 8 * 1024 * 1024
CORE_PREFIX = "tag:yaml.org,2002:"
MERGE_TAG = CORE_PREFIX + "merge"
# the tags a plain mapping and list get; others (!!python/tuple, !!set, !custom) would be dropped silently
COLLECTION_TAGS: dict[type[yaml.Node], str] = {
    yaml.MappingNode: "tag:yaml.org,2002:map",
    yaml.SequenceNode: "tag:yaml.org,2002:seq",
}
AliasKey = tuple[int, int | str]  # (id of the containing node, item index or id of the mapping key node)


def _mark(yaml_mark: yaml.Mark | None) -> Mark:
    if yaml_mark is None:
        return Mark(1, 1)
    return Mark(yaml_mark.line + 1, yaml_mark.column + 1)


class _Loader(yaml.SafeLoader):
    """The safe loader, remembering where each alias (*name) is used. Composing resolves an alias to its
    anchor's node; without this, an alias bomb could be reported only at an anchor, not at the use."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.alias_uses: dict[AliasKey, tuple[str, Mark]] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if parent is not None and self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            where = index if isinstance(index, int) else id(index) if index is not None else "key"
            self.alias_uses[(id(parent), where)] = (str(event.anchor), _mark(event.start_mark))
        return super().compose_node(parent, index)


class _TooBig(Exception):
    def __init__(self, mark: Mark, path: FieldPath, alias: str | None) -> None:
        super().__init__(alias)
        self.mark, self.path, self.alias = mark, path, alias


class _Walk:
    """Turns a composed node graph into data, recording marks and stopping runaway alias expansion."""

    def __init__(self, doc: SourceDoc, alias_uses: dict[AliasKey, tuple[str, Mark]]) -> None:
        self.doc = doc
        self.visited = 0
        self.problems: list[Problem] = []
        self.constructor = SafeConstructor()
        self.active: set[int] = set()  # collections being walked, to catch self-referencing aliases
        self.alias_uses = alias_uses
        self.expanding: tuple[str, Mark, FieldPath] | None = None  # the outermost alias being expanded

    def child(self, parent: yaml.Node, where: int | str, node: yaml.Node, path: FieldPath) -> Any:
        """Walk one item of `parent`; when it is an alias use, that use is where an expansion is charged."""
        use = self.alias_uses.get((id(parent), where))
        if use is None or self.expanding is not None:
            return self.node(node, path)
        self.expanding = (*use, path)
        try:
            return self.node(node, path)
        finally:
            self.expanding = None

    def problem(self, mark: Mark, path: FieldPath, message: str, hint: str = "") -> None:
        self.problems.append(
            Problem(Location(self.doc.file, mark.line, mark.column, render_path(path)), message, hint)
        )

    def node(self, node: yaml.Node, path: FieldPath) -> Any:
        self.visited += 1
        if self.visited > MAX_NODES:
            if self.expanding is None:
                raise _TooBig(_mark(node.start_mark), path, None)
            anchor, mark, where = self.expanding
            raise _TooBig(mark, where, anchor)
        self.doc.values.setdefault(path, _mark(node.start_mark))
        if len(path) > MAX_DEPTH:
            self.problem(_mark(node.start_mark), path, f"nested more than {MAX_DEPTH} levels deep")
            return None
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, path)
        if node.tag != COLLECTION_TAGS.get(type(node)):
            kind = "mapping" if isinstance(node, yaml.MappingNode) else "list"
            self.problem(
                _mark(node.start_mark),
                path,
                f"unsupported YAML tag {escape_text(node.tag.replace(CORE_PREFIX, '!!'))} on a {kind}",
                "remove the tag: an inventory holds plain mappings, lists and scalars",
            )
            return None
        if id(node) in self.active:
            self.problem(_mark(node.start_mark), path, "an alias refers to the value that contains it")
            return None
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self.mapping(node, path)
            return [self.child(node, index, item, (*path, index)) for index, item in enumerate(node.value)]
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
                merged.extend(self.merge_sources(node, key_node, value_node, path))
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
            result[key] = self.child(node, id(key_node), value_node, (*path, key))
        for source in merged:
            for key, value in source.items():
                result.setdefault(key, value)
        return result

    def merge_sources(
        self, parent: yaml.Node, key_node: yaml.Node, node: yaml.Node, path: FieldPath
    ) -> list[dict[str, Any]]:
        items: list[tuple[yaml.Node, int | str, yaml.Node]] = [(parent, id(key_node), node)]
        if isinstance(node, yaml.SequenceNode) and (id(parent), id(key_node)) not in self.alias_uses:
            items = [(node, index, item) for index, item in enumerate(node.value)]
        sources = []
        for container, where, item in items:
            value = self.child(container, where, item, path)
            if isinstance(value, dict):
                sources.append(value)
            else:
                self.problem(_mark(item.start_mark), path, "'<<' merge needs a mapping or a list of mappings")
        return sources


def _fail(
    file: str, message: str, hint: str = "", line: int | None = None, column: int | None = None
) -> NoReturn:
    raise InvalidInputError([Problem(Location(file, line, column), message, hint)])


def read_text(file: str) -> str:
    """The file as text, refused when missing, binary, not UTF-8, too large or empty."""
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


def _libyaml_compose(text: str) -> tuple[bool, yaml.Node | None]:
    """(True, the node graph) from libyaml, several times faster than PyYAML's Python composer on a
    10,000-host inventory; (False, None) where the Python composer must do it: aliases (their uses are
    located only there), nesting past MAX_DEPTH (libyaml's composer recurses in C and would crash the
    process), or any error (worded as PyYAML words it). The events are checked first, without recursion."""
    if not getattr(yaml, "__with_libyaml__", False):
        return False, None
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.CSafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    return False, None
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            elif isinstance(event, yaml.AliasEvent):
                return False, None
        node: yaml.Node | None = yaml.compose(text, Loader=yaml.CSafeLoader)
    except yaml.YAMLError:
        return False, None
    return True, node


def _compose(file: str, text: str) -> tuple[yaml.Node | None, dict[AliasKey, tuple[str, Mark]]]:
    composed, root = _libyaml_compose(text)
    if composed:
        return root, {}
    loader = None
    try:
        loader = _Loader(text)
        return loader.get_single_node(), loader.alias_uses
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = f"invalid YAML: {exc.problem or exc.context}"
        hint = "check indentation and quoting around this spot"
        if text.lstrip().startswith("[") and "=" in text:
            hint = (
                "an Ansible INI inventory is read from a file not named .yml, .yaml or .json (e.g. hosts.ini)"
            )
        _fail(file, message, hint, *(_position(mark)))
    except yaml.YAMLError as exc:
        _fail(file, f"invalid YAML: {exc}", "check the file's syntax")
    except RecursionError:
        _fail(file, "YAML is nested too deeply", f"an inventory needs at most {MAX_DEPTH} levels")
    finally:
        if loader is not None:
            loader.dispose()


def _position(mark: yaml.Mark | None) -> tuple[int | None, int | None]:
    if mark is None:
        return None, None
    return mark.line + 1, mark.column + 1


def read_yaml(path: str | os.PathLike[str]) -> SourceDoc:
    """Parse one YAML file; raise InvalidInputError when it cannot be read at all.

    Problems that leave usable data (a duplicate key: the first one is kept) are in `doc.problems`.
    """
    file = os.fspath(path)
    root, alias_uses = _compose(file, read_text(file))
    if root is None:
        _fail(file, "file is empty", "an inventory needs at least `vllmctl: 1` and `hosts:`")
    doc = SourceDoc(file, None)
    walk = _Walk(doc, alias_uses)
    try:
        doc.data = walk.node(root, ())
    except _TooBig as big:
        through = f" at alias *{escape_text(big.alias)}" if big.alias else ""
        where = Location(file, big.mark.line, big.mark.column, render_path(big.path))
        message = (
            f"YAML expands to more than {MAX_NODES} values{through} "
            "(aliases that multiply, a 'billion laughs' file?)"
        )
        hint = "use fewer nested aliases (*name); write the repeated parts out or use `defaults:`"
        raise InvalidInputError([Problem(where, message, hint)]) from None
    doc.problems = walk.problems
    if not isinstance(doc.data, dict):
        mark = _mark(root.start_mark)
        kind = "a list" if isinstance(doc.data, list) else "a single value"
        _fail(
            file, f"top level is {kind}, not a mapping", "start with `vllmctl: 1` then `hosts:`", mark.line, 1
        )
    return doc
