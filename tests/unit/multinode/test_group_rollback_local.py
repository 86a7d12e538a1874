"""Group releases end to end on two temp-dir nodes (the real group steps in bash, systemctl and `ray status`
stand-ins) through the `connect` factory: after the gate's rollback and after a rollback by hand, what the
next apply would compare (releases, installed units, the head's env record) says the serving group is
unchanged (#19)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from gate_flow import bench
from local_remote import LocalRemote
from ray_texts import ray_status

from vllmctl.bench.health import HealthResult
from vllmctl.inventory.model import DriverSpec, EngineSpec, Host, Inventory, SshSettings
from vllmctl.releases.group import GroupSpec, group_manifests
from vllmctl.runner.multinode.apply_groups import pending_changes
from vllmctl.runner.multinode.cluster_release import deploy_group
from vllmctl.runner.multinode.group_gate import GroupGateOptions
from vllmctl.runner.multinode.group_nodes import Nodes, group_units, read_engine_env, read_states, read_units
from vllmctl.runner.multinode.group_rollback import roll_back_group

VENV = "/opt/vllmctl/venvs/vllm-0.11.0"
NODES = ("gpu-01", "gpu-02")
GROUP, MODEL = "tiny", "tiny"
RAY, ENGINE = f"vllmctl-ray-{GROUP}.service", f"vllmctl-{MODEL}-0.service"
ENV_FILE = f"/etc/vllmctl/{MODEL}.env"
SYSTEMCTL = """#!/bin/bash
echo "systemctl $*" >> "$ROOT/calls"
verb=$1; shift; skip=0; now=0; units=()
for a in "$@"; do
  if [ $skip = 1 ]; then skip=0; continue; fi
  case $a in -p) skip=1;; --now) now=1;; -*) ;; *) units+=("$a");; esac
done
for u in "${units[@]}"; do case $verb in
  start|restart) if grep -qs -- --no-start "$ROOT/etc/systemd/system/$u"; then
                   echo "Job for $u failed." >&2; exit 1; fi
                 touch "$ROOT/active/$u";;
  stop) rm -f "$ROOT/active/$u";;
  disable) [ $now = 1 ] && rm -f "$ROOT/active/$u";;
  is-active) [ -e "$ROOT/active/$u" ] && echo active || echo inactive;;
  show) s=inactive; [ -e "$ROOT/active/$u" ] && s=active
        printf 'Id=%s\\nActiveState=%s\\nSubState=running\\nNRestarts=0\\n\\n' "$u" "$s";; esac; done
true
"""


def inventory() -> Inventory:
    hosts = {
        name: Host(name, f"10.0.0.{i + 1}", SshSettings(), None, DriverSpec(), EngineSpec())
        for i, name in enumerate(NODES)
    }
    return Inventory(path="inv.yml", hosts=hosts, groups={}, models={})


def spec(flags: str) -> GroupSpec:
    return GroupSpec(
        group=GROUP,
        model=MODEL,
        head=NODES[0],
        nodes=NODES,
        tp=8,
        pp=2,
        gpus_per_node=8,
        ray_address="10.0.0.1:6379",
        engine="vllm",
        engine_version="0.11.0",
        venv_path=VENV,
        units={
            NODES[0]: {RAY: "[Service]\n# ray head\n", ENGINE: f"[Service]\nExecStart=vllm serve {flags}\n"},
            NODES[1]: {RAY: "[Service]\n# ray worker\n"},
        },
        models={MODEL: {"source": "/srv/models/tiny", "ports": [8000]}},
    )


@pytest.fixture
def hosts(tmp_path: Path) -> dict[str, LocalRemote]:
    found = {}
    for name in NODES:
        remote = LocalRemote(tmp_path / name, name, SYSTEMCTL)
        ray = remote.local(f"{VENV}/bin/ray")
        ray.parent.mkdir(parents=True)
        ray.write_text(f"#!/bin/sh\ncat <<'EOF'\n{ray_status(2, 16.0)}EOF\n")
        ray.chmod(0o755)
        (ray.parent / "python").touch(mode=0o755)
        remote.local("/etc/vllmctl").mkdir(parents=True)
        found[name] = remote
    return found


def options(hosts: dict[str, LocalRemote], second: int) -> GroupGateOptions:
    head = hosts[NODES[0]]

    def health(url: str, model: str, deadline_s: float, on_progress: Any, api_key: str | None = None) -> Any:
        unit = head.local(f"/etc/systemd/system/{ENGINE}").read_text()
        ok = (head.root / "active" / ENGINE).exists() and "--bogus" not in unit
        return HealthResult(ok, 1.0, 2, "ready" if ok else "health", "" if ok else "connection refused")

    return GroupGateOptions(
        owner="ops@ctl",
        created_at=f"2026-11-21T09:00:{second:02d}+00:00",
        health=health,
        bench=bench,
        connect=lambda host: hosts[host.name],
        sleep=lambda seconds: None,
    )


def write_env(hosts: dict[str, LocalRemote], text: str) -> None:
    hosts[NODES[0]].local(ENV_FILE).write_text(text)


def changes_for(hosts: dict[str, LocalRemote], flags: str) -> list[str]:
    """What `apply --check` of `flags` with the head's env file as it is would change."""
    wanted = group_manifests(spec(flags), "2026-11-21T10:00:00+00:00", "ops@ctl", "d" * 64)
    nodes = Nodes(inventory(), NODES, 10, connect=lambda host: hosts[host.name])
    try:
        states = read_states(nodes, GROUP)
        installed = read_units(nodes, group_units(GROUP, MODEL, NODES))
        env = read_engine_env(nodes, GROUP, MODEL)
    finally:
        nodes.close()
    return pending_changes(wanted, states, installed, env.changed())


def test_a_group_rolled_back_by_hand_or_by_its_gate_is_what_apply_finds(
    hosts: dict[str, LocalRemote],
) -> None:
    inv, log = inventory(), []
    write_env(hosts, "HF_TOKEN=one\n")
    first = deploy_group(inv, spec("--max-num-seqs 8"), options(hosts, 1), log.append)
    second = deploy_group(inv, spec("--max-num-seqs 16"), options(hosts, 2), log.append)
    assert (first.status, second.status) == ("passed", "passed")
    assert changes_for(hosts, "--max-num-seqs 16") == []

    back = roll_back_group(inv, GROUP, MODEL, NODES, None, options(hosts, 3), log.append)
    assert (back.status, back.rolled_back_to) == ("reactivated", first.release)
    assert changes_for(hosts, "--max-num-seqs 8") == []
    assert not hosts[NODES[0]].local("/var/lib/vllmctl/lock").exists()

    write_env(hosts, "HF_TOKEN=two\n")  # a rotated token with a release the engine refuses
    bad = deploy_group(inv, spec("--bogus"), options(hosts, 4), log.append)
    assert bad.status == "rolled_back" and bad.rolled_back_to == second.release, bad
    # the engine started again with the rotated token: that is what the head's record says now
    assert changes_for(hosts, "--max-num-seqs 16") == []
    write_env(hosts, "HF_TOKEN=one\n")
    assert changes_for(hosts, "--max-num-seqs 16") == [
        f"{NODES[0]}: {ENV_FILE} changed: the engine would be restarted"
    ]


def launcher_spec(flags: str) -> GroupSpec:
    """Launcher vllm: the engine unit on both nodes (rank 1 headless), no Ray unit, no Ray address."""
    units = {
        node: {ENGINE: f"[Service]\nExecStart=vllm serve {flags} --node-rank {i}\n"}
        for i, node in enumerate(NODES)
    }
    return replace(spec(flags), units=units, ray_address="", launcher="vllm")


def test_launcher_vllm_starts_the_headless_rank_before_rank_0_and_rolls_both_back(
    hosts: dict[str, LocalRemote],
) -> None:
    inv, log = inventory(), []
    for remote in hosts.values():  # launcher vllm never asks Ray: a call would fail the release
        remote.local(f"{VENV}/bin/ray").write_text("#!/bin/sh\nexit 99\n")
    first = deploy_group(inv, launcher_spec("--max-num-seqs 8"), options(hosts, 1), log.append)
    assert first.status == "passed" and first.ray is None, first
    again = deploy_group(inv, launcher_spec("--max-num-seqs 8"), options(hosts, 2), log.append)
    assert (again.status, again.release) == ("unchanged", first.release)
    started = [line for line in log if " started (" in line]
    assert started == [
        f"{NODES[1]}: {ENGINE} started (headless rank 1)",
        f"{NODES[0]}: {ENGINE} started (PP 2 x TP 8)",
    ]
    for remote in hosts.values():
        assert (remote.root / "active" / ENGINE).exists()
        assert not (remote.root / "active" / RAY).exists()

    bad = deploy_group(inv, launcher_spec("--bogus"), options(hosts, 3), log.append)
    assert (bad.status, bad.rolled_back_to) == ("rolled_back", first.release), bad
    for name, remote in hosts.items():
        unit = remote.local(f"/etc/systemd/system/{ENGINE}").read_text()
        assert "--max-num-seqs 8" in unit and (remote.root / "active" / ENGINE).exists(), name
    wanted = group_manifests(
        launcher_spec("--max-num-seqs 8"), "2026-11-21T10:00:00+00:00", "ops@ctl", "d" * 64
    )
    nodes = Nodes(inventory(), NODES, 10, connect=lambda host: hosts[host.name])
    try:
        states = read_states(nodes, GROUP)
        installed = read_units(nodes, group_units(GROUP, MODEL, NODES))
    finally:
        nodes.close()
    assert pending_changes(wanted, states, installed) == []


def test_an_engine_unit_that_will_not_start_rolls_the_group_back_on_every_node(
    hosts: dict[str, LocalRemote],
) -> None:
    """`systemctl start` of the engine failing (a bad unit, a missing binary) fails the release like a gate
    that failed: the group goes back to its known-good on every node, never left with `current` moved."""
    inv, log = inventory(), []
    first = deploy_group(inv, launcher_spec("--max-num-seqs 8"), options(hosts, 1), log.append)
    assert first.status == "passed", first
    bad = deploy_group(inv, launcher_spec("--no-start"), options(hosts, 2), log.append)
    assert (bad.status, bad.rolled_back_to) == ("rolled_back", first.release), bad
    assert any(f"systemctl start -- {ENGINE}` failed" in reason for reason in bad.reasons), bad.reasons
    for name, remote in hosts.items():
        unit = remote.local(f"/etc/systemd/system/{ENGINE}").read_text()
        assert "--max-num-seqs 8" in unit and (remote.root / "active" / ENGINE).exists(), name
    states = {}
    nodes = Nodes(inventory(), NODES, 10, connect=lambda host: hosts[host.name])
    try:
        states = read_states(nodes, GROUP)
    finally:
        nodes.close()
    assert {name: state.current for name, state in states.items()} == dict.fromkeys(NODES, first.release)
