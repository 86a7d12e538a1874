"""The fake nvidia-smi's links (`nvlink -s`, `nvlink -e`, `-q`'s GPU Link Info and Fabric Health), read by
the real `gpu_health` parsers into what gpus.json says, and the gpus.json defaults per GPU model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vllmctl.facts.gpu_health import parse_smi_query
from vllmctl.facts.gpu_links import LINKS_COMMAND, parse_links, parse_nvlink_errors, parse_nvlink_status
from vllmctl.lab import fake_nvidia_smi
from vllmctl.lab.gpus import DRIVER_RELEASES, gpus_document, parse_gpu_spec
from vllmctl.ops.gpu_links import link_warnings

SCRIPT = Path(fake_nvidia_smi.__file__)


def document(spec: str, branch: str = "580") -> dict[str, Any]:
    return gpus_document("lab-1", parse_gpu_spec(spec)[0], DRIVER_RELEASES[branch])


def smi(doc: dict[str, Any], tmp_path: Path, *args: str) -> str:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(doc))
    env = {**os.environ, "VLLMCTL_LAB_GPUS": str(path)}
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture
def faulty() -> dict[str, Any]:
    """An HGX H100 whose fabric is up, with one fault per GPU from 1 to 6."""
    doc = document("8xH100-80GB")
    doc["fabric"] = {"state": "Completed", "status": "Success"}
    gpus = doc["gpus"]
    gpus[1]["pcie"]["host_gen_max"] = 4
    gpus[2]["pcie"]["gen_current"] = 1  # idle
    gpus[3]["nvlink_down"] = [5]
    gpus[4]["fabric_bandwidth"] = "Degraded"
    gpus[5]["nvlink_errors"] = {"2": {"crc": 12, "replay": 3}}
    gpus[6]["pcie"]["width_current"] = 8
    return doc


def test_the_defaults_give_nvlink_links_only_to_an_hgx_board_and_each_model_its_pcie_link() -> None:
    hgx = document("8xH100-80GB")["gpus"]
    assert {g["nvlink_links"] for g in hgx} == {18}
    assert hgx[0]["pcie"] == {
        "gen_max": 5,
        "gen_current": 5,
        "host_gen_max": 5,
        "width_max": 16,
        "width_current": 16,
    }
    assert {g["nvlink_links"] for g in document("8xA100-80GB")["gpus"]} == {12}
    assert document("8xA100-80GB")["gpus"][0]["pcie"]["gen_max"] == 4
    assert document("8xB200")["gpus"][0]["nvlink_links"] == 18
    for spec in ("2xH100-80GB", "8xL40S", "1xL4"):  # not a baseboard, or PCIe cards: no NVLink link
        assert {g["nvlink_links"] for g in document(spec)["gpus"]} == {0}
    assert document("8xL40S")["gpus"][0]["pcie"]["gen_max"] == 4


def test_nvlink_status_and_errors_parse_into_what_gpus_json_says(
    faulty: dict[str, Any], tmp_path: Path
) -> None:
    status = parse_nvlink_status(smi(faulty, tmp_path, "nvlink", "-s").splitlines())
    assert sorted(status) == list(range(8))
    assert {i: s["inactive"] for i, s in status.items() if s["inactive"]} == {3: [5]}
    assert {s["links"] for s in status.values()} == {18}
    errors = parse_nvlink_errors(smi(faulty, tmp_path, "nvlink", "-e").splitlines())
    assert errors == {
        5: [
            {"link": 2, "counter": "Replay Errors", "count": 3},
            {"link": 2, "counter": "CRC Errors", "count": 12},
        ]
    }
    one = smi(faulty, tmp_path, "nvlink", "-s", "-i", "3")
    assert one.startswith("GPU 3: NVIDIA H100 80GB HBM3 (UUID: GPU-") and "\t Link 5: <inactive>\n" in one
    assert list(parse_nvlink_status(one.splitlines())) == [3]


def test_every_link_down_prints_nvmls_line_and_parses_as_all_inactive(tmp_path: Path) -> None:
    doc = document("8xH100-80GB")
    doc["gpus"][2]["nvlink_down"] = list(range(18))
    out = smi(doc, tmp_path, "nvlink", "-s", "-i", "2")
    assert "NVML: Unable to retrieve NVLink information as all links are inActive" in out
    assert parse_nvlink_status(out.splitlines()) == {2: {"links": 0, "inactive": [], "all_inactive": True}}


def test_query_details_show_the_pcie_link_and_fabric_health_as_the_fact_reads_them(
    faulty: dict[str, Any], tmp_path: Path
) -> None:
    gpus = parse_smi_query(smi(faulty, tmp_path, "-q").splitlines(), 0)["gpus"]
    full = {"gen_max": 5, "gen_current": 5, "gen_device_max": 5, "gen_host_max": 5}
    full |= {"width_max": 16, "width_current": 16}
    assert gpus[0]["pcie"] == full
    # Max is the lower of the GPU's and the slot's generation, as the real tool reports it
    assert gpus[1]["pcie"] == full | {"gen_max": 4, "gen_current": 4, "gen_host_max": 4}
    assert gpus[2]["pcie"] == full | {"gen_current": 1}
    assert gpus[6]["pcie"] == full | {"width_current": 8}
    assert [g["fabric_bandwidth"] for g in gpus] == ["Full"] * 4 + ["Degraded"] + ["Full"] * 3


def test_fabric_health_is_na_before_the_fabric_completes_and_absent_on_older_drivers(tmp_path: Path) -> None:
    waiting = document("8xH100-80GB")  # no Fabric Manager yet: Not Started
    assert {
        g["fabric_bandwidth"] for g in parse_smi_query(smi(waiting, tmp_path, "-q").splitlines(), 0)["gpus"]
    } == {None}
    old = document("8xH100-80GB", "550")
    old["fabric"] = {"state": "Completed", "status": "Success"}
    out = smi(old, tmp_path, "-q")
    assert "Bandwidth" not in out
    assert parse_smi_query(out.splitlines(), 0)["gpus"][0]["fabric_bandwidth"] is None


def _links_section(doc: dict[str, Any], tmp_path: Path) -> str:
    """The fact's NVLink fragment run by a real shell with the fake as `nvidia-smi` on PATH."""
    (tmp_path / "gpus.json").write_text(json.dumps(doc))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-smi").write_text(f'#!/bin/sh\nexec {sys.executable} {SCRIPT} "$@"\n')
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = {**os.environ, "VLLMCTL_LAB_GPUS": str(tmp_path / "gpus.json")}
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    return subprocess.run(["sh", "-c", LINKS_COMMAND], capture_output=True, text=True, env=env).stdout


def _sections(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("@@"):
            current = line.strip()
            found[current] = []
        else:
            found[current].append(line)
    return found


def test_the_facts_fragment_reads_both_commands_and_the_warnings_name_each_faulty_gpu(
    faulty: dict[str, Any], tmp_path: Path
) -> None:
    sections = _sections(_links_section(faulty, tmp_path))
    assert list(sections) == ["@@nvlink-status", "@@nvlink-errors"]
    # the host sends each GPU's header and its non-zero counters only, not 432 zero lines
    assert len(sections["@@nvlink-errors"]) == 8 + 2
    health = {
        "nvswitch": ["/dev/nvidia-nvswitch0"],
        "smi": parse_smi_query(smi(faulty, tmp_path, "-q").splitlines(), 0),
        **parse_links(sections),
    }
    warned = link_warnings(health)
    named = sorted({w.split(" (", 1)[0].split(": ", 1)[1] for w in warned})
    assert named == ["GPU 1", "GPU 3", "GPU 4", "GPU 5", "GPU 6"], (
        warned
    )  # GPU 2 is idle at gen 1: not a fault
    assert any(w.startswith("nvlink: GPU 3 (00000000:48:00.0) has NVLink link 5 inactive") for w in warned)


def test_a_host_without_nvlink_runs_no_error_counters_and_is_warned_of_nothing(tmp_path: Path) -> None:
    doc = document("2xL40S")
    sections = _sections(_links_section(doc, tmp_path))
    assert list(sections) == ["@@nvlink-status"]  # `nvlink -e` never ran
    assert parse_links(sections) == {"nvlink_links": []}
    health = {
        "nvswitch": [],
        "smi": parse_smi_query(smi(doc, tmp_path, "-q").splitlines(), 0),
        "nvlink_links": [],
    }
    assert link_warnings(health) == []
