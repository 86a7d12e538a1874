"""multinode/ is pure like planner/ and ops/: no SSH, processes, sockets, clock or printing; effects live in
runner/multinode/cluster.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "vllmctl" / "multinode"
BANNED = {"vllmctl.transport", "subprocess", "socket", "time", "paramiko", "fabric", "threading", "os"}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.update({node.module, node.module.split(".")[0]})
    return found


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_multinode_modules_are_pure(path: Path) -> None:
    assert sorted(BANNED & _imports(path)) == []
    calls = [
        node.lineno
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
    ]
    assert calls == []
