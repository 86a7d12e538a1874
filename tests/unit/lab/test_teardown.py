"""A torn-down fleet's folder leaves at once and is deleted in the background (lab/teardown.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from vllmctl.lab import state, teardown


def test_a_fleet_folder_is_gone_at_once_and_deleted_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state, "TRASH_DIR", tmp_path / ".lab-trash")
    fleet = tmp_path / "lab" / "pt1-4"
    for host in range(2):
        venv = fleet / "hosts" / f"pt1-4-{host}" / "upper" / "opt" / "venv"
        venv.mkdir(parents=True)
        for index in range(200):
            (venv / f"module{index}.py").write_text("x = 1\n")
    (fleet / "state.json").write_text("{}")
    teardown._remove_in_background(fleet)
    assert not fleet.exists()  # no state.json under the fleets' folder: the fleet is gone for `lab list`
    deadline = time.monotonic() + 30
    while list(state.TRASH_DIR.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(state.TRASH_DIR.iterdir()) == []


def test_a_fleet_folder_already_gone_is_no_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state, "TRASH_DIR", tmp_path / ".lab-trash")
    teardown._remove_in_background(tmp_path / "never-made")
    assert list(state.TRASH_DIR.iterdir()) == []
