"""A held host lock as `history` and `status` show it: the snippet run by a real shell, the owner line read
back, its age from a given `now`, and the sentence that says how the lock gets broken."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from vllmctl.facts.lock import age_text, held_lock, held_locks, lock_command, parse_lock

OWNER = "root@ctl pid=123 since=2026-11-28T03:00:00+00:00 boot=b1 cmd=apply"
NOW = datetime(2026, 11, 28, 3, 4, 12, tzinfo=UTC)


def _run(command: str) -> str:
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True).stdout


def test_the_snippet_reports_a_held_lock_an_unreadable_owner_and_nothing_when_free(tmp_path: Path) -> None:
    lock = tmp_path / "lock"
    assert parse_lock(_run(lock_command(str(lock))), 0) is None
    lock.mkdir()
    assert parse_lock(_run(lock_command(str(lock))), 0) == ""
    (lock / "owner").write_text(f"{OWNER}\n")
    assert parse_lock(_run(lock_command(str(lock))), 0) == OWNER


def test_another_marks_line_is_not_a_lock() -> None:
    assert parse_lock("@@vllmctl-locked\nroot@ctl pid=1\n", 75) is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (45, "45s"), (252, "4m12s"), (3600, "1h00m"), (11100, "3h05m"), (198000, "2d07h")],
)
def test_age_text(seconds: int, text: str) -> None:
    assert age_text(seconds) == text


def test_the_age_runs_from_since_to_the_given_now() -> None:
    assert held_lock("pt-1", OWNER, NOW).age_s == 252
    assert held_lock("pt-1", OWNER, NOW + timedelta(hours=1)).age_s == 3852
    assert held_lock("pt-1", OWNER, NOW - timedelta(hours=1)).age_s == 0  # the writer's clock ran ahead
    assert held_lock("pt-1", OWNER, None).age_s is None
    assert held_lock("pt-1", "root@ctl pid=123 cmd=apply", NOW).age_s is None  # no since
    assert held_lock("pt-1", "root@ctl pid=123 since=yesterday", NOW).age_s is None
    assert held_lock("pt-1", "root@ctl pid=123 since=2026-11-28T03:00:00", NOW).age_s is None  # no zone


def test_a_lock_from_a_controller_that_records_its_boot_is_broken_by_its_next_run() -> None:
    assert held_lock("pt-1", OWNER, NOW).sentence() == (
        "pt-1: locked by root@ctl pid=123 (apply) for 4m12s — if that run is gone, the next run on ctl "
        "breaks it (from elsewhere, or after ctl rebooted: --break-lock)"
    )


def test_a_lock_no_run_breaks_by_itself_names_break_lock() -> None:
    old = held_lock("pt-1", "root@ctl pid=9 since=2026-11-28T02:00:00+00:00", NOW).sentence()
    assert (
        old == "pt-1: locked by root@ctl pid=9 for 1h04m — if that run is gone, run again with --break-lock"
    )
    foreign = held_lock("pt-1", "someone's lock", NOW).sentence()
    assert (
        foreign
        == "pt-1: locked by someone's lock (age unknown) — if that run is gone, run again with --break-lock"
    )
    unreadable = held_lock("pt-1", "", NOW).sentence()
    assert unreadable.startswith("pt-1: locked (owner unreadable) (age unknown) — ")


def test_json_has_the_owner_line_and_its_parts() -> None:
    assert held_lock("pt-1", OWNER, NOW).to_json() == {
        "owner": OWNER,
        "user": "root",
        "host": "ctl",
        "pid": 123,
        "command": "apply",
        "since": "2026-11-28T03:00:00+00:00",
        "age_s": 252,
    }
    assert held_lock("pt-2", "", NOW).to_json() == {
        "owner": "",
        **dict.fromkeys(("user", "host", "pid", "command", "since", "age_s")),
    }


def test_only_held_locks_are_listed_in_the_order_given() -> None:
    locks = held_locks({"b": OWNER, "a": None, "c": ""}, NOW)
    assert [(lock.host, lock.line) for lock in locks] == [("b", OWNER), ("c", "")]
