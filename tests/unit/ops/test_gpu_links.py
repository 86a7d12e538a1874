"""The link warnings beside the GPU health gate: when a GPU with every NVLink link inactive is a fault, which
error counters are judged, and `vllmctl facts` showing the warnings after the gate's verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vllmctl.commands.facts import summarize
from vllmctl.ops.gpu_links import link_warnings

CASES = Path(__file__).resolve().parents[1] / "facts" / "gpu_health"


def fact(name: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((CASES / f"{name}.json").read_text())["fact"]
    return found


def hgx(**gpu3: Any) -> dict[str, Any]:
    health = fact("hgx_h100_nvlink_all_up_pcie_gen5_x16")
    health["smi"]["gpus"][3] |= gpu3
    return health


def test_a_gpu_with_every_link_inactive_waits_for_its_fabric_before_it_is_warned() -> None:
    health = hgx(fabric_state="In Progress", fabric_status="N/A")
    health["nvlink_links"][3] = {"index": 3, "links": 0, "inactive": [], "all_inactive": True, "errors": []}
    assert link_warnings(health) == []  # the gate's fabric check refuses it, with its own fix
    health["smi"]["gpus"][3] |= {"fabric_state": "Completed", "fabric_status": "Success"}
    (warned,) = link_warnings(health)
    assert warned.startswith("nvlink: GPU 3 (00000000:5D:00.0) has every NVLink link inactive")


def test_gpus_without_a_bridge_are_no_fault_where_no_gpu_has_a_link_up() -> None:
    health = fact("pcie_h100_x8_gen4_slot_idle_gen1_nvlink_inactive")
    assert not [w for w in link_warnings(health) if w.startswith("nvlink")]
    # one bridged pair on the host: the GPU whose links are all down now lacks what its peers have
    health["nvlink_links"][1] = {"index": 1, "links": 4, "inactive": [], "all_inactive": False, "errors": []}
    nvlink = [w for w in link_warnings(health) if w.startswith("nvlink")]
    assert [w.split(" has ")[0] for w in nvlink] == [
        "nvlink: GPU 0 (00000000:01:00.0)",
        "nvlink: GPU 2 (00000000:81:00.0)",
        "nvlink: GPU 3 (00000000:C1:00.0)",
    ]


def test_replay_recovery_and_crc_counters_are_judged_other_counters_are_kept_unjudged() -> None:
    health = hgx()
    health["nvlink_links"][2]["errors"] = [
        {"link": 0, "counter": "Tx discards", "count": 4},
        {"link": 1, "counter": "CRC Flit Errors", "count": 2},
        {"link": 1, "counter": "Recovery Errors", "count": 1},
    ]
    (warned,) = link_warnings(health)
    assert "link 1 CRC Flit Errors 2, link 1 Recovery Errors 1 (`nvidia-smi nvlink -e`)" in warned
    assert "Tx discards" not in warned and "`nvidia-smi nvlink -re -i 2`" in warned


def test_the_current_generation_is_never_judged_the_width_is() -> None:
    health = hgx(pcie={"gen_max": 5, "gen_current": 1, "gen_device_max": 5, "gen_host_max": 5})
    assert link_warnings(health) == []
    health["smi"]["gpus"][3]["pcie"] |= {"width_max": 16, "width_current": 4}
    (warned,) = link_warnings(health)
    assert warned.startswith("pcie: GPU 3 (00000000:5D:00.0) PCIe link trained at x4 of x16")


def test_no_fact_no_warning() -> None:
    assert link_warnings(None) == [] and link_warnings({}) == []


def test_vllmctl_facts_shows_the_warnings_after_the_verdict() -> None:
    assert summarize("gpu_health", fact("hgx_h100_nvlink_all_up_pcie_gen5_x16")) == (
        "healthy: 8 GPUs, fabric Completed"
    )
    shown = summarize("gpu_health", fact("hgx_h100_link_inactive_crc_errors_bandwidth_degraded"))
    verdict, *warnings = shown.split("; warning: ")
    assert verdict == "healthy: 8 GPUs, fabric Completed"
    assert [w.split(" (")[0] for w in warnings] == [
        "nvlink: GPU 3",
        "nvlink errors: GPU 5",
        "fabric health: GPU 3",
    ]
