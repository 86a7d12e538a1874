"""Rollback's choice, pure (releases/rollback.py): why a host does not run a release (its unit files, their
systemd state), and each host's part as cases: one back, every host to its `current` after an interrupted
apply, `--to`, refusals, nothing to do."""

from __future__ import annotations

from typing import Any

import pytest
from builders import VENV, manifest

from vllmctl.releases.host import HostReleases, Manifest, Release
from vllmctl.releases.rollback import HostUnits, choose, not_running, unit_digest, units_changed

UNIT = "vllmctl-m-0.service"


def _release(release: str, flags: str) -> Manifest:
    base = manifest(release, VENV, {UNIT: f"[Service]\nExecStart=vllm serve {flags}\n"})
    return Manifest(**{**base.__dict__, "models": {"m": {"ports": [8000]}}})


def _state(*releases: tuple[str, str], current: str | None = None) -> HostReleases:
    found = tuple(
        Release(rid, status != "incomplete", _release(rid, f"--{rid}"), None if status == "pending" else
                {"passed": status == "good"})
        for rid, status in releases
    )  # fmt: skip
    good = [rid for rid, status in releases if status == "good"]
    return HostReleases(found, current, good[-1] if good else None, frozenset({VENV}))


def _running(release: str, **state: str) -> HostUnits:
    content = f"[Service]\nExecStart=vllm serve --{release}\n"
    return HostUnits({UNIT: unit_digest(content)}, {UNIT: {"active_state": "active", **state}})


def test_units_changed_and_not_running_say_why() -> None:
    r1 = _release("r1", "--r1")
    assert units_changed(r1, _running("r1")) == "" and not_running(r1, _running("r1")) == ""
    extra = HostUnits({**_running("r1").files, "vllmctl-n-0.service": "0" * 64}, {})
    assert units_changed(r1, extra) == (
        "the unit files on disk are not release r1's (not in it: vllmctl-n-0.service)"
    )
    assert (
        units_changed(r1, HostUnits({}, {}))
        == f"the unit files on disk are not release r1's (missing: {UNIT})"
    )
    assert not_running(r1, _running("r1", active_state="failed")) == f"not running: {UNIT} (failed)"
    assert not_running(r1, _running("r1", need_daemon_reload="yes")) == (
        f"runs an older copy of {UNIT} (systemd was not reloaded)"
    )


@pytest.mark.parametrize(
    ("states", "units", "to", "expected"),
    [
        # nothing interrupted: one back each
        ({"a": _state(("r1", "good"), ("r2", "good"), current="r2")}, {"a": _running("r2")}, None,
         {"a": ("activate", "r1")}),
        # a's units are not its current's: every host to its current
        ({"a": _state(("r1", "good"), current="r1"),
          "b": _state(("r0", "good"), ("r1", "good"), current="r1")},
         {"a": _running("r9"), "b": _running("r1")}, None,
         {"a": ("activate", "r1"), "b": ("stay", "r1")}),
        # ... and one whose engine stopped is started again
        ({"a": _state(("r1", "good"), current="r1"), "b": _state(("r1", "good"), current="r1")},
         {"a": _running("r9"), "b": _running("r1", active_state="inactive")}, None,
         {"a": ("activate", "r1"), "b": ("activate", "r1")}),
        # a crashed engine alone is not an interrupted apply: a plain rollback
        ({"a": _state(("r1", "good"), ("r2", "good"), current="r2")},
         {"a": _running("r2", active_state="failed")}, None, {"a": ("activate", "r1")}),
        # an unfinished current (the gate was running) goes to known-good, as before
        ({"a": _state(("r1", "good"), ("r2", "pending"), current="r2"),
          "b": _state(("r1", "good"), current="r1")},
         {"a": _running("r2"), "b": _running("r9")}, None,
         {"a": ("activate", "r1"), "b": ("activate", "r1")}),
        # --to wins over everything
        ({"a": _state(("r1", "good"), ("r2", "good"), current="r2")}, {"a": _running("r9")}, "r2",
         {"a": ("activate", "r2")}),
        # an interrupted first apply: no release to return to
        ({"a": _state(current=None)}, {"a": _running("r9")}, None, {"a": ("refuse", None)}),
        ({"a": _state(current=None)}, {"a": HostUnits({}, {})}, None, {"a": ("none", None)}),
    ],
)  # fmt: skip
def test_choose(
    states: dict[str, HostReleases], units: dict[str, HostUnits], to: str | None, expected: dict[str, Any]
) -> None:
    chosen = choose(states, units, to)
    assert {h: (c.action, c.target_id) for h, c in chosen.items()} == expected
