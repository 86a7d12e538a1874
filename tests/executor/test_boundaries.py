"""Architecture boundaries, read from the source: only transport/ touches SSH libraries, and the pure
modules import nothing that reaches the network, processes or the clock, and print nothing."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "vllmctl"
PURE = [
    "catalog",
    "inventory",
    "planner",
    "facts",
    "ops",
    "render",
    "tasks",
    "status",
    "releases",
    "multinode",
    "runner/plan.py",
]
SSH_LIBS = {"fabric", "paramiko", "invoke"}
BANNED_IN_PURE = {"vllmctl.transport", "subprocess", "socket", "time", "paramiko", "fabric", "threading"}


def _modules(entry: str) -> list[Path]:
    path = PACKAGE / entry
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _root_names(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names} | names


def test_only_transport_imports_ssh_libraries() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(SSH_LIBS & _root_names(_imports(path)))
        for path in PACKAGE.rglob("*.py")
        if path.parent != PACKAGE / "transport"
    }
    assert {k: v for k, v in offenders.items() if v} == {}


# catalog/loader.py is the catalog's edge: it reads a local config.json or the hub (docs/planner.md).
EDGES = {PACKAGE / "catalog" / "loader.py"}
PURE_FILES = [p for entry in PURE if (PACKAGE / entry).exists() for p in _modules(entry) if p not in EDGES]


@pytest.mark.parametrize("path", PURE_FILES, ids=[str(p.relative_to(PACKAGE)) for p in PURE_FILES])
def test_pure_modules_import_no_effects_and_do_not_print(path: Path) -> None:
    names = _root_names(_imports(path))
    assert sorted(BANNED_IN_PURE & names) == []
    tree = ast.parse(path.read_text())
    library = [node for node in tree.body if not _is_main_guard(node)]  # a `python -m` entry may print
    calls = [
        node.lineno
        for top in library
        for node in ast.walk(top)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
    ]
    assert calls == []


def _is_main_guard(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)


# the lab builds its own throwaway test hosts; facts/system.py only parses /etc/os-release with shlex.split
QUOTING_EXEMPT = {"render/quoting.py", "facts/system.py"}


def test_only_quoting_py_quotes_for_a_target() -> None:
    """One quoting function per target: every shell word goes through quoting.shell_word/shell_join, every
    systemd and env-file value through its filter; no module hand-rolls `%`/`$` escapes or calls shlex."""
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in QUOTING_EXEMPT or relative.startswith("lab/"):
            continue
        text = path.read_text()
        found = [
            what
            for what in ("import shlex", 'replace("%"', "replace('%'", 'replace("$"', "Environment=")
            if what in text
        ]
        if found:
            offenders[relative] = found
    assert offenders == {}
