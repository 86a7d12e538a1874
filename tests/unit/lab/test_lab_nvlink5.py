"""The lab's HGX B200 (NVLink5) as NVIDIA documents it: no NVSwitch nodes, ConnectX bridges whose VPD says
SW_MNG, ib_umad's device nodes from the stand-in modprobe, and a Fabric Manager stand-in that starts only with
NVLSM installed and ib_umad loaded, read back through the real fact parsers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from vllmctl.facts.gpu_hardware import parse_sw_mng
from vllmctl.facts.gpu_health import parse_smi_query
from vllmctl.lab import fake_lspci, fake_modprobe, fake_nvidia_smi, gpu_daemons
from vllmctl.lab.gpus import DRIVER_RELEASES, gpus_document, parse_gpu_spec


def _run(module: Any, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    script = [sys.executable, str(Path(module.__file__)), *args]
    return subprocess.run(script, capture_output=True, text=True, env=env, check=False)


def _b200(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(gpus_document("lab-1", parse_gpu_spec("8xB200")[0], DRIVER_RELEASES["580"])))
    env = {
        **os.environ,
        "VLLMCTL_LAB_GPUS": str(path),
        "VLLMCTL_LAB_DEV": str(tmp_path / "dev"),
        "VLLMCTL_LAB_MODULES_LOAD": str(tmp_path / "modules-load.d"),
        "VLLMCTL_LAB_UMAD": str(tmp_path / "dev/infiniband/umad0"),
        "VLLMCTL_LAB_NVLSM": str(tmp_path / "opt/nvidia/nvlsm/sbin/nvlsm"),
    }
    return path, env


def test_lspci_shows_the_sw_mng_bridges_the_fact_reads_and_no_nvswitch(tmp_path: Path) -> None:
    path, env = _b200(tmp_path)
    out = _run(fake_lspci, env, "-vvv").stdout.splitlines()
    kept = [line for line in out if re.search(r"^[0-9a-fA-F]|ACSCtl:|SW_MNG", line)]  # the fact's grep
    assert parse_sw_mng(kept) == ["c1:00.0", "c2:00.0", "c3:00.0", "c4:00.0"]
    assert parse_sw_mng([line for line in out if not line.startswith("\t")]) == []  # only the VPD tells
    assert json.loads(path.read_text())["nvswitches"] == 0


def test_modprobe_ib_umad_makes_one_umad_node_per_bridge_and_boot_loads_modules_load_d(
    tmp_path: Path,
) -> None:
    _, env = _b200(tmp_path)
    assert _run(fake_modprobe, env, "--lab-boot").returncode == 0
    assert not (tmp_path / "dev/infiniband").exists()  # nothing listed to load at boot yet
    missing = _run(fake_modprobe, env, "no_such_module")
    assert missing.returncode == 1 and "Module no_such_module not found" in missing.stderr
    (tmp_path / "modules-load.d").mkdir()
    (tmp_path / "modules-load.d/modules.conf").symlink_to(tmp_path / "etc-modules")  # Debian's, dangling
    assert _run(fake_modprobe, env, "--lab-boot").returncode == 0  # a lab host boots with it
    (tmp_path / "modules-load.d/ib_umad.conf").write_text("# comment\nib_umad\n")
    assert _run(fake_modprobe, env, "--lab-boot").returncode == 0
    assert sorted(p.name for p in (tmp_path / "dev/infiniband").iterdir()) == [
        *(f"issm{i}" for i in range(4)),
        *(f"umad{i}" for i in range(4)),
    ]


def test_fabric_manager_on_nvlink5_needs_nvlsm_and_ib_umad_and_completes_the_fabric(tmp_path: Path) -> None:
    path, env = _b200(tmp_path)
    smi = _run(fake_nvidia_smi, env, "-q")
    gpus = parse_smi_query(smi.stdout.splitlines(), 0)["gpus"]
    assert {g["fabric_state"] for g in gpus} == {"In Progress"}  # registered only once Fabric Manager runs
    no_nvlsm = _run(gpu_daemons, env, "fabricmanager", "580.95.05")
    assert no_nvlsm.returncode == 1 and "install nvlsm" in no_nvlsm.stdout
    nvlsm = tmp_path / "opt/nvidia/nvlsm/sbin/nvlsm"
    nvlsm.parent.mkdir(parents=True)
    nvlsm.write_text("#!/bin/sh\n")
    no_umad = _run(gpu_daemons, env, "fabricmanager", "580.95.05")
    assert no_umad.returncode == 1 and "is ib_umad module loaded?" in no_umad.stdout
    assert json.loads(path.read_text())["fabric"]["state"] == "In Progress"
    assert _run(fake_modprobe, env, "ib_umad").returncode == 0
    running = subprocess.Popen(
        [sys.executable, str(Path(gpu_daemons.__file__)), "fabricmanager", "580.95.05"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert running.stdout is not None and "Successfully configured" in running.stdout.readline()
        assert json.loads(path.read_text())["fabric"] == {"state": "Completed", "status": "Success"}
    finally:
        running.terminate()
        running.wait(timeout=10)
    assert _run(gpu_daemons, env, "fabricmanager", "--stopped").returncode == 0
    assert json.loads(path.read_text())["fabric"]["state"] == "In Progress"
