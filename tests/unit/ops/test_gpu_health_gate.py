"""The GPU health gate's judgement beyond the recorded cases: which Xids refuse a host, MIG only on the GPUs
a model uses, and the line `vllmctl facts` shows; the playbook runs it before any engine starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllmctl.commands.facts import summarize
from vllmctl.ops.gpu_health import RESET_XIDS, gpu_findings, tp_warnings, verdict
from vllmctl.tasks.playbooks import load_playbook

FACTS = Path(__file__).parents[1] / "facts" / "gpu_health"


def fact(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FACTS / f"{name}.json").read_text())["fact"]
    return loaded


def with_xid(code: int, text: str = "") -> dict[str, Any]:
    return {**fact("hgx_h100_healthy"), "xid": [{"xid": code, "pci": "0000:18:00", "text": text}]}


@pytest.mark.parametrize("code", sorted(RESET_XIDS))
def test_every_reset_class_xid_since_boot_refuses_the_host(code: int) -> None:
    (finding,) = gpu_findings(with_xid(code), None)
    assert finding.check == "xid" and f"Xid {code}" in finding.evidence and "reboot" in finding.fix


@pytest.mark.parametrize("code", [13, 31, 43, 45, 94])  # application faults, contained ECC: restart the app
def test_application_class_xids_do_not_refuse(code: int) -> None:
    assert gpu_findings(with_xid(code), None) == []


def test_xid_154_refuses_only_when_it_asks_for_a_reset_or_reboot() -> None:
    assert gpu_findings(
        with_xid(154, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"), None
    )
    cleared = with_xid(154, "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)")
    assert gpu_findings(cleared, None) == []


def test_mig_is_judged_only_on_the_gpus_a_model_uses() -> None:
    health = fact("hgx_h100_healthy")
    health["smi"]["gpus"][1]["mig_mode"] = "Enabled"
    assert gpu_findings(health, [0]) == []
    assert [f.check for f in gpu_findings(health, [1])] == ["mig"]
    assert [f.check for f in gpu_findings(health, None)] == ["mig"]


def test_fabric_matters_on_nvswitch_nvlink5_and_wherever_a_gpu_reports_a_fabric_state() -> None:
    health = fact("hgx_h100_healthy")
    for gpu in health["smi"]["gpus"]:
        gpu["fabric_state"], gpu["fabric_status"] = "Not Started", None
    assert {f.check for f in gpu_findings(health, None)} == {"fabric"}
    # an HGX B200 has no NVSwitch nodes: its switches are managed over NVLink5 bridges, and it is judged
    nvlink5 = gpu_findings({**health, "nvswitch": [], "nvlink5": True}, None)
    assert {f.check for f in nvlink5} == {"fabric"} and "NVLink5 host" in nvlink5[0].evidence
    assert "nvlsm" in nvlink5[0].fix and "ib_umad" in nvlink5[0].fix
    # no switch seen, but the GPUs still report a fabric state (a multi-node NVLink tray): judged too
    assert {f.check for f in gpu_findings({**health, "nvswitch": []}, None)} == {"fabric"}
    for gpu in health["smi"]["gpus"]:  # PCIe cards print N/A: no fabric to wait for
        gpu["fabric_state"] = gpu["fabric_status"] = None
    assert gpu_findings({**health, "nvswitch": []}, None) == []


def test_facts_shows_the_verdict() -> None:
    assert summarize("gpu_health", fact("hgx_h100_healthy")) == "healthy: 2 GPUs, fabric Completed"
    shown = summarize("gpu_health", fact("hgx_fabric_in_progress_xid_mig"))
    assert shown.startswith("refused: fabric: GPU 0") and "Xid 79" in shown and "mig: GPU 1" in shown
    assert verdict(None) == "-"
    assert summarize("gpu_health", fact("not_installed_nouveau_loaded")).startswith("no nvidia-smi here")
    assert summarize("gpu_health", fact("no_driver")).startswith(
        "refused: nvidia-smi: nvidia-smi -q: no-driver"
    )


def test_site_runs_the_gate_in_its_own_phase_right_before_the_services() -> None:
    phases = [phase.name for phase in load_playbook("site").phases]
    assert phases[phases.index("services") - 1] == "gpu"
    tasks = [t.task for t in load_playbook("site").phases[phases.index("gpu")].tasks]
    assert tasks == ["gpu_health", "dcgm_diag"]  # the diag only on GPUs the gate passed


def test_p2p_is_judged_only_between_the_gpus_of_one_tensor_parallel_group() -> None:
    health = fact("pcie_l40s_acs_on_p2p_cns_secure_boot")  # pairs 0-1 and 2-3 OK, CNS across them
    assert gpu_findings(health, None, [[0, 1], [2, 3]]) == []
    (finding,) = gpu_findings(health, None, [[0, 1], [1, 2]])
    assert finding.check == "p2p" and "GPU 1 -> GPU 2 P2P read CNS" in finding.evidence
    assert "40:01.1, 42:08.0" in finding.evidence and "iommu=pt" in finding.fix
    assert len(gpu_findings(health, None, None)) == 4  # no groups known (`vllmctl facts`): every pair
    assert verdict(health).startswith("refused: p2p: GPU 0 -> GPU 2 P2P read CNS")


def test_a_gpu_without_p2p_is_no_fault_of_the_host() -> None:
    health = {**fact("hgx_h100_healthy"), "p2p": {"gpus": [0, 1], "status": {"0,1": "GNS", "1,0": "GNS"}}}
    assert gpu_findings(health, None, [[0, 1]]) == []
    assert gpu_findings({**health, "p2p": None}, None, [[0, 1]]) == []


def test_tensor_parallel_over_pcie_with_acs_on_is_warned_only_without_nvlink() -> None:
    health = {**fact("pcie_l40s_acs_on_p2p_cns_secure_boot"), "p2p": None}
    pcie = {"gpus": ["GPU0", "GPU1"], "links": {"GPU0": {"GPU1": "PXB"}, "GPU1": {"GPU0": "PXB"}}}
    (warning,) = tp_warnings(health, pcie, [[0, 1]])
    assert "PXB, no NVLink" in warning and "pipeline_parallel_size: 2" in warning
    nvlink = {"gpus": ["GPU0", "GPU1"], "links": {"GPU0": {"GPU1": "NV4"}, "GPU1": {"GPU0": "NV4"}}}
    assert tp_warnings(health, nvlink, [[0, 1]]) == []
    assert tp_warnings({**health, "acs_bridges": []}, pcie, [[0, 1]]) == []
    assert tp_warnings(health, pcie, [[0], [1]]) == []  # one GPU per replica: no tensor parallelism
    assert tp_warnings(health, None, [[0, 1]]) == []  # topology unknown: nothing claimed


def _lost_one(health: dict[str, Any], address: str) -> dict[str, Any]:
    """`health` with the GPU at `address` gone from nvidia-smi's list and still on the PCI bus."""
    smi = health["smi"]
    kept = [g for g in smi["gpus"] if not str(g["pci_bus_id"]).lower().endswith(address)]
    assert len(kept) == len(smi["gpus"]) - 1
    listed = [str(g["pci_bus_id"]).lower().split(":", 1)[1] for g in smi["gpus"]]
    return {**health, "smi": {**smi, "gpus": kept}, "nvidia_pci": sorted(listed)}


def test_a_host_with_fewer_gpus_than_declared_is_refused_naming_the_missing_one() -> None:
    health = fact("hgx_h100_healthy")
    count = len(health["smi"]["gpus"])
    assert gpu_findings(health, None, expected=count) == []
    lost = _lost_one(health, "2a:00.0")
    (finding,) = gpu_findings(lost, None, expected=count)
    assert finding.check == "gpu count"
    assert f"lists {count - 1} GPUs, the inventory declares {count}" in finding.evidence
    assert "on the PCI bus but not listed: 2a:00.0" in finding.evidence and "Xid 79" in finding.fix
    gone = {**lost, "nvidia_pci": [a for a in lost["nvidia_pci"] if a != "2a:00.0"]}
    (finding,) = gpu_findings(gone, None, expected=count)
    assert "not on the PCI bus either" in finding.evidence
    assert gpu_findings(lost, None) == []  # nothing declared: nothing to compare with
    assert gpu_findings(lost, None, expected=count - 1) == []  # more than declared is no fault
    assert verdict(lost, expected=count).startswith("refused: gpu count:")
