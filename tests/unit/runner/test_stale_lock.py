"""A host lock whose owner died on this controller is stale: the rule, and SshRemote breaking it in a real
shell (only while the lock still names that owner, with a line in the host's audit log)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from vllmctl.facts.lock_owner import Controller, Owner, format_owner, is_stale, parse_owner
from vllmctl.runner.core.audit import lock_owner, pid_alive, this_controller
from vllmctl.runner.core.remote import HostLockedError, SshRemote, break_stale_script
from vllmctl.transport import Result

HERE = Controller("ctl", "b1")
LINE = "ops@ctl pid=42 since=2026-11-27T10:00:00+00:00 boot=b1 cmd=apply"


def dead(pid: int) -> bool:
    return False


def live(pid: int) -> bool:
    return True


def test_an_owner_line_reads_back_as_written_and_keeps_user_host_pid_first() -> None:
    owner = Owner("ops", "ctl", 42, "2026-11-27T10:00:00+00:00", "b1", "rollback")
    line = format_owner(owner)
    assert line.startswith("ops@ctl pid=42 ")
    assert parse_owner(line) == owner
    assert parse_owner("ops@ctl pid=7 since=2026-01-01T00:00:00+00:00") == Owner(
        "ops", "ctl", 7, "2026-01-01T00:00:00+00:00"
    )
    assert parse_owner("someone by hand") is None and parse_owner("") is None


def test_same_controller_and_boot_with_the_pid_gone_is_stale() -> None:
    assert is_stale(LINE, HERE, dead)


@pytest.mark.parametrize(
    ("line", "here", "alive"),
    [
        (LINE, HERE, live),  # the owner still runs
        (LINE, Controller("other", "b1"), dead),  # another controller's pid means nothing here
        (LINE, Controller("ctl", "b2"), dead),  # another boot: the pid may have been reused
        ("ops@ctl pid=42 since=2026-11-27T10:00:00+00:00", HERE, dead),  # old format, no boot id
        ("somebody's lock", HERE, dead),
        ("", HERE, dead),
        (LINE, Controller("ctl", ""), dead),  # this controller has no boot id
    ],
)
def test_anything_else_holds(line: str, here: Controller, alive: object) -> None:
    assert not is_stale(line, here, alive)  # type: ignore[arg-type]


def test_this_controllers_owner_names_its_boot_id_command_and_live_pid() -> None:
    owner = parse_owner(lock_owner("2026-11-27T10:00:00+00:00", "cluster"))
    assert owner is not None and owner.command == "cluster"
    assert (owner.host, owner.boot) == (this_controller().host, this_controller().boot)
    assert pid_alive(owner.pid) and not is_stale(lock_owner("now"), this_controller(), pid_alive)


def _remote(root: Path, here: Controller, alive: object) -> SshRemote:
    def run(cmd: str, sudo: bool = False, timeout: float | None = None, stdin: bytes | None = None) -> Result:
        local = cmd.replace("/var/lib/vllmctl", str(root)).replace("/var/log/vllmctl", str(root / "log"))
        done = subprocess.run(["sh", "-c", local], capture_output=True, text=True, check=False)
        return Result(done.stdout, done.stderr, done.returncode)

    transport = SimpleNamespace(host=SimpleNamespace(name="h"), run=run)
    return SshRemote(transport, here=here, alive=alive)  # type: ignore[arg-type]


def _lock(root: Path, owner: str) -> None:
    (root / "lock").mkdir()
    (root / "lock" / "owner").write_text(owner + "\n")


@pytest.mark.parametrize("taking", ["me@ctl pid=2 boot=b1 cmd=apply", None])
def test_a_stale_lock_is_broken_said_in_the_audit_log_and_the_run_goes_on(
    tmp_path: Path, taking: str | None
) -> None:
    _lock(tmp_path, LINE)
    remote = _remote(tmp_path, HERE, dead)
    assert remote.begin({}, taking, False, 30) == {}
    assert remote.stale_broken == LINE
    lock = tmp_path / "lock" / "owner"
    assert lock.read_text() == f"{taking}\n" if taking else not lock.exists()
    (record,) = [json.loads(line) for line in (tmp_path / "log" / "audit.log").read_text().splitlines()]
    assert record["event"] == "broke stale lock" and record["owner"] == LINE and record["by"] == taking
    if taking is None:  # an unlocked look broke it: the next one finds nothing to break
        remote.begin({}, None, False, 30)
        assert remote.stale_broken == ""


@pytest.mark.parametrize("here", [Controller("other", "b1"), Controller("ctl", "b2")])
def test_a_lock_from_another_controller_or_boot_still_refuses_with_todays_hint(
    tmp_path: Path, here: Controller
) -> None:
    _lock(tmp_path, LINE)
    with pytest.raises(HostLockedError, match="pid=42") as refused:
        _remote(tmp_path, here, dead).begin({}, "me@other pid=2", False, 30)
    assert "if it died, run again with --break-lock" in refused.value.hint
    assert (tmp_path / "lock" / "owner").read_text() == LINE + "\n"
    assert not (tmp_path / "log").exists()


def test_a_lock_whose_owner_lives_still_refuses(tmp_path: Path) -> None:
    _lock(tmp_path, LINE)
    with pytest.raises(HostLockedError, match="locked by another apply"):
        _remote(tmp_path, HERE, live).begin({}, "me@ctl pid=2 boot=b1", False, 30)
    assert (tmp_path / "lock" / "owner").read_text() == LINE + "\n"


def test_the_break_leaves_a_lock_that_changed_hands_meanwhile(tmp_path: Path) -> None:
    _lock(tmp_path, "ops@ctl pid=43 boot=b1 cmd=apply")  # another run took it after LINE was judged stale
    result = _remote(tmp_path, HERE, dead).transport.run(break_stale_script(LINE, "{}"), True, 30)
    assert result.ok
    assert (tmp_path / "lock" / "owner").read_text() == "ops@ctl pid=43 boot=b1 cmd=apply\n"
    assert not (tmp_path / "log").exists()
