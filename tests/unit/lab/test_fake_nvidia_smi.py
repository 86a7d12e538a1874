"""The fake nvidia-smi, run as a program against a gpus.json, answers in the real tool's formats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllmctl.lab import fake_nvidia_smi
from vllmctl.lab.gpus import DRIVER_RELEASES, gpus_document, parse_gpu_spec

SCRIPT = Path(fake_nvidia_smi.__file__)


def smi(doc: dict[str, object] | None, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "gpus.json"
    if doc is not None:
        path.write_text(json.dumps(doc))
    env = {**os.environ, "VLLMCTL_LAB_GPUS": str(path)}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, check=False
    )


@pytest.fixture
def h100x2() -> dict[str, object]:
    return gpus_document("lab-1", parse_gpu_spec("2xH100-80GB")[0], DRIVER_RELEASES["580"])


def test_query_csv_noheader_nounits(h100x2: dict[str, object], tmp_path: Path) -> None:
    fields = "--query-gpu=index,name,memory.total,memory.used,driver_version,pci.bus_id"
    result = smi(h100x2, tmp_path, fields, "--format=csv,noheader,nounits")
    assert result.returncode == 0
    assert result.stdout == (
        "0, NVIDIA H100 80GB HBM3, 81559, 0, 580.95.05, 00000000:18:00.0\n"
        "1, NVIDIA H100 80GB HBM3, 81559, 0, 580.95.05, 00000000:28:00.0\n"
    )


def test_query_csv_with_header_and_units(h100x2: dict[str, object], tmp_path: Path) -> None:
    result = smi(h100x2, tmp_path, "--query-gpu=name,memory.total", "--format=csv")
    assert result.stdout.splitlines() == [
        "name, memory.total [MiB]",
        "NVIDIA H100 80GB HBM3, 81559 MiB",
        "NVIDIA H100 80GB HBM3, 81559 MiB",
    ]


def test_nounits_keeps_units_in_the_header(h100x2: dict[str, object], tmp_path: Path) -> None:
    result = smi(h100x2, tmp_path, "--query-gpu", "memory.free", "--format", "csv,nounits")
    assert result.stdout.splitlines() == ["memory.free [MiB]", "81559", "81559"]


def test_selecting_one_gpu(h100x2: dict[str, object], tmp_path: Path) -> None:
    result = smi(h100x2, tmp_path, "-i", "1", "--query-gpu=index", "--format=csv,noheader")
    assert result.stdout == "1\n"


def test_unknown_field_is_refused(h100x2: dict[str, object], tmp_path: Path) -> None:
    result = smi(h100x2, tmp_path, "--query-gpu=name,bogus", "--format=csv")
    assert result.returncode == 2
    assert 'Field "bogus" is not a valid field to query.' in result.stdout


def test_list(h100x2: dict[str, object], tmp_path: Path) -> None:
    lines = smi(h100x2, tmp_path, "-L").stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")


def test_version(h100x2: dict[str, object], tmp_path: Path) -> None:
    out = smi(h100x2, tmp_path, "--version").stdout
    assert "DRIVER version      : 580.95.05" in out
    assert "CUDA Version        : 13.0" in out


def test_summary_table(h100x2: dict[str, object], tmp_path: Path) -> None:
    out = smi(h100x2, tmp_path).stdout
    assert "Driver Version: 580.95.05" in out
    assert "CUDA Version: 13.0" in out
    assert out.count("NVIDIA H100 80GB HBM3") == 2
    assert "0MiB / 81559MiB" in out


def test_topology_matrix(h100x2: dict[str, object], tmp_path: Path) -> None:
    lines = smi(h100x2, tmp_path, "topo", "-m").stdout.splitlines()
    assert lines[0].split("\t")[1:3] == ["GPU0", "GPU1"]
    assert lines[1].split("\t")[:3] == ["GPU0", "X", "NV18"]
    assert lines[2].split("\t")[:3] == ["GPU1", "NV18", "X"]


def test_p2p_matrix_parses_as_the_gpu_health_fact_reads_it(tmp_path: Path) -> None:
    from vllmctl.facts.gpu_hardware import parse_p2p

    (hgx,) = parse_gpu_spec("8xH100-80GB")
    doc = gpus_document("lab-1", hgx, DRIVER_RELEASES["580"])
    found = parse_p2p(smi(doc, tmp_path, "topo", "-p2p", "r").stdout.splitlines())
    assert found is not None and found["gpus"] == list(range(8))
    assert set(found["status"].values()) == {"OK"} and len(found["status"]) == 56
    doc["p2p"] = {"2,5": "CNS"}  # a fixture: one pair behind a chipset that refuses P2P
    broken = parse_p2p(smi(doc, tmp_path, "topo", "-p2p", "r").stdout.splitlines())
    assert broken is not None
    assert {k for k, v in broken["status"].items() if v != "OK"} == {"2,5", "5,2"}


@pytest.mark.parametrize("args", [(), ("-L",), ("--version",), ("--query-gpu=name", "--format=csv")])
def test_no_driver_fails_like_the_real_tool(tmp_path: Path, args: tuple[str, ...]) -> None:
    doc = gpus_document("lab-1", parse_gpu_spec("8xH100-80GB")[0], None)
    result = smi(doc, tmp_path, *args)
    assert result.returncode == 9
    assert result.stdout == (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    )


def test_missing_json_means_no_driver(tmp_path: Path) -> None:
    assert smi(None, tmp_path, "-L").returncode == 9


def test_driver_without_devices(tmp_path: Path) -> None:
    doc = {"product": None, "driver": {"branch": "580", "version": "580.95.05", "cuda_version": "13.0"}}
    result = smi({**doc, "gpus": []}, tmp_path, "-L")
    assert (result.returncode, result.stdout) == (6, "No devices were found\n")


def test_query_details_parse_as_the_gpu_health_fact_reads_them(tmp_path: Path) -> None:
    from vllmctl.facts.gpu_health import parse_smi_query

    doc = gpus_document("lab-1", parse_gpu_spec("8xH100-80GB")[0], DRIVER_RELEASES["580"])
    doc["fabric"] = {"state": "Completed", "status": "Success"}  # as the lab's Fabric Manager sets it
    doc["gpus"][1] |= {"mig_mode": "Enabled", "persistence_mode": "Disabled", "ecc_uncorrectable_volatile": 2}
    doc["gpus"][2] |= {"remapped_rows_pending": True, "retired_pages_pending": True}
    result = smi(doc, tmp_path, "-q")
    assert result.returncode == 0
    parsed = parse_smi_query(result.stdout.splitlines(), 0)
    assert parsed["driver_version"] == "580.95.05" and len(parsed["gpus"]) == 8
    first, second, third = parsed["gpus"][:3]
    assert (first["fabric_state"], first["fabric_status"], first["mig_mode"]) == (
        "Completed",
        "Success",
        "Disabled",
    )
    assert (second["mig_mode"], second["persistence_mode"], second["ecc_uncorrectable_volatile"]) == (
        "Enabled",
        "Disabled",
        2,
    )
    assert third["remapped_rows_pending"] is True and third["retired_pages_pending"] is True
    assert smi(doc, tmp_path, "--query-gpu=mig.mode.current", "--format=csv,noheader").stdout.split()[:2] == [
        "Disabled",
        "Enabled",
    ]


def test_fabric_follows_gpus_json_on_hgx_and_is_na_without_nvswitches(
    h100x2: dict[str, object], tmp_path: Path
) -> None:
    from vllmctl.facts.gpu_health import parse_smi_query

    assert "State                             : N/A" in smi(h100x2, tmp_path, "-q").stdout
    hgx = gpus_document("lab-1", parse_gpu_spec("8xH100-80GB")[0], DRIVER_RELEASES["580"])
    hgx["fabric"] = {"state": "In Progress", "status": "N/A"}
    gpus = parse_smi_query(smi(hgx, tmp_path, "-q").stdout.splitlines(), 0)["gpus"]
    assert {(g["fabric_state"], g["fabric_status"]) for g in gpus} == {("In Progress", None)}


def test_the_lab_fabric_manager_completes_the_fabric_only_on_its_exact_driver_version(tmp_path: Path) -> None:
    from vllmctl.lab import gpu_daemons

    doc = gpus_document("lab-1", parse_gpu_spec("8xH100-80GB")[0], DRIVER_RELEASES["580"])
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(doc))
    env = {**os.environ, "VLLMCTL_LAB_GPUS": str(path)}
    script = [sys.executable, str(Path(gpu_daemons.__file__)), "fabricmanager"]
    refused = subprocess.run([*script, "580.82.07"], capture_output=True, text=True, env=env, check=False)
    assert refused.returncode == 1
    assert "interface version 580.82.07 don't match with driver version 580.95.05" in refused.stdout
    assert json.loads(path.read_text())["fabric"]["state"] == "Not Started"
    running = subprocess.Popen([*script, "580.95.05"], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert running.stdout is not None and "Successfully configured" in running.stdout.readline()
        assert json.loads(path.read_text())["fabric"] == {"state": "Completed", "status": "Success"}
    finally:
        running.terminate()
        running.wait(timeout=10)
    subprocess.run([*script, "--stopped"], env=env, check=True)
    assert json.loads(path.read_text())["fabric"]["state"] == "Not Started"


@pytest.mark.parametrize(
    ("flags", "mode"),
    [(["--user", "nvidia-persistenced", "--no-persistence-mode", "--verbose"], "Disabled"),
     (["--user", "nvidia-persistenced", "--verbose"], "Enabled")],
)  # fmt: skip
def test_the_lab_persistenced_sets_persistence_mode_as_its_flags_say(
    tmp_path: Path, flags: list[str], mode: str
) -> None:
    """Ubuntu's unit passes --no-persistence-mode: the daemon runs, persistence mode stays Disabled."""
    from vllmctl.facts.gpu_health import parse_smi_query
    from vllmctl.lab import gpu_daemons

    doc = gpus_document("lab-1", parse_gpu_spec("8xH100-80GB")[0], DRIVER_RELEASES["580"])
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(doc))
    env = {**os.environ, "VLLMCTL_LAB_GPUS": str(path)}
    script = [sys.executable, str(Path(gpu_daemons.__file__)), "persistenced"]
    running = subprocess.Popen([*script, *flags], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert running.stdout is not None and f"persistence mode {mode}" in running.stdout.readline()
        gpus = parse_smi_query(smi(json.loads(path.read_text()), tmp_path, "-q").stdout.splitlines(), 0)[
            "gpus"
        ]
        assert {g["persistence_mode"] for g in gpus} == {mode} and len(gpus) == 8
    finally:
        running.terminate()
        running.wait(timeout=10)
    subprocess.run([*script, "--stopped"], env=env, check=True)
    assert {g["persistence_mode"] for g in json.loads(path.read_text())["gpus"]} == {"Disabled"}


def test_compute_apps_lists_the_live_processes_a_test_registered(
    h100x2: dict[str, object], tmp_path: Path
) -> None:
    """`--query-compute-apps`: each registered process that still runs, on its GPU; an ended one is gone."""
    apps = tmp_path / "compute-apps"
    apps.write_text(f"{os.getpid()} 1 2048\n4194303999 0 512\n")  # the second: past any pid_max, never live
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(h100x2))
    env = {**os.environ, "VLLMCTL_LAB_GPUS": str(path), "VLLMCTL_LAB_COMPUTE_APPS": str(apps)}
    fields = "--query-compute-apps=pid,process_name,used_memory,gpu_uuid"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), fields, "--format=csv,noheader,nounits"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    uuid = h100x2["gpus"][1]["uuid"]  # type: ignore[index]
    name = Path("/proc/self/comm").read_text().strip()
    assert (done.returncode, done.stdout) == (0, f"{os.getpid()}, {name}, 2048, {uuid}\n")
    bad = subprocess.run(
        [sys.executable, str(SCRIPT), "--query-compute-apps=pid,bogus", "--format=csv"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert bad.returncode == 2 and "is not a valid field" in bad.stdout


def test_the_lab_lspci_shows_acs_on_the_bridges_gpus_json_names_as_the_facts_parser_reads_it(
    tmp_path: Path,
) -> None:
    import re

    from vllmctl.facts.gpu_hardware import parse_acs_bridges
    from vllmctl.lab import fake_lspci

    doc = gpus_document("lab-1", parse_gpu_spec("2xL40S")[0], DRIVER_RELEASES["580"])
    doc["pci_bridges"] = [{"address": "42:08.0", "acs": True}, {"address": "41:00.0", "acs": False}]
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(doc))
    env = {**os.environ, "VLLMCTL_LAB_GPUS": str(path)}
    shown = subprocess.run(
        [sys.executable, fake_lspci.__file__, "-vvv"], capture_output=True, text=True, env=env, check=True
    ).stdout
    # what the gpu_health fact keeps of it: `grep -E '^[0-9a-fA-F]|ACSCtl:'`
    kept = [line for line in shown.splitlines() if re.match(r"[0-9a-fA-F]", line) or "ACSCtl:" in line]
    assert parse_acs_bridges(kept) == ["42:08.0"]
    assert sum("3D controller: NVIDIA Corporation" in line for line in kept) == 2
    path.write_text(json.dumps({**doc, "pci_bridges": []}))
    plain = subprocess.run(
        [sys.executable, fake_lspci.__file__, "-vvv"], capture_output=True, text=True, env=env
    )
    assert parse_acs_bridges(plain.stdout.splitlines()) == []


def test_a_gpu_fallen_off_the_bus_is_on_the_pci_bus_but_not_listed(tmp_path: Path) -> None:
    from vllmctl.facts.gpu_hardware import parse_nvidia_pci
    from vllmctl.lab import fake_lspci, fake_nvidia_smi

    doc = gpus_document("lab-1", parse_gpu_spec("8xH100-80GB")[0], DRIVER_RELEASES["580"])
    doc["gpus"][3]["lost"] = True
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(doc))
    env = {**os.environ, "VLLMCTL_LAB_GPUS": str(path)}

    def run(tool: str, *args: str) -> str:
        return subprocess.run([sys.executable, tool, *args], capture_output=True, text=True, env=env).stdout

    listed = run(fake_nvidia_smi.__file__, "--query-gpu=pci.bus_id", "--format=csv,noheader").split()
    assert len(listed) == 7 and doc["gpus"][3]["pci_bus_id"] not in listed
    on_bus = run(fake_lspci.__file__, "-vvv").splitlines()
    assert len(parse_nvidia_pci(on_bus)) == 8
    (lost,) = [line for line in on_bus if "(rev ff)" in line]
    assert lost.startswith(str(doc["gpus"][3]["pci_bus_id"]).lower().removeprefix("00000000:"))
