"""Manual rollback and history end to end on a temp-dir host: the real release steps run in bash, only
systemctl, journalctl and the health poller are stand-ins."""

from __future__ import annotations

import argparse
import hashlib
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from builders import VENV, manifest
from local_remote import LocalRemote

from vllmctl.bench.readiness import HealthCheck, HealthResult
from vllmctl.commands import history, rollback
from vllmctl.console import Ui
from vllmctl.inventory.model import DriverSpec, EngineSpec, Host, Inventory, SshSettings
from vllmctl.ops.release import activate_release, create_release, record_verdict
from vllmctl.releases.host import Manifest, ReleaseError
from vllmctl.releases.rollout import MaxFail
from vllmctl.runner.releases import history as history_flow
from vllmctl.runner.releases.release import GateOptions, read_releases
from vllmctl.runner.releases.rollback_host import roll_back_host
from vllmctl.tasks.desired import HostContext

UNIT = "vllmctl-m-0.service"


def _inventory() -> Inventory:
    host = Host("gpu1", "10.0.0.1", SshSettings(), None, DriverSpec(), EngineSpec())
    return Inventory(path="inv.yml", hosts={"gpu1": host}, groups={}, models={})


def _release(release: str, flags: str, venv: str = VENV) -> Manifest:
    base = manifest(release, venv, {UNIT: f"[Service]\nExecStart=vllm serve {flags}\n"})
    return Manifest(**{**base.__dict__, "models": {"m": {"ports": [8000]}}})


def deploy(remote: LocalRemote, release: Manifest, passed: bool) -> None:
    """What apply does for one release: write it, stop → start from it, record the gate's verdict."""
    state = read_releases(remote, "gpu1", 10)
    units = remote.units()
    running = [u for u, s in units.items() if s["active_state"] == "active"]
    for step in (
        create_release(release, state),
        activate_release(release, running, list(units)),
        record_verdict(
            release.id, {"passed": passed, "reasons": [] if passed else ["m: SLO miss"], "figures": {}}
        ),
    ):
        for action in step.actions:
            assert remote.execute(action, 10).ok, action.render()


def healthy_unless_bogus(remote: LocalRemote) -> HealthCheck:
    def check(
        url: str, model: str, deadline_s: float, on_progress: Any, api_key: str | None = None
    ) -> HealthResult:
        unit = remote.local(f"/etc/systemd/system/{UNIT}").read_text()
        running = (remote.root / "active" / UNIT).exists()
        ok = running and "--bogus" not in unit
        return HealthResult(ok, 1.5, 3, "ready" if ok else "health", "" if ok else "connection refused")

    return check


@pytest.fixture
def host(tmp_path: Path) -> LocalRemote:
    remote = LocalRemote(tmp_path)
    venv_python = remote.local(VENV) / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.touch(mode=0o755)
    return remote


def _ctx() -> HostContext:
    inv = _inventory()
    return HostContext(inv, inv.hosts["gpu1"])


def _opts(remote: LocalRemote) -> GateOptions:
    return GateOptions(owner="test", health=healthy_unless_bogus(remote))


def test_rollback_after_a_good_release_returns_to_the_one_before(host: LocalRemote) -> None:
    deploy(host, _release("r1", "--max-num-seqs 8"), passed=True)
    deploy(host, _release("r2", "--max-num-seqs 16"), passed=True)
    outcome = roll_back_host(_ctx(), host, _opts(host))
    assert (outcome.ok, outcome.from_id, outcome.to_id) == (True, "r2", "r1")
    assert "--max-num-seqs 8" in host.local(f"/etc/systemd/system/{UNIT}").read_text()
    state = read_releases(host, "gpu1", 10)
    assert (state.current, state.known_good) == ("r1", "r1")
    calls = [c for c in host.calls() if not c.startswith("systemctl show")][-4:]  # `show`: only reads
    assert calls[0] == f"systemctl stop -- {UNIT}" and calls[-1] == f"systemctl start -- {UNIT}"
    # the state records describe what serves now: apply of r1's inventory restarts nothing
    unit = host.local(f"/etc/systemd/system/{UNIT}").read_text()
    applied = hashlib.sha256(f"{unit}\0".encode()).hexdigest()  # no env file on this host
    assert host.local(f"/var/lib/vllmctl/state/{UNIT}.applied").read_text() == applied
    assert host.local(f"/var/lib/vllmctl/state/{UNIT}.healthy").read_text() == applied
    assert not host.local("/var/lib/vllmctl/lock").exists()
    assert host.audit[-1]["action"] == "rollback" and host.audit[-1]["to"] == "r1"


def test_rollback_after_a_failed_release_goes_to_known_good(host: LocalRemote) -> None:
    deploy(host, _release("r1", "--max-num-seqs 8"), passed=True)
    deploy(host, _release("r2", "--bogus"), passed=False)
    outcome = roll_back_host(_ctx(), host, _opts(host))
    assert (outcome.ok, outcome.to_id) == (True, "r1")
    assert "--bogus" not in host.local(f"/etc/systemd/system/{UNIT}").read_text()


def test_a_named_release_whose_venv_is_gone_is_refused_and_nothing_is_touched(host: LocalRemote) -> None:
    deploy(host, _release("r1", "--old", venv="/opt/vllmctl/venvs/vllm-0.10.0"), passed=True)
    deploy(host, _release("r2", "--new"), passed=True)
    before = host.calls()
    with pytest.raises(ReleaseError, match=r"vllm-0\.10\.0, which is gone"):
        roll_back_host(_ctx(), host, _opts(host), to="r1")
    assert host.calls() == before
    assert not host.local("/var/lib/vllmctl/lock").exists()
    assert read_releases(host, "gpu1", 10).current == "r2"


def test_an_unhealthy_target_fails_with_the_journal_tail(host: LocalRemote) -> None:
    deploy(host, _release("r1", "--bogus"), passed=True)  # passed once, broken now
    deploy(host, _release("r2", "--new"), passed=True)
    outcome = roll_back_host(_ctx(), host, _opts(host))
    assert not outcome.ok
    assert "unrecognized arguments: --bogus" in outcome.reasons[0]
    assert read_releases(host, "gpu1", 10).known_good == "r2"  # known-good moves only when serving
    # started, so its applied record says so; never healthy, so the next apply waits for health again
    assert host.local(f"/var/lib/vllmctl/state/{UNIT}.applied").exists()
    assert not host.local(f"/var/lib/vllmctl/state/{UNIT}.healthy").exists()


def _args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = {
        "inventory": "inv.yml",
        "limit": None,
        "host": None,
        "to": None,
        "yes": False,
        "forks": 4,
    }
    base |= {
        "command_timeout": 10.0,
        "health_timeout": 5.0,
        "break_lock": False,
        "json": True,
        "timeout": 10.0,
        "max_fail": MaxFail(),
        "wait_available": 1.0,
    }
    return argparse.Namespace(**(base | kw))


def test_commands_plan_without_yes_and_history_lists_in_order(
    host: LocalRemote, monkeypatch: pytest.MonkeyPatch
) -> None:
    deploy(host, _release("r1", "--a"), passed=True)
    deploy(host, _release("r2", "--bogus"), passed=False)
    for module in (history_flow, rollback):
        monkeypatch.setattr(module, "load_inventory", lambda path: _inventory())
    out = io.StringIO()
    code = rollback.run(_args(), Ui(out=out, err=io.StringIO()), lambda ctx: host, healthy_unless_bogus(host))
    assert code == 3
    assert json.loads(out.getvalue())["plan"] == {"gpu1": {"current": "r2", "to": "r1", "action": "activate"}}
    assert read_releases(host, "gpu1", 10).current == "r2"

    out = io.StringIO()
    assert history.run(_args(), Ui(out=out, err=io.StringIO()), remote_for=lambda ctx: host) == 0
    shown = json.loads(out.getvalue())["hosts"]["gpu1"]
    assert [(r["id"], r["status"]) for r in shown["releases"]] == [("r1", "good"), ("r2", "failed")]
    assert shown["releases"][1]["reasons"] == ["m: SLO miss"]
    assert (shown["current"], shown["known_good"]) == ("r2", "r1")
    assert shown["recovery"] == {"action": "rollback", "reason": "current release r2 failed its gate"}

    monkeypatch.setenv("COLUMNS", "250")
    out, err = io.StringIO(), io.StringIO()
    assert history.run(_args(json=False), Ui(out=out, err=err), remote_for=lambda ctx: host) == 0
    table = out.getvalue()
    assert table.index("r1") < table.index("r2") and "SLO miss" in table and "known-good" in table
    assert "gpu1: current release r2 failed its gate" in err.getvalue()


def test_history_shows_a_held_lock_with_its_owner_and_age(
    host: LocalRemote, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history_flow, "load_inventory", lambda path: _inventory())
    out = io.StringIO()
    assert history.run(_args(), Ui(out=out, err=io.StringIO()), remote_for=lambda ctx: host) == 0
    assert json.loads(out.getvalue())["locks"] == {}

    since = (datetime.now(UTC) - timedelta(minutes=4, seconds=12)).isoformat(timespec="seconds")
    owner = f"root@ctl pid=123 since={since} boot=b1 cmd=apply"
    lock = host.local("/var/lib/vllmctl/lock")
    lock.mkdir(parents=True)
    (lock / "owner").write_text(owner + "\n")
    out = io.StringIO()
    assert history.run(_args(), Ui(out=out, err=io.StringIO()), remote_for=lambda ctx: host) == 0
    shown = json.loads(out.getvalue())["locks"]["gpu1"]
    assert shown.pop("age_s") in range(252, 252 + 60)
    assert shown == {
        "owner": owner,
        "user": "root",
        "host": "ctl",
        "pid": 123,
        "command": "apply",
        "since": since,
    }

    monkeypatch.setenv("COLUMNS", "250")
    err = io.StringIO()
    assert history.run(_args(json=False), Ui(out=io.StringIO(), err=err), remote_for=lambda ctx: host) == 0
    assert "no releases on the selected hosts yet" in err.getvalue()
    assert "warning: gpu1: locked by root@ctl pid=123 (apply) for 4m" in err.getvalue()
    assert "the next run on ctl breaks it" in err.getvalue()


def test_a_held_back_host_gets_its_serving_release_units_back_and_nothing_restarts(host: LocalRemote) -> None:
    from vllmctl.runner.releases.release import keep_current

    assert keep_current(_ctx(), host, 10) == "no release recorded yet"
    deploy(host, _release("r1", "--max-num-seqs 8"), passed=True)
    unit = host.local(f"/etc/systemd/system/{UNIT}")
    unit.write_text("[Service]\nExecStart=vllm serve --bogus\n")  # apply's models phase wrote the new one
    before = len(host.calls())
    assert keep_current(_ctx(), host, 10) == "release r1"
    assert "--max-num-seqs 8" in unit.read_text() and "--bogus" not in unit.read_text()
    done = host.calls()[before:]
    assert done[-1] == "systemctl daemon-reload"
    assert not any(c.startswith(("systemctl stop", "systemctl start", "systemctl restart")) for c in done)
    assert read_releases(host, "gpu1", 10).current == "r1"
