"""Helpers: write an inventory into a temporary directory; collect its rendered problems or load it."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from vllmctl.errors import InvalidInputError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Inventory

Problems = Callable[[str], list[str]]
Load = Callable[[str], Inventory]


@pytest.fixture
def problems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Problems:
    monkeypatch.chdir(tmp_path)

    def run(text: str) -> list[str]:
        (tmp_path / "inv.yml").write_text(textwrap.dedent(text))
        with pytest.raises(InvalidInputError) as caught:
            load_inventory("inv.yml")
        return [problem.render() for problem in caught.value.problems]

    return run


@pytest.fixture
def load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Load:
    monkeypatch.chdir(tmp_path)

    def run(text: str) -> Inventory:
        (tmp_path / "inv.yml").write_text(textwrap.dedent(text))
        return load_inventory("inv.yml")

    return run
