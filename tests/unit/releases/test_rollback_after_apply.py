"""Rollback's choice over what whole applies leave on a temp-dir host (apply_host.py): after a gated apply
the host runs its `current` release exactly (so a rollback goes one back, as ever); after an apply stopped
before its gate it does not, and the rollback re-activates `current`, after which planning changes nothing."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from apply_host import ApplyHost
from gate_flow import Clock, bench, health

from vllmctl.inventory.model import DriverSpec, EngineSpec, Host, Inventory, ModelDeployment, SshSettings
from vllmctl.releases.rollback import choose, left_current
from vllmctl.runner.core.execute import RunOptions
from vllmctl.runner.core.playbook_run import run_playbook
from vllmctl.runner.releases.history import read_units
from vllmctl.runner.releases.release import GateOptions, gate_host, read_releases
from vllmctl.runner.releases.rollback_host import roll_back_host
from vllmctl.tasks.desired import HostContext
from vllmctl.tasks.playbooks import Phase, Playbook, TaskCall

VENV = "/opt/vllmctl/venvs/vllm-0.11.0"
PLAYBOOK = Playbook(
    "services",
    "",
    (
        Phase("models", (TaskCall("model_env_files"), TaskCall("model_units"))),
        Phase("services", (TaskCall("model_services"), TaskCall("health_check", {"deadline_s": 5.0}))),
    ),
)


def ctx(seqs: int) -> HostContext:
    host = Host("gpu1", "10.0.0.1", SshSettings(), None, DriverSpec(), EngineSpec())
    model = ModelDeployment("m", "/srv/models/tiny", ("gpu1",), engine_args={"max_num_seqs": seqs})
    return HostContext(Inventory(path="inv.yml", hosts={"gpu1": host}, groups={}, models={"m": model}), host)


def apply(host: ApplyHost, seqs: int, stamp: str, gate: bool = True, check: bool = False) -> Any:
    """A whole apply; without `gate` it stops where an interrupted one does: restarted, before its gate."""
    opts = GateOptions("ops@ctl", stamp, "d" * 64, 3, health=health(host), bench=bench, clock=Clock())

    def after_host(context: HostContext, remote: Any, lock: Any, failure: str) -> dict[str, Any]:
        return gate_host(context, remote, lock, opts, failure).to_json()

    run = RunOptions(forks=1, command_timeout_s=30, check=check, lock_owner="test",
                     after_host=after_host if gate and not check else None)  # fmt: skip
    return run_playbook(PLAYBOOK, {"gpu1": ctx(seqs)}, lambda c: host, run, time.monotonic)


def test_a_gated_apply_runs_its_release_exactly_and_an_ungated_one_does_not(tmp_path: Path) -> None:
    host = ApplyHost(tmp_path, VENV)
    assert apply(host, 8, "2026-11-21T09:00:00+00:00").failed == 0
    assert apply(host, 16, "2026-11-21T09:01:00+00:00").failed == 0
    state = read_releases(host, "gpu1", 10)
    first, second = (r.id for r in state.releases)
    assert (
        left_current(state, read_units(host, "gpu1", 10)) == ""
    )  # apply's unit is the release's, byte for byte
    plain = choose({"gpu1": state}, {"gpu1": read_units(host, "gpu1", 10)})["gpu1"]
    assert (plain.action, plain.target_id) == ("activate", first)

    assert apply(host, 32, "2026-11-21T09:02:00+00:00", gate=False).failed == 0
    assert "--max-num-seqs 32" in host.local("/etc/systemd/system/vllmctl-m-0.service").read_text()
    state, units = read_releases(host, "gpu1", 10), read_units(host, "gpu1", 10)
    assert state.current == second
    assert left_current(state, units).startswith(
        f"the unit files on disk are not release {second}'s (changed: "
    )
    back = choose({"gpu1": state}, {"gpu1": units})["gpu1"]
    assert (back.action, back.target_id) == ("activate", second)

    gate = GateOptions("ops@ctl", health=health(host), bench=bench, clock=Clock())
    done = roll_back_host(ctx(16), host, gate, back.target_id)
    assert (done.ok, done.from_id, done.to_id) == (True, second, second)
    assert "--max-num-seqs 16" in host.local("/etc/systemd/system/vllmctl-m-0.service").read_text()
    assert (
        choose({"gpu1": read_releases(host, "gpu1", 10)}, {"gpu1": read_units(host, "gpu1", 10)})[
            "gpu1"
        ].target_id
        == first
    )  # on its current again: the next rollback goes one back
    assert apply(host, 16, "2026-11-21T09:03:00+00:00", check=True).changed == 0  # state is true (#19)
