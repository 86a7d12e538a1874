"""The one rule for a unit being waited on, as the release gate, the group gate and the on-host health wait
each apply it (the last runs its source with the host's python3)."""

from __future__ import annotations

import pytest

from vllmctl.ops.service_start import POLL
from vllmctl.releases.unit_exit import UNIT_EXIT_SOURCE, exited_units, restart_count, unit_exit_reason

CASES = [
    (
        {"ActiveState": "activating", "SubState": "start", "NRestarts": "3"},
        3,
        "",
    ),  # an earlier run's restarts
    ({"ActiveState": "active", "SubState": "running", "NRestarts": "0"}, 0, ""),
    ({"ActiveState": "active", "SubState": "running", "NRestarts": "4"}, 3, "active/running, 1 restarts"),
    (
        {"ActiveState": "activating", "SubState": "auto-restart", "NRestarts": "0"},
        0,
        "activating/auto-restart",
    ),
    ({"ActiveState": "failed", "SubState": "failed", "NRestarts": "0"}, 0, "failed/failed"),
    ({"ActiveState": "inactive", "SubState": "dead", "NRestarts": "0"}, 0, "inactive/dead"),
    ({"ActiveState": "active", "SubState": "running", "NRestarts": "junk"}, 0, ""),
]


@pytest.mark.parametrize(("props", "before", "expected"), CASES)
def test_a_unit_has_exited_when_failed_stopped_waiting_to_restart_or_restarted(
    props: dict[str, str], before: int, expected: str
) -> None:
    reason = unit_exit_reason(props, before)
    assert reason.startswith(expected) and bool(reason) == bool(expected)


@pytest.mark.parametrize(("props", "before", "expected"), CASES)
def test_the_on_host_copy_is_the_same_rule(props: dict[str, str], before: int, expected: str) -> None:
    namespace: dict[str, object] = {}
    exec(UNIT_EXIT_SOURCE, namespace)  # what the host's python3 runs, without vllmctl installed
    assert namespace["unit_exit_reason"](props, before) == unit_exit_reason(props, before)  # type: ignore[operator]
    assert UNIT_EXIT_SOURCE in POLL


def test_exited_units_reads_systemctl_show_for_several_units() -> None:
    show = (
        "Id=a.service\nActiveState=active\nSubState=running\nNRestarts=0\n\n"
        "Id=b.service\nActiveState=activating\nSubState=auto-restart\nNRestarts=2\n\n"
        "Id=c.service\nActiveState=failed\nSubState=failed\nNRestarts=0\n"
    )
    assert exited_units(show) == [
        "b.service (activating/auto-restart, 2 restarts since the wait began)",
        "c.service (failed/failed, 0 restarts since the wait began)",
    ]
    assert exited_units("") == [] and restart_count(show) == 0 and restart_count("NRestarts=5\n") == 5
