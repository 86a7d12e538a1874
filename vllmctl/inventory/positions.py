"""Plain data about a parsed file: field paths, line:column marks, the SourceDoc that holds both, and the
escaping that keeps unprintable characters out of every message.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Any

from vllmctl.errors import Location, Problem

FieldPath = tuple[str | int, ...]


def render_path(path: FieldPath) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


_UNPRINTABLE = {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}  # controls, bidi overrides, zero-width, separators


def unprintable(char: str) -> bool:
    """Characters that must never reach a terminal raw: controls, bidi overrides, zero-width and the like."""
    return unicodedata.category(char) in _UNPRINTABLE


def escape_text(text: str) -> str:
    """The text with every unprintable character written as an escape (U+202E becomes \\u202e)."""
    if not any(unprintable(char) for char in text):
        return text
    return "".join(
        char.encode("unicode_escape").decode("ascii") if unprintable(char) else char for char in text
    )


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
