"""libyaml composes inventories without aliases (a 10,000-host file in a fraction of PyYAML's time); the data,
every key mark, every problem and every value's line are what PyYAML's Python composer gives. One difference
is allowed: an empty value (`node1: ,`) is marked one column later by libyaml (after the space)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from vllmctl.errors import InvalidInputError
from vllmctl.inventory import source
from vllmctl.inventory.source import read_yaml

ROOT = Path(__file__).parents[3]
FILES = sorted(
    path
    for folder in ("inventories", "tests", "molecule", "playbooks")
    for pattern in ("*.yml", "*.yaml")
    for path in (ROOT / folder).rglob(pattern)
)
# keys and values past ASCII (marks count characters), flow and block styles, a duplicate key, a comment
TRICKY = (
    "vllmctl: 1  # é\nhosts:\n  'ünï': {address: 10.0.0.1, vars: {note: \"日本語 text\"}}\n"
    "  b:\n    address: 10.0.0.2\n    address: 10.0.0.3\n    vars:\n      - [1, 2, {x: y}]\n"
)


def both_ways(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    def read() -> Any:
        try:
            doc = read_yaml(path)
        except InvalidInputError as exc:
            return ("refused", exc.render())
        return (doc.data, doc.keys, doc.values, [p.render() for p in doc.problems])

    fast = read()
    with monkeypatch.context() as patched:
        patched.setattr(source, "_libyaml_compose", lambda text: (False, None))
        slow = read()
    if fast[0] != "refused" and slow[0] != "refused":
        for path, mark in slow[2].items():
            other = fast[2].get(path)
            if other is not None and other.line == mark.line and other.column == mark.column + 1:
                assert lookup(slow[0], path) in (None, ""), path  # only an empty value may sit one later
                fast[2][path] = mark
    return fast, slow


def lookup(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        data = data[part]
    return data


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml")
@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_every_yaml_file_here_reads_the_same_both_ways(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = both_ways(path, monkeypatch)
    assert fast == slow


def test_non_ascii_text_and_a_duplicate_key_read_the_same_both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "inv.yml"
    path.write_text(TRICKY, encoding="utf-8")
    fast, slow = both_ways(path, monkeypatch)
    assert fast == slow
    data, keys, _values, problems = fast
    assert data["hosts"]["b"]["address"] == "10.0.0.2" and problems  # the first kept, the duplicate reported
    assert (keys[("hosts", "ünï", "vars", "note")].line, keys[("hosts", "ünï", "vars", "note")].column) == (
        3,
        37,
    )


def test_libyaml_is_used_only_without_aliases_and_within_the_depth_limit() -> None:
    assert source._libyaml_compose("a: [1, {b: c}]\n")[0]
    assert source._libyaml_compose("a: &x 1\nb: *x\n") == (False, None)
    deep = "x: " + "[" * (source.MAX_DEPTH + 1) + "]" * (source.MAX_DEPTH + 1) + "\n"
    assert source._libyaml_compose(deep) == (False, None)  # libyaml's C recursion is never reached
    assert source._libyaml_compose("a: [1,\n") == (False, None)  # errors are PyYAML's to word
