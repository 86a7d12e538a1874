"""What `vllmctl lab` says before touching anything: bad flags, not root, missing tools, unknown fleets."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from vllmctl.cli import main
from vllmctl.errors import VllmctlError
from vllmctl.lab import preflight, state


def test_missing_tools_name_their_packages() -> None:
    found = preflight.missing_tools(
        lambda tool: None if tool in ("debootstrap", "systemd-nspawn") else "/bin/x"
    )
    assert found == {"debootstrap": "debootstrap", "systemd-nspawn": "systemd-container"}


def test_not_root_is_refused_with_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(VllmctlError) as caught:
        preflight.preflight()
    assert "needs root" in caught.value.message
    assert "sudo" in caught.value.hint


def test_missing_tools_are_refused_with_the_apt_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda tool: None if tool == "debootstrap" else "/bin/x")
    with pytest.raises(VllmctlError) as caught:
        preflight.preflight()
    assert "debootstrap" in caught.value.message
    assert "apt-get install debootstrap" in caught.value.hint


@pytest.mark.parametrize(
    "argv",
    [
        ["lab", "up", "--hosts", "0"],
        ["lab", "up", "--name", "Bad_Name"],
        ["lab", "up", "--gpus", "3xNOPE"],
        ["lab", "down", "--name", "Bad_Name"],
    ],
)
def test_bad_input_exits_2_before_anything_is_made(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "error:" in err
    assert "hint:" in err


def test_down_of_an_unknown_fleet(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(state, "FLEETS_ROOT", tmp_path)
    monkeypatch.setattr(state, "LOCK_DIR", tmp_path / "locks")
    assert main(["lab", "down", "--name", "ghost"]) == 2
    assert "no lab fleet named 'ghost'" in capsys.readouterr().err


def test_list_with_no_fleets(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(state, "FLEETS_ROOT", tmp_path)
    assert main(["lab", "list", "--json"]) == 0
    assert capsys.readouterr().out.strip() == "[]"


def test_down_needs_root(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["lab", "down", "--name", "ghost"]) == 1
    assert "needs root" in capsys.readouterr().err
