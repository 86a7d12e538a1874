"""The one rule for a unit being waited on: it has exited when systemd reports it failed, stopped or waiting
to be restarted, or when it was restarted since the wait began. Used by the release gate, the group gate and
(as source, since it runs there with the host's python3) the on-host health wait."""

from __future__ import annotations

import inspect

from vllmctl.facts.state import show_blocks

SHOW_PROPERTIES = "Id,ActiveState,SubState,NRestarts"


def unit_exit_reason(props: dict[str, str], restarts_before: int) -> str:
    """Why waiting longer on this unit cannot make it healthy, or "" while it may still come up.
    Stdlib-only and self-contained: its source is also run on hosts."""
    state, sub = props.get("ActiveState", "").strip(), props.get("SubState", "").strip()
    count = props.get("NRestarts", "0").strip()
    restarts = int(count) if count.isdigit() else 0
    # `systemctl start` does not reset NRestarts on systemd 252, so restarts are counted from the wait's start
    if state in ("failed", "inactive") or sub == "auto-restart" or restarts > restarts_before:
        return f"{state}/{sub}, {max(0, restarts - restarts_before)} restarts since the wait began"
    return ""


UNIT_EXIT_SOURCE = inspect.getsource(unit_exit_reason)


def restart_count(show_output: str) -> int:
    """NRestarts of the first unit in `systemctl show` output (0 when absent)."""
    blocks = show_blocks(show_output)
    count = blocks[0].get("NRestarts", "0").strip() if blocks else "0"
    return int(count) if count.isdigit() else 0


def exited_units(show_output: str, restarts_before: int = 0) -> list[str]:
    """Each unit in `systemctl show -p SHOW_PROPERTIES` output that has exited, with why."""
    found = []
    for props in show_blocks(show_output):
        reason = unit_exit_reason(props, restarts_before)
        if reason:
            found.append(f"{props.get('Id', '?')} ({reason})")
    return found
