"""Property (#19): whatever sequence of applies, gate failures, rollbacks and killed applies a host went
through, planning the inventory that matches what it now serves changes nothing: restarts come from the state
records, and every path that changes what serves leaves them true. Whole runs against a temp-dir host."""

from __future__ import annotations

import contextlib
import itertools
import tempfile
import time
from pathlib import Path
from typing import Any

from apply_host import ApplyHost, Killed
from gate_flow import Clock, bench, health
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllmctl.errors import VllmctlError
from vllmctl.inventory.model import DriverSpec, EngineSpec, Host, Inventory, ModelDeployment, SshSettings
from vllmctl.runner.core.execute import RunOptions
from vllmctl.runner.core.playbook_run import run_playbook
from vllmctl.runner.releases.release import GateOptions, desired_manifest, gate_host, read_releases
from vllmctl.runner.releases.rollback_host import roll_back_host
from vllmctl.tasks.desired import HostContext, render_env
from vllmctl.tasks.playbooks import Phase, Playbook, TaskCall

VENV = "/opt/vllmctl/venvs/vllm-0.11.0"
ARGS = ({"max_num_seqs": 8}, {"max_num_seqs": 16}, {"max_num_seqs": 8, "bogus": True})  # the last exits
VARIANTS = tuple(itertools.product(range(len(ARGS)), ("a", "b")))  # engine args x an env file's content
PLAYBOOK = Playbook(
    "services",
    "",
    (
        Phase("models", (TaskCall("model_env_files"), TaskCall("model_units"))),
        Phase("services", (TaskCall("model_services"), TaskCall("health_check", {"deadline_s": 5.0}))),
    ),
)


def ctx(variant: tuple[int, str]) -> HostContext:
    args, mark = variant
    host = Host("gpu1", "10.0.0.1", SshSettings(), None, DriverSpec(), EngineSpec(), {"env": {"MARK": mark}})
    model = ModelDeployment("m", "/srv/models/tiny", ("gpu1",), engine_args=ARGS[args])
    return HostContext(Inventory(path="inv.yml", hosts={"gpu1": host}, groups={}, models={"m": model}), host)


class Lab:
    def __init__(self, root: Path) -> None:
        self.host = ApplyHost(root, VENV)
        self.runs = 0

    def gate_opts(self) -> GateOptions:
        self.runs += 1
        stamp = f"2026-11-21T09:{self.runs // 60:02d}:{self.runs % 60:02d}+00:00"
        checks = {"health": health(self.host), "bench": bench, "clock": Clock()}
        return GateOptions("ops@ctl", stamp, "d" * 64, 3, **checks)

    def apply(self, variant: tuple[int, str], check: bool = False, break_lock: bool = False) -> Any:
        gate = self.gate_opts()

        def after_host(context: HostContext, remote: Any, lock: Any, failure: str) -> dict[str, Any]:
            return gate_host(context, remote, lock, gate, failure).to_json()

        opts = RunOptions(
            forks=1, command_timeout_s=30, check=check, break_lock=break_lock, lock_owner="test",
            after_host=None if check else after_host,
        )  # fmt: skip
        return run_playbook(PLAYBOOK, {"gpu1": ctx(variant)}, lambda c: self.host, opts, time.monotonic)

    def killed_then_finished(self, variant: tuple[int, str], after: int) -> None:
        self.host.kill_in = after
        with contextlib.suppress(Killed):
            self.apply(variant)
        self.host.revive()
        self.apply(variant, break_lock=True)  # the dead run's lock is still there

    def rollback(self, variant: tuple[int, str]) -> None:
        with contextlib.suppress(VllmctlError):  # nothing earlier is known-good: nothing is touched
            roll_back_host(ctx(variant), self.host, self.gate_opts())

    def serving(self) -> tuple[int, str] | None:
        """The variant whose units and env file are what runs, when a known-good release runs."""
        state = read_releases(self.host, "gpu1", 10)
        current = state.get(state.current)
        if current is None or current.status != "good" or current.manifest is None:
            return None
        units = current.manifest.units
        assert all(self.host.units().get(u, {}).get("active_state") == "active" for u in units)
        env = self.host.local("/etc/vllmctl/m.env").read_text()
        return next(v for v in VARIANTS if wanted(v) == (units, env))


def wanted(variant: tuple[int, str]) -> tuple[dict[str, str], str]:
    """The units and env file apply writes for `variant`."""
    context = ctx(variant)
    units = desired_manifest(context, GateOptions()).units
    return units, render_env(context, context.inventory.models["m"])


STEP = st.one_of(
    st.tuples(st.just("apply"), st.sampled_from(VARIANTS)),
    st.tuples(st.just("rollback"), st.sampled_from(VARIANTS)),
    st.tuples(st.just("killed"), st.sampled_from(VARIANTS), st.integers(0, 40)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(STEP, min_size=1, max_size=5))
def test_planning_what_serves_changes_nothing_after_any_history(steps: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        lab = Lab(Path(scratch))
        for step in steps:
            if step[0] == "apply":
                lab.apply(step[1])
            elif step[0] == "rollback":
                lab.rollback(step[1])
            else:
                lab.killed_then_finished(step[1], step[2])
        variant = lab.serving()
        if variant is None:  # nothing known-good serves (a first release that failed): nothing to match
            return
        planned = lab.apply(variant, check=True)
        steps_planned = [
            f"{s.step.op} {s.step.target}: {s.step.rendered()}"
            for s in planned.hosts["gpu1"].steps
            if s.status == "planned"
        ]
        assert planned.changed == 0, steps_planned
        outcome = gate_host(ctx(variant), lab.host, lambda: None, lab.gate_opts())
        assert outcome.status == "unchanged", outcome
