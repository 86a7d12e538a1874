"""The GPU health gate and Fabric Manager on real lab hosts (HGX profiles: three of 8 H100 on NVSwitches, one
HGX B200 on NVLink5, which has no NVSwitch nodes: ConnectX bridges whose VPD says SW_MNG manage its switches).

One host logged a reset-class Xid since boot (then 60 application-class ones), one has MIG on a GPU its model
uses: both are refused before their engine starts, with the evidence, while the healthy third host gets Fabric
Manager at its driver's exact version (its fabric turns Completed only then), deploys and serves, and
`apply --check` afterwards is 0 changed. The B200 is refused while its fabric is In Progress, gets NVLSM,
ib_umad and Fabric Manager, and serves. A Fabric Manager a patch apart is replaced, never left running. The
engine is the lab's vLLM stand-in (no Ray: a single-node engine), so no real vLLM is installed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_lab import PROMETHEUS, Prometheus, export_all
from standin_wheel import PACKAGE, ensure_standin_wheel

from vllmctl.lab.testing import LabFleet, LabHostInfo, start_fleet, stop_fleet
from vllmctl.ops.gpu_health import verdict

pytestmark = pytest.mark.lab

UNIT = "vllmctl-tiny-0.service"
CLEAR_DRIVER = (
    "import json; p='/etc/vllmctl-lab/gpus.json'; d=json.load(open(p)); d['driver']=None; "
    "json.dump(d, open(p, 'w'))"
)
XID_79 = "NVRM: Xid (PCI:0000:18:00): 79, pid=0, name=lab, GPU has fallen off the bus."
XID_13 = "NVRM: Xid (PCI:0000:18:00): 13, pid=$i, name=python3, Graphics SM Warp Exception on (GPC 0)"
# Xid 79's GPU 0 is gone from nvidia-smi's list, as after a fall off the bus; lspci still shows it (rev ff)
LOSE_GPU_0 = (
    "import json; p='/etc/vllmctl-lab/gpus.json'; d=json.load(open(p)); d['gpus'][0]['lost']=True; "
    "json.dump(d, open(p, 'w'))"
)
SET_MIG = (
    "import json; p='/etc/vllmctl-lab/gpus.json'; d=json.load(open(p)); d['gpus'][0]['mig_mode']='Enabled'; "
    "json.dump(d, open(p, 'w'))"
)


@dataclass
class Gate:
    fleet: LabFleet
    inventory: Path
    state: Path

    def vllmctl(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "250", "XDG_STATE_HOME": str(self.state)}
        argv = [sys.executable, "-m", "vllmctl", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)

    def sh(self, host: LabHostInfo, command: str) -> str:
        result = self.fleet.ssh(host, command, timeout=60)
        assert result.returncode == 0, f"{command}: {result.stderr}"
        return result.stdout


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gate]:
    from vllmctl.lab.tinymodel import ensure_tiny_model

    name = f"pt{os.getpid()}-gate"
    work = tmp_path_factory.mktemp("gpugate")
    model_dir = Path(f"/var/tmp/vllmctl-gate-{os.getpid()}/tiny")
    try:
        fleet = start_fleet(name, 4, work / "lab.yml", gpus="8xH100-80GB,8xH100-80GB,8xH100-80GB,8xB200")
        version, _ = ensure_standin_wheel(fleet.directory / "wheels")
        shutil.copytree(ensure_tiny_model(), model_dir, dirs_exist_ok=True)
        doc: dict[str, Any] = yaml.safe_load(fleet.inventory.read_text())
        engine = {"name": "vllm", "package": PACKAGE, "version": version, "index_url": fleet.index_url}
        doc["defaults"]["engine"] = engine
        hosts = [h.name for h in fleet.hosts]
        # the stand-in starts only with the Ray backend; without a Ray cluster in its env it serves alone
        args = {"distributed_executor_backend": "ray"}
        doc["models"] = {
            "tiny": {"source": str(model_dir), "hosts": hosts, "port": 8000, "engine_args": args}
        }
        inventory = work / "gate.yml"
        inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
        xid_host, mig_host, *_ = fleet.hosts
        found = Gate(fleet, inventory, work)
        found.sh(xid_host, f"logger -t kernel '{XID_79}'")  # what the kernel logs, in this boot's journal
        # the usual aftermath: 60 application-class Xids after it, more than the 50 lines once read
        found.sh(xid_host, f'for i in $(seq 60); do logger -t kernel "{XID_13}"; done')
        found.sh(xid_host, f'sudo python3 -c "{LOSE_GPU_0}"')
        found.sh(mig_host, f'sudo python3 -c "{SET_MIG}"')
        yield found
    finally:
        stop_fleet(name)
        shutil.rmtree(model_dir.parent, ignore_errors=True)


def test_facts_show_the_hgx_profile_and_each_hosts_evidence_before_apply(gate: Gate) -> None:
    xid_host, mig_host, good, b200 = gate.fleet.hosts
    shown = gate.vllmctl("facts", str(gate.inventory), "--json")
    assert shown.returncode == 0, shown.stderr
    facts = {name: found["facts"]["gpu_health"] for name, found in json.loads(shown.stdout).items()}
    fresh = facts[good.name]
    assert fresh["nvswitch"] == [f"/dev/nvidia-nvswitch{i}" for i in range(4)]
    # no Fabric Manager yet: the fabric is not trained
    assert {(g["fabric_state"], g["persistence_mode"]) for g in fresh["smi"]["gpus"]} == {
        ("Not Started", "Enabled")
    }
    assert fresh["xid"] == [] and fresh["smi"]["driver_version"] == "580.95.05"
    assert [(x["xid"], x["count"]) for x in facts[xid_host.name]["xid"]] == [(13, 60), (79, 1)]
    assert facts[mig_host.name]["smi"]["gpus"][0]["mig_mode"] == "Enabled"
    table = gate.vllmctl("facts", str(gate.inventory)).stdout
    assert "refused: fabric: GPU 0" in table and "Xid 79" in table and "mig: GPU 0" in table
    assert len(facts[xid_host.name]["smi"]["gpus"]) == 7 and len(facts[xid_host.name]["nvidia_pci"]) == 8
    assert "gpu count: nvidia-smi lists 7 GPUs, the inventory declares 8" in table
    nvlink5 = facts[b200.name]  # no NVSwitch node; the bridges' VPD in lspci tells it is NVLink5
    assert nvlink5["nvswitch"] == [] and nvlink5["nvlink5"] is True
    assert nvlink5["nvlink5_bridges"] == ["c1:00.0", "c2:00.0", "c3:00.0", "c4:00.0"]
    assert {g["fabric_state"] for g in nvlink5["smi"]["gpus"]} == {"In Progress"}
    refused = verdict(nvlink5)
    assert refused.startswith("refused: fabric: GPU 0") and "on an NVLink5 host" in refused, refused


def test_refused_hosts_never_start_their_engine_while_the_healthy_one_serves(gate: Gate) -> None:
    xid_host, mig_host, good, b200 = gate.fleet.hosts
    applied = gate.vllmctl("apply", str(gate.inventory), "--json", "--health-timeout", "300")
    assert applied.returncode != 0
    doc = json.loads(applied.stdout)
    lost = "on the PCI bus but not listed: 18:00.0"  # the host that lost a GPU is refused naming it
    for host, evidence in (
        (xid_host, "Xid 79 (GPU has fallen off the bus)"),
        (xid_host, lost),
        (mig_host, "MIG mode Enabled"),
    ):
        result = doc["hosts"][host.name]
        assert result["status"] == "failed", result
        (step,) = [s for s in result["steps"] if s["op"] == "gpu_health"]
        assert step["status"] == "failed" and evidence in json.dumps(step), step
        assert "fabric" not in json.dumps(step)  # Fabric Manager ran there too: only the real fault is left
        assert not [s for s in result["steps"] if s["phase"] == "services"]
        state = gate.fleet.ssh(host, f"systemctl is-active {UNIT}").stdout.strip()
        assert state != "active"
    healthy = doc["hosts"][good.name]
    assert healthy["status"] == "ok", json.dumps(healthy, indent=1)[-5000:] + applied.stderr[-3000:]
    (fm,) = [s for s in healthy["steps"] if s["op"] == "fabric_manager"]
    assert fm["status"] == "changed" and "nvidia-fabricmanager-580=580.95.05-*" in " ".join(fm["commands"])
    (step,) = [s for s in healthy["steps"] if s["op"] == "gpu_health"]
    assert step["status"] == "ok" and "healthy: 8 GPUs, fabric Completed" in step["noop"]
    models = httpx.get(f"http://{good.address}:8000/v1/models", timeout=30, trust_env=False)
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "tiny"
    assert "nvidia-fabricmanager-580" in gate.sh(good, "apt-mark showhold").split()
    blacklist = gate.sh(good, "cat /etc/modprobe.d/blacklist-nouveau.conf")
    assert "blacklist nouveau\noptions nouveau modeset=0\n" in blacklist
    nvlink5 = doc["hosts"][b200.name]
    assert nvlink5["status"] == "ok", json.dumps(nvlink5, indent=1)[-5000:]
    steps = {s["op"]: s for s in nvlink5["steps"]}
    assert steps["nvlsm"]["status"] == "changed", steps["nvlsm"]
    assert "modprobe ib_umad" in steps["nvlsm"]["commands"], steps["nvlsm"]
    assert "nvidia-fabricmanager-580=580.95.05-*" in " ".join(steps["fabric_manager"]["commands"])
    assert "healthy: 8 GPUs, fabric Completed" in steps["gpu_health"]["noop"]
    held = gate.sh(b200, "apt-mark showhold").split()
    assert {"nvlsm", "nvidia-fabricmanager-580"} <= set(held), held
    assert gate.sh(b200, "cat /etc/modules-load.d/ib_umad.conf").splitlines()[-1] == "ib_umad"
    models = httpx.get(f"http://{b200.address}:8000/v1/models", timeout=30, trust_env=False)
    assert models.status_code == 200
    checked = gate.vllmctl(
        "apply", str(gate.inventory), "--check", "--json", "--limit", f"{good.name},{b200.name}"
    )
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
    recaps = {h: r["recap"]["changed"] for h, r in json.loads(checked.stdout)["hosts"].items()}
    assert recaps == {good.name: 0, b200.name: 0}
    # Fabric Manager gone: the B200's GPUs fall back to In Progress and the gate refuses it again
    gate.sh(b200, "sudo systemctl stop nvidia-fabricmanager.service")
    try:
        shown = gate.vllmctl("facts", str(gate.inventory), "--json", "--limit", b200.name)
        health = json.loads(shown.stdout)[b200.name]["facts"]["gpu_health"]
        assert verdict(health).startswith("refused: fabric: GPU 0"), verdict(health)
    finally:
        gate.sh(b200, "sudo systemctl start nvidia-fabricmanager.service")


def test_a_mismatched_fabric_manager_is_replaced_never_left_running(gate: Gate) -> None:
    good = gate.fleet.hosts[2]
    install = "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades "
    install += "--allow-change-held-packages nvidia-fabricmanager-580=580.82.07-1"
    gate.sh(good, install + " && sudo systemctl restart nvidia-fabricmanager.service || true")
    assert gate.fleet.ssh(good, "systemctl is-active nvidia-fabricmanager.service").stdout.strip() != "active"
    assert "interface version 580.82.07 don't match with driver version 580.95.05" in gate.sh(
        good, "sudo journalctl -u nvidia-fabricmanager.service --no-pager -o cat"
    )
    assert "Not Started" in gate.sh(good, "nvidia-smi -q | grep -A1 Fabric")
    applied = gate.vllmctl(
        "apply", str(gate.inventory), "--json", "--playbook", "drivers", "--limit", good.name
    )
    assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-2000:]
    (fm,) = [
        s for s in json.loads(applied.stdout)["hosts"][good.name]["steps"] if s["op"] == "fabric_manager"
    ]
    assert fm["commands"][:2] == [
        "systemctl stop nvidia-fabricmanager.service",
        "apt-mark unhold nvidia-fabricmanager-580",
    ]
    version = gate.sh(good, "dpkg-query -W -f='${Version}' nvidia-fabricmanager-580")
    assert version == "580.95.05-1"
    assert "Completed" in gate.sh(good, "nvidia-smi -q | grep -A1 Fabric")
    assert gate.sh(good, "systemctl is-active nvidia-fabricmanager.service").strip() == "active"


def test_a_fresh_driver_install_holds_every_package_of_its_branch(gate: Gate) -> None:
    host = gate.fleet.hosts[0]
    remove = "sudo env DEBIAN_FRONTEND=noninteractive apt-get remove -y -q --allow-change-held-packages"
    gate.sh(host, f"{remove} nvidia-driver-580 2>/dev/null || true")  # when installed by an earlier apply
    gate.sh(host, f'sudo python3 -c "{CLEAR_DRIVER}"')  # a host whose driver is not installed
    assert gate.fleet.ssh(host, "nvidia-smi").returncode == 9
    applied = gate.vllmctl(
        "apply", str(gate.inventory), "--json", "--playbook", "drivers", "--limit", host.name
    )
    assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-2000:]
    (driver,) = [
        s for s in json.loads(applied.stdout)["hosts"][host.name]["steps"] if s["op"] == "nvidia_driver"
    ]
    assert driver["status"] == "changed" and "xargs -r apt-mark hold" in driver["commands"][-1]
    held = gate.sh(host, "apt-mark showhold").split()
    assert "nvidia-driver-580" in held and "nvidia-fabricmanager-580" in held
    # apt itself parses the unattended-upgrades blacklist (a broken apt.conf.d file would fail every apt run)
    config = gate.sh(host, "apt-config dump Unattended-Upgrade::Package-Blacklist")
    assert 'Unattended-Upgrade::Package-Blacklist:: "libnvidia-";' in config, config
    assert 'Unattended-Upgrade::Package-Blacklist:: "nvidia-";' in config, config
    # the package's unit passes --no-persistence-mode, as Ubuntu's does: vllmctl's drop-in runs it without
    (persistence,) = [
        s for s in json.loads(applied.stdout)["hosts"][host.name]["steps"] if s["op"] == "persistence"
    ]
    assert persistence["status"] == "changed", persistence
    assert persistence["commands"][-1] == "systemctl restart nvidia-persistenced.service", persistence
    running = gate.sh(host, "systemctl show -p ExecStart nvidia-persistenced.service")
    assert "--no-persistence-mode" not in running and "argv[]=/usr/bin/nvidia-persistenced --user" in running
    modes = gate.sh(host, "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader").split()
    assert modes == ["Enabled"] * 7, modes  # this is the Xid 79 host: its GPU 0 fell off the bus
    again = gate.vllmctl(
        "apply", str(gate.inventory), "--json", "--playbook", "drivers", "--limit", host.name
    )
    assert json.loads(again.stdout)["hosts"][host.name]["recap"]["changed"] == 0, again.stdout[-3000:]


def test_facts_show_the_hardware_keys_and_p2p_is_judged_on_the_gpus_a_replica_spans(gate: Gate) -> None:
    good = gate.fleet.hosts[2]
    shown = gate.vllmctl("facts", str(gate.inventory), "--json", "--limit", good.name)
    assert shown.returncode == 0, shown.stderr
    health = json.loads(shown.stdout)[good.name]["facts"]["gpu_health"]
    assert health["p2p"]["gpus"] == list(range(8)) and set(health["p2p"]["status"].values()) == {"OK"}
    assert health["secure_boot"] in (None, False) and health["kernel_release"]
    assert health["nvlink5"] is False and health["acs_bridges"] == [] and health["dcgm"] is False
    edit = "import json; p='/etc/vllmctl-lab/gpus.json'; d=json.load(open(p)); {}; json.dump(d, open(p, 'w'))"
    # a CNS pair behind a PCIe switch whose ACS is on, as the lab's lspci shows it (lab/fake_lspci.py)
    broken = "d['p2p']={'0,1': 'CNS'}; d['pci_bridges']=[{'address': '42:08.0', 'acs': True}]"
    gate.sh(good, 'sudo python3 -c "' + edit.format(broken) + '"')
    try:
        shown = gate.vllmctl("facts", str(gate.inventory), "--json", "--limit", good.name)
        health = json.loads(shown.stdout)[good.name]["facts"]["gpu_health"]
        assert health["acs_bridges"] == ["42:08.0"]
        assert "ACS on at PCI bridges 42:08.0" in verdict(health)  # the evidence the refusal names
        table = gate.vllmctl("facts", str(gate.inventory), "--limit", good.name).stdout
        # `facts` knows no model: every pair is judged
        assert "refused: p2p: GPU 0 -> GPU 1 P2P read CNS" in table, table
        status = gate.vllmctl(
            "status", str(gate.inventory), "--json", "--limit", good.name, "--interval", "0.2"
        )
        gated = json.loads(status.stdout)["gpu_gate"][good.name]
        # the tiny model runs on one GPU (tensor_parallel_size 1): no pair of it to judge, the gate passes
        assert gated["status"] == "passed" and gated["reason"].startswith("healthy: 8 GPUs"), gated
    finally:  # the host serves as before for whatever runs after
        gate.sh(
            good, 'sudo python3 -c "' + edit.format("d.pop('p2p', None); d.pop('pci_bridges', None)") + '"'
        )
    assert "p2p" not in gate.vllmctl("facts", str(gate.inventory), "--limit", good.name).stdout


def test_dcgm_exporter_runs_and_the_quick_diag_passes_once_per_boot_before_the_engine(gate: Gate) -> None:
    """driver.dcgm_exporter and dcgm_diag on the healthy host, from the lab repository's stand-ins: the
    exporter package installed and its service running, `dcgmi diag -r 1` run in the gpu phase and its pass
    recorded with the boot id, so the next apply plans nothing; `export prometheus` lists the exporter."""
    good = gate.fleet.hosts[2]
    doc = yaml.safe_load(gate.inventory.read_text())
    doc["hosts"][good.name]["driver"] = {"branch": "580", "dcgm_exporter": True, "dcgm_diag": True}
    inventory = gate.inventory.with_name("dcgm.yml")
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    applied = gate.vllmctl("apply", str(inventory), "--json", "--limit", good.name, "--health-timeout", "300")
    assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-2000:]
    steps = {s["op"]: s for s in json.loads(applied.stdout)["hosts"][good.name]["steps"]}
    exporter, diag = steps["dcgm_exporter"], steps["dcgm_diag"]
    assert exporter["status"] == "changed" and any(
        "apt-get install -y -q datacenter-gpu-manager-exporter" in c for c in exporter["commands"]
    ), exporter
    assert diag["status"] == "changed" and "dcgmi diag -r 1" in diag["commands"][-1], diag
    assert gate.sh(good, "systemctl is-active nvidia-dcgm-exporter.service").strip() == "active"
    boot_id = gate.sh(good, "cat /proc/sys/kernel/random/boot_id")
    assert gate.sh(good, "sudo cat /var/lib/vllmctl/state/dcgm-diag.passed") == boot_id
    checked = gate.vllmctl("apply", str(inventory), "--check", "--json", "--limit", good.name)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
    again = {s["op"]: s for s in json.loads(checked.stdout)["hosts"][good.name]["steps"]}
    assert again["dcgm_diag"]["noop"] == f"passed since this boot ({boot_id[:8]})", again["dcgm_diag"]
    assert json.loads(checked.stdout)["hosts"][good.name]["recap"]["changed"] == 0
    exported = json.loads(gate.vllmctl("export", "prometheus", str(inventory)).stdout)
    dcgm = [g for g in exported if g["labels"].get("component") == "dcgm-exporter"]
    assert dcgm == [
        {
            "targets": [f"{good.address}:9400"],
            "labels": {"job": "vllmctl", "host": good.name, "component": "dcgm-exporter"},
        }
    ]


def _edit_gpus(gate: Gate, host: LabHostInfo, change: str) -> None:
    edit = "import json; p='/etc/vllmctl-lab/gpus.json'; d=json.load(open(p)); {}; json.dump(d, open(p, 'w'))"
    gate.sh(host, 'sudo python3 -c "' + edit.format(change) + '"')


@pytest.mark.skipif(PROMETHEUS is None, reason="Debian's prometheus package not installed")
def test_gpu_panels_and_alerts_read_what_the_exporter_serves_through_a_real_prometheus(
    gate: Gate, tmp_path: Path
) -> None:
    """The healthy host's DCGM Exporter (the lab stand-in serves exactly its counters file's fields) runs
    with vllmctl's counters: a real Prometheus scraping what `export prometheus` lists returns a series for
    every GPU panel of `export grafana` and every DCGM field `export alerts` reads, and nothing fires on the
    healthy host; a reset-class Xid fires at once, a GPU gone from NVML's list and a stopped Fabric Manager
    turn their alerts pending (their `for` windows are promtool's unit tests)."""
    good = gate.fleet.hosts[2]
    inventory = gate.inventory.with_name("dcgm.yml")
    assert inventory.exists(), "runs after the DCGM exporter test, on its inventory"
    shown = gate.sh(good, "systemctl show -p ExecStart nvidia-dcgm-exporter.service")
    assert "-f /etc/dcgm-exporter/vllmctl-counters.csv" in shown, shown
    scrape, rules, board = export_all(gate.vllmctl, inventory, inventory, tmp_path)
    prometheus = Prometheus(tmp_path, scrape, rules)
    try:
        read = f'up{{component="dcgm-exporter", host="{good.name}"}} == 1'
        assert _wait_for(lambda: prometheus.query(read), 60), "the exporter was never scraped"
        dashboard = json.loads((board / "vllmctl-fleet.json").read_text())
        gpu = [
            (panel["title"], target["expr"])
            for row in dashboard["panels"]
            for panel in row["panels"]
            for target in panel["targets"]
            if "DCGM_FI_" in target["expr"]
        ]
        assert len(gpu) >= 6, gpu
        assert [(title, expr) for title, expr in gpu if not prometheus.query(expr)] == []
        groups = {g["name"]: g["rules"] for g in yaml.safe_load(rules.read_text())["groups"]}
        names = {"VllmctlGpuXidNeedsReset", "VllmctlGpuEccUncorrectable", "VllmctlFabricManagerDown"}
        assert names | {"VllmctlGpuCountDropped"} <= {r["alert"] for r in groups["vllmctl-gpus"]}
        fields = {f for r in groups["vllmctl-gpus"] for f in re.findall(r"DCGM_FI_[A-Z_]+", r["expr"])}
        assert [f for f in sorted(fields) if not prometheus.query(f'{f}{{host="{good.name}"}}')] == []
        assert not [a for a in prometheus.firing_labels() if a["alertname"] in names]

        _edit_gpus(gate, good, "d['gpus'][3]['last_xid']=79")
        xid = ("VllmctlGpuXidNeedsReset", good.name, "3")
        assert _wait_for(
            lambda: (
                xid in {(a["alertname"], a.get("host"), a.get("gpu")) for a in prometheus.firing_labels()}
            ),
            60,
        ), prometheus.firing_labels()
        _edit_gpus(gate, good, "d['gpus'][5]['lost']=True")
        gate.sh(good, "sudo systemctl stop nvidia-fabricmanager.service")
        wanted = {"VllmctlGpuCountDropped", "VllmctlFabricManagerDown"}
        assert _wait_for(lambda: wanted <= {a for a, _ in prometheus.pending()}, 60), prometheus.pending()
    finally:
        prometheus.close()
        _edit_gpus(gate, good, "d['gpus'][3].pop('last_xid', None); d['gpus'][5].pop('lost', None)")
        gate.sh(good, "sudo systemctl start nvidia-fabricmanager.service")


def _wait_for(check: Any, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(2)
    return False


def test_gpu_memory_a_foreign_process_holds_refuses_the_host_before_any_start_and_its_engine_serves_on(
    gate: Gate,
) -> None:
    """#36: a process outside vllmctl's units holds 70,000 MiB of GPU 0 (the lab's nvidia-smi lists it as a
    compute app and counts it in memory.used): the planned share no longer fits, so `apply` fails that host
    at its gate with the pid and the fix, nothing is restarted and the running engine serves on; once the
    process is gone the next apply passes that gate."""
    good = gate.fleet.hosts[2]
    used = "import json; p='/etc/vllmctl-lab/gpus.json'; d=json.load(open(p)); "
    used += "d['gpus'][0]['memory_used_mib']={}; json.dump(d, open(p, 'w'))"
    gate.sh(good, "sudo systemd-run --quiet --unit someone-elses-job sleep 900")
    pid = gate.sh(good, "systemctl show -p MainPID --value someone-elses-job.service").strip()
    apps = "/run/vllmctl-lab/compute-apps"  # the lab nvidia-smi's compute-apps list: pid, GPU, MiB
    gate.sh(good, f"sudo mkdir -p /run/vllmctl-lab && echo '{pid} 0 70000' | sudo tee {apps} >/dev/null")
    gate.sh(good, f'sudo python3 -c "{used.format(70000)}"')
    started = gate.sh(good, f"systemctl show -p ActiveEnterTimestampMonotonic --value {UNIT}").strip()
    try:
        applied = gate.vllmctl("apply", str(gate.inventory), "--json", "--limit", good.name)
        assert applied.returncode == 1, applied.stdout[-3000:] + applied.stderr[-2000:]
        result = json.loads(applied.stdout)["hosts"][good.name]
        (step,) = [s for s in result["steps"] if s["op"] == "gpu_memory"]
        assert result["status"] == "failed" and step["status"] == "failed", step
        evidence = json.dumps(step)
        assert f"pid {pid} (70000 MiB)" in evidence and "lower gpu_memory_utilization to at most" in evidence
        assert not [s for s in result["steps"] if s["phase"] == "services"]
        now = gate.sh(good, f"systemctl show -p ActiveEnterTimestampMonotonic --value {UNIT}").strip()
        assert now == started  # the engine was never restarted
        models = httpx.get(f"http://{good.address}:8000/v1/models", timeout=30, trust_env=False)
        assert models.status_code == 200
    finally:
        gate.sh(
            good, "sudo systemctl stop someone-elses-job.service; sudo rm -f /run/vllmctl-lab/compute-apps"
        )
        gate.sh(good, f'sudo python3 -c "{used.format(0)}"')
    checked = gate.vllmctl("apply", str(gate.inventory), "--check", "--json", "--limit", good.name)
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
    steps = {s["op"]: s for s in json.loads(checked.stdout)["hosts"][good.name]["steps"]}
    assert steps["gpu_memory"]["noop"] == "every planned GPU share is free of other processes"


def test_a_link_down_and_a_narrow_pcie_link_are_warned_while_the_host_serves(gate: Gate) -> None:
    """GPU 3 loses NVLink link 5 and GPU 6 trains its PCIe link at x8 of x16 (gpus.json, which the lab's
    nvidia-smi answers `nvlink -s` and `-q` from): `apply` serves the host, its gate step passing with both
    as warnings, and `facts` shows both after the healthy verdict."""
    good = gate.fleet.hosts[2]
    edit = "import json; p='/etc/vllmctl-lab/gpus.json'; d=json.load(open(p)); {}; json.dump(d, open(p, 'w'))"
    faults = "d['gpus'][3]['nvlink_down']=[5]; d['gpus'][6]['pcie']['width_current']=8"
    link = "GPU 3 (00000000:48:00.0) has NVLink link 5 inactive, 17 of 18 up"
    narrow = "GPU 6 (00000000:78:00.0) PCIe link trained at x8 of x16"
    gate.sh(good, 'sudo python3 -c "' + edit.format(faults) + '"')
    try:
        applied = gate.vllmctl("apply", str(gate.inventory), "--json", "--limit", good.name)
        assert applied.returncode == 0, applied.stdout[-3000:] + applied.stderr[-2000:]
        result = json.loads(applied.stdout)["hosts"][good.name]
        (step,) = [s for s in result["steps"] if s["op"] == "gpu_health"]
        assert step["status"] == "ok" and step["noop"].startswith("healthy: 8 GPUs"), step
        warned = [w.split(": ", 1)[1].split(" (`")[0] for w in step["warnings"]]
        assert warned == [link, narrow], step["warnings"]
        assert [s for s in result["steps"] if s["phase"] == "services"]
        models = httpx.get(f"http://{good.address}:8000/v1/models", timeout=30, trust_env=False)
        assert models.status_code == 200
        shown = gate.vllmctl("facts", str(gate.inventory), "--json", "--limit", good.name)
        assert shown.returncode == 0, shown.stderr
        health = json.loads(shown.stdout)[good.name]["facts"]["gpu_health"]
        links = {r["index"]: r for r in health["nvlink_links"]}
        assert (links[3]["links"], links[3]["inactive"]) == (18, [5])
        assert {i for i, r in links.items() if r["inactive"]} == {3}
        assert health["smi"]["gpus"][6]["pcie"]["width_current"] == 8
        table = " ".join(gate.vllmctl("facts", str(gate.inventory), "--limit", good.name).stdout.split())
        assert "healthy: 8 GPUs, fabric Completed; warning: nvlink: " + link in table, table
        assert "warning: pcie: " + narrow in table, table
    finally:  # the host serves as before for whatever runs after
        heal = "d['gpus'][3].pop('nvlink_down', None); d['gpus'][6]['pcie']['width_current']=16"
        gate.sh(good, 'sudo python3 -c "' + edit.format(heal) + '"')
    assert "warning:" not in gate.vllmctl("facts", str(gate.inventory), "--limit", good.name).stdout
