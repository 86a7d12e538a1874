"""Edge helpers: secrets resolved from the controller's env or files, the local audit log location."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from executor_builders import inventory

from vllmctl.errors import InputError
from vllmctl.inventory.model import SecretRef
from vllmctl.runner.core.audit import append_local_audit, local_audit_path, lock_owner
from vllmctl.runner.fleet.hosts import resolve_secrets


def test_secrets_come_from_env_or_file(tmp_path: Path) -> None:
    (tmp_path / "tok").write_text("from-file\n")
    inv = dataclasses.replace(
        inventory(["h1"]),
        secrets={
            "hf_token": SecretRef("hf_token", env="HF_TOKEN"),
            "api": SecretRef("api", file=str(tmp_path / "tok")),
        },
    )
    assert resolve_secrets(inv, {"HF_TOKEN": "hf_x"}) == {"hf_token": "hf_x", "api": "from-file"}
    with pytest.raises(InputError, match="HF_TOKEN is not set"):
        resolve_secrets(inv, {})


def test_local_audit_goes_under_xdg_state_home(tmp_path: Path) -> None:
    path = local_audit_path({"XDG_STATE_HOME": str(tmp_path)})
    assert path == tmp_path / "vllmctl" / "audit.log"
    append_local_audit(path, {"a": 1})
    append_local_audit(path, {"a": 2})
    assert [json.loads(line)["a"] for line in path.read_text().splitlines()] == [1, 2]


def test_lock_owner_says_who_where_and_since_when() -> None:
    owner = lock_owner("2026-01-01T00:00:00+00:00")
    assert "@" in owner and " pid=" in owner and " since=2026-01-01T00:00:00+00:00" in owner
    assert owner.endswith(" cmd=apply")
