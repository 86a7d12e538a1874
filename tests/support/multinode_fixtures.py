"""Helpers: write a multi-node inventory into a temporary directory; load it or collect its problems; and
the Ray lab (two lab hosts with the same GPUs, the engine venv and the tiny model on both) for lab tests."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from raylab import RayLab, ray_lab_session

from vllmctl.errors import InvalidInputError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Inventory
from vllmctl.lab.testing import LabFleet

BASE = """\
vllmctl: 1
defaults:
  engine: {name: vllm, version: "0.11.0"}
  gpus: {model: H100-80GB, count: 8}
hosts:
  gpu-01: {address: 10.0.0.11}
  gpu-02: {address: 10.0.0.12}
  gpu-03: {address: 10.0.0.13}
"""


@pytest.fixture
def load(tmp_path: Path) -> Callable[[str], Inventory]:
    def run(text: str) -> Inventory:
        path = tmp_path / "inv.yml"
        path.write_text(BASE + textwrap.dedent(text))
        return load_inventory(path)

    return run


@pytest.fixture
def problems(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], list[str]]:
    monkeypatch.chdir(tmp_path)

    def run(text: str) -> list[str]:
        Path("inv.yml").write_text(BASE + textwrap.dedent(text))
        with pytest.raises(InvalidInputError) as caught:
            load_inventory("inv.yml")
        return [problem.render() for problem in caught.value.problems]

    return run


@pytest.fixture(scope="module")
def ray_lab(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayLab]:
    yield from ray_lab_session(lab_fleet, tmp_path_factory.mktemp("raylab"))
