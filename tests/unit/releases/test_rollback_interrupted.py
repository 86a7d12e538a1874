"""`vllmctl rollback` after an apply interrupted between a host's restart and its gate, end to end through
the command on two temp-dir hosts (real release steps in bash, stand-in systemctl and health): every host
returns to its `current` release, one already there is left alone (never drained); a host that cannot roll
back is refused alone. The pure choice's cases: test_rollback_choice.py."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import pytest
from builders import VENV, manifest
from local_remote import LocalRemote

from vllmctl.bench.readiness import HealthCheck, HealthResult
from vllmctl.commands import rollback
from vllmctl.console import Ui
from vllmctl.inventory.model import DriverSpec, EngineSpec, Host, Inventory, SshSettings
from vllmctl.ops.release import activate_release, create_release, record_verdict
from vllmctl.releases.host import Manifest
from vllmctl.releases.rollout import MaxFail
from vllmctl.runner.releases.release import read_releases
from vllmctl.runner.rollback import RollbackOptions
from vllmctl.runner.rollback import rollback as rollback_flow

UNIT = "vllmctl-m-0.service"
ADDRESSES = {"gpu1": "10.0.0.1", "gpu2": "10.0.0.2"}


def _inventory() -> Inventory:
    hosts = {
        name: Host(name, address, SshSettings(), None, DriverSpec(), EngineSpec())
        for name, address in ADDRESSES.items()
    }
    return Inventory(path="inv.yml", hosts=hosts, groups={}, models={})


def _release(release: str, flags: str) -> Manifest:
    base = manifest(release, VENV, {UNIT: f"[Service]\nExecStart=vllm serve {flags}\n"})
    return Manifest(**{**base.__dict__, "models": {"m": {"ports": [8000]}}})


def deploy(remote: LocalRemote, release: Manifest, passed: bool = True) -> None:
    """What apply does for one release: write it, stop → start from it, record the gate's verdict."""
    state = read_releases(remote, remote.name, 10)
    units = remote.units()
    running = [u for u, s in units.items() if s["active_state"] == "active"]
    verdict = {"passed": passed, "reasons": [] if passed else ["m: SLO miss"], "figures": {}}
    for step in (
        create_release(release, state),
        activate_release(release, running, list(units)),
        record_verdict(release.id, verdict),
    ):
        for action in step.actions:
            assert remote.execute(action, 10).ok, action.render()


def restarted_on_new_units(remote: LocalRemote, flags: str) -> None:
    """What an apply stopped before its gate leaves: the new unit installed and started, no release for it."""
    remote.local(f"/etc/systemd/system/{UNIT}").write_text(f"[Service]\nExecStart=vllm serve {flags}\n")
    (remote.root / "active" / UNIT).touch()


@pytest.fixture
def hosts(tmp_path: Path) -> dict[str, LocalRemote]:
    found = {}
    for name in ADDRESSES:
        remote = LocalRemote(tmp_path / name, name)
        venv_python = remote.local(VENV) / "bin" / "python"
        venv_python.parent.mkdir(parents=True)
        venv_python.touch(mode=0o755)
        found[name] = remote
    return found


def serving_unless_down(hosts: dict[str, LocalRemote], down: set[str] | None = None) -> HealthCheck:
    """Healthy while the unit runs and its host is not in `down` (an engine that answers nothing)."""
    by_address = {address: hosts[name] for name, address in ADDRESSES.items()}

    def check(
        url: str, model: str, deadline_s: float, on_progress: Any, api_key: str | None = None
    ) -> HealthResult:
        remote = by_address[url.split("//")[1].split(":")[0]]
        ok = (remote.root / "active" / UNIT).exists() and remote.name not in (down or set())
        return HealthResult(ok, 0.5, 1, "ready" if ok else "health", "" if ok else "connection refused")

    return check


def run(
    hosts: dict[str, LocalRemote], health: HealthCheck, monkeypatch: pytest.MonkeyPatch, **kw: Any
) -> tuple[int, dict[str, Any], str]:
    monkeypatch.setattr(rollback, "load_inventory", lambda path: _inventory())
    args = {"inventory": "inv.yml", "limit": None, "host": None, "to": None, "yes": True, "forks": 1}
    args |= {"health_timeout": 5.0, "break_lock": False, "json": True, "timeout": 10.0}
    args |= {"max_fail": MaxFail(), "wait_available": 1.0}
    out, err = io.StringIO(), io.StringIO()
    code = rollback.run(
        argparse.Namespace(**(args | kw)),
        Ui(out=out, err=err),
        lambda ctx: hosts[ctx.host.name],
        health,
    )
    return code, json.loads(out.getvalue()), err.getvalue()


def unit_text(remote: LocalRemote) -> str:
    return remote.local(f"/etc/systemd/system/{UNIT}").read_text()


def stops_and_starts(remote: LocalRemote) -> list[str]:
    return [c for c in remote.calls() if c.startswith(("systemctl stop", "systemctl start"))]


def test_every_host_returns_to_its_current_release_and_one_already_there_is_left_alone(
    hosts: dict[str, LocalRemote], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: gpu1 (its only release) "no earlier known-good release to roll back to", exit 1, and gpu2,
    which the apply never reached, rolled back one release further than where it was."""
    deploy(hosts["gpu1"], _release("r1", "--max-num-seqs 8"))
    deploy(hosts["gpu2"], _release("r0", "--max-num-seqs 4"))
    deploy(hosts["gpu2"], _release("r1", "--max-num-seqs 8"))
    restarted_on_new_units(hosts["gpu1"], "--max-num-seqs 16")
    calls_before = {name: len(stops_and_starts(remote)) for name, remote in hosts.items()}

    code, plan, err = run(hosts, serving_unless_down(hosts), monkeypatch, yes=False)
    assert code == 3, err
    assert plan["plan"] == {
        "gpu1": {"current": "r1", "to": "r1", "action": "activate"},
        "gpu2": {"current": "r1", "to": "r1", "action": "stay"},
    }

    code, done, err = run(hosts, serving_unless_down(hosts), monkeypatch)
    assert code == 0, err
    assert (done["gpu1"]["ok"], done["gpu1"]["from"], done["gpu1"]["to"], done["gpu1"]["noop"]) == (
        True,
        "r1",
        "r1",
        False,
    )
    assert done["gpu1"]["reasons"][0] == (
        f"back to its current release r1: the unit files on disk are not release r1's (changed: {UNIT})"
    )
    assert "--max-num-seqs 8" in unit_text(hosts["gpu1"])
    assert stops_and_starts(hosts["gpu1"])[calls_before["gpu1"] :] == [
        f"systemctl stop -- {UNIT}",
        f"systemctl start -- {UNIT}",
    ]
    assert (done["gpu2"]["ok"], done["gpu2"]["to"], done["gpu2"]["noop"]) == (True, "r1", True)
    assert len(stops_and_starts(hosts["gpu2"])) == calls_before["gpu2"]  # nothing stopped
    assert not hosts["gpu2"].local("/var/lib/vllmctl/lock").exists()
    for remote in hosts.values():
        state = read_releases(remote, remote.name, 10)
        assert (state.current, state.known_good) == ("r1", "r1")
    assert "gpu2: already on its current release r1, serving: nothing to do" in err


def test_a_host_on_its_release_that_does_not_serve_is_re_activated(
    hosts: dict[str, LocalRemote], monkeypatch: pytest.MonkeyPatch
) -> None:
    for remote in hosts.values():
        deploy(remote, _release("r1", "--max-num-seqs 8"))
    restarted_on_new_units(hosts["gpu1"], "--max-num-seqs 16")
    before = len(stops_and_starts(hosts["gpu2"]))
    checks: list[str] = []
    healthy = serving_unless_down(hosts)

    def once_down(url: str, model: str, deadline_s: float, on_progress: Any, api_key: str | None = None):
        checks.append(url)
        if url.startswith("http://10.0.0.2") and len([u for u in checks if "10.0.0.2" in u]) == 1:
            return HealthResult(False, 5.0, 3, "health", "connection refused")
        return healthy(url, model, deadline_s, on_progress, api_key)

    code, done, err = run(hosts, once_down, monkeypatch)
    assert code == 0, err
    assert (done["gpu2"]["ok"], done["gpu2"]["noop"]) == (True, False)
    assert done["gpu2"]["reasons"][0].startswith("already on its current release r1, but it does not serve")
    assert len(stops_and_starts(hosts["gpu2"])) == before + 2


def test_a_host_that_cannot_roll_back_is_refused_alone_and_the_others_go_on(
    hosts: dict[str, LocalRemote], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: gpu1's refusal came after it was taken out, counted against --max-fail 0, and stopped the
    rollout: gpu2 was "not rolled back: the rollout stopped"."""
    deploy(hosts["gpu1"], _release("r1", "--max-num-seqs 8"))
    deploy(hosts["gpu2"], _release("r1", "--max-num-seqs 8"))
    deploy(hosts["gpu2"], _release("r2", "--max-num-seqs 16"))
    before = len(stops_and_starts(hosts["gpu1"]))
    code, done, _ = run(hosts, serving_unless_down(hosts), monkeypatch)
    assert code == 1
    assert done["gpu1"]["ok"] is False and done["gpu1"]["reasons"] == [
        "not rolled back: gpu1: no earlier known-good release to roll back to; not touched, it stays on "
        "release r1\n  hint: see `vllmctl history`; fix the inventory and apply again"
    ]
    assert len(stops_and_starts(hosts["gpu1"])) == before
    assert (done["gpu2"]["ok"], done["gpu2"]["from"], done["gpu2"]["to"]) == (True, "r2", "r1")
    assert "--max-num-seqs 8" in unit_text(hosts["gpu2"])


def test_a_plain_rollback_and_to_id_still_go_back_a_release(
    hosts: dict[str, LocalRemote], monkeypatch: pytest.MonkeyPatch
) -> None:
    for remote in hosts.values():
        deploy(remote, _release("r1", "--max-num-seqs 8"))
        deploy(remote, _release("r2", "--max-num-seqs 16"))
    code, done, err = run(hosts, serving_unless_down(hosts), monkeypatch)
    assert code == 0, err
    assert {h: (d["from"], d["to"], d["noop"]) for h, d in done.items() if h != "groups"} == {
        "gpu1": ("r2", "r1", False),
        "gpu2": ("r2", "r1", False),
    }
    code, done, err = run(hosts, serving_unless_down(hosts), monkeypatch, to="r2")
    assert code == 0, err
    assert all(done[h]["to"] == "r2" and not done[h]["noop"] for h in ADDRESSES)
    assert all("--max-num-seqs 16" in unit_text(r) for r in hosts.values())


def test_a_host_with_no_release_and_no_engine_unit_has_nothing_to_roll_back(
    hosts: dict[str, LocalRemote], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway host, or one no model runs on: before, "no earlier known-good release", exit 1."""
    deploy(hosts["gpu1"], _release("r1", "--max-num-seqs 8"))
    restarted_on_new_units(hosts["gpu1"], "--max-num-seqs 16")
    code, done, err = run(hosts, serving_unless_down(hosts), monkeypatch)
    assert code == 0, err
    assert (done["gpu2"]["ok"], done["gpu2"]["noop"], done["gpu2"]["to"]) == (True, True, None)
    assert "--max-num-seqs 8" in unit_text(hosts["gpu1"])


class Guard:
    """Records what the rollout is asked, with the host's engine calls so far at each ask."""

    def __init__(self, hosts: dict[str, LocalRemote]) -> None:
        self.hosts = hosts
        self.asked: list[tuple[str, str, int]] = []

    def take_out(self, host: str, waiting: Any = None) -> str:
        self.asked.append(("out", host, len(stops_and_starts(self.hosts[host]))))
        return ""

    def put_back(self, host: str, failure: str) -> str:
        self.asked.append(("back", host, len(stops_and_starts(self.hosts[host]))))
        return ""

    def fail(self, name: str, why: str) -> None:
        self.asked.append(("fail", name, 0))

    @property
    def stopped(self) -> str:
        return ""


def test_only_the_host_re_activated_is_taken_out_of_service(hosts: dict[str, LocalRemote]) -> None:
    """Drained before its engine stops, put back after it serves; the host left alone is never drained."""
    for remote in hosts.values():
        deploy(remote, _release("r1", "--max-num-seqs 8"))
    restarted_on_new_units(hosts["gpu1"], "--max-num-seqs 16")
    before = {name: len(stops_and_starts(remote)) for name, remote in hosts.items()}
    guard = Guard(hosts)
    opts = RollbackOptions(
        health=serving_unless_down(hosts), remote_for=lambda ctx: hosts[ctx.host.name], guard=guard
    )
    done = rollback_flow(_inventory(), list(ADDRESSES), True, opts, lambda line: None)
    assert done.ok, done.hosts
    assert guard.asked == [("out", "gpu1", before["gpu1"]), ("back", "gpu1", before["gpu1"] + 2)]
