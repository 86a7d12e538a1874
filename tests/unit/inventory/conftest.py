"""Helpers: write an inventory into a temporary working directory and collect its rendered problems."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from vllmctl.errors import InvalidInputError
from vllmctl.inventory import load_inventory

Problems = Callable[..., list[str]]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


CONTROLLER_FILES = {  # what the example inventories name on the controller, with the modes ssh wants
    ".ssh/id_ed25519": 0o600,
    ".ssh/fleet_ed25519": 0o600,
    ".ssh/deploy_ed25519": 0o600,
    ".ssh/known_hosts": 0o644,
    ".ssh/fleet_known_hosts": 0o644,
    ".config/vllmctl/serving-key": 0o600,
}


@pytest.fixture
def controller_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME holding the keys, known_hosts and secret files the example inventories name."""
    home = tmp_path / "home"
    for name, mode in CONTROLLER_FILES.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        (home / name).write_text("x\n")
        (home / name).chmod(mode)
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def problems(workdir: Path) -> Problems:
    """problems(yaml_text, name="inv.yml", **other_files) -> every rendered problem, in order."""

    def run(text: str, name: str = "inv.yml", **files: str) -> list[str]:
        for other, content in files.items():
            (workdir / other.replace("__", "/")).parent.mkdir(parents=True, exist_ok=True)
            (workdir / other.replace("__", "/")).write_text(textwrap.dedent(content))
        (workdir / name).write_text(textwrap.dedent(text))
        with pytest.raises(InvalidInputError) as caught:
            load_inventory(name)
        return [problem.render() for problem in caught.value.problems]

    return run
