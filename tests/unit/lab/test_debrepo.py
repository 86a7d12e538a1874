"""The dummy driver packages' maintainer scripts mark the fake driver present or absent in gpus.json; the
NVLSM and DCGM Exporter stand-ins ship what the operations use."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from vllmctl.lab import debrepo
from vllmctl.lab.gpus import DRIVER_RELEASES
from vllmctl.ops.dcgm import DIAG
from vllmctl.paths import DCGM_DIAG_PASSED


def run_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, branch: str, install: bool, action: str
) -> None:
    monkeypatch.setattr(debrepo, "GPUS_JSON", str(tmp_path / "gpus.json"))
    script = tmp_path / "script"
    script.write_text(debrepo.maintainer_script(DRIVER_RELEASES[branch], install))
    subprocess.run(["sh", str(script), action], check=True)


def read(tmp_path: Path) -> dict[str, object]:
    doc: dict[str, object] = json.loads((tmp_path / "gpus.json").read_text())
    return doc


def test_install_sets_the_driver_and_keeps_the_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gpus.json").write_text(json.dumps({"product": "L4", "driver": None, "gpus": [{"index": 0}]}))
    run_script(tmp_path, monkeypatch, "570", True, "configure")
    assert read(tmp_path) == {
        "product": "L4",
        "driver": {"branch": "570", "version": "570.195.03", "cuda_version": "12.8"},
        "gpus": [{"index": 0}],
    }


def test_remove_clears_only_its_own_branch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_script(tmp_path, monkeypatch, "580", True, "configure")
    run_script(tmp_path, monkeypatch, "570", False, "remove")
    assert read(tmp_path)["driver"] == {"branch": "580", "version": "580.95.05", "cuda_version": "13.0"}
    run_script(tmp_path, monkeypatch, "580", False, "remove")
    assert read(tmp_path)["driver"] is None


def test_postinst_ignores_other_actions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_script(tmp_path, monkeypatch, "580", True, "abort-upgrade")
    assert not (tmp_path / "gpus.json").exists()


def test_control_file_makes_branches_mutually_exclusive() -> None:
    control = debrepo.control_file(DRIVER_RELEASES["580"])
    assert "Package: nvidia-driver-580\nVersion: 580.95.05-1\n" in control
    assert "Provides: nvidia-driver\nConflicts: nvidia-driver\nReplaces: nvidia-driver\n" in control


def test_the_nvlsm_and_dcgm_exporter_stand_ins_ship_what_the_ops_use(tmp_path: Path) -> None:
    exporter = {"/usr/bin/dcgmi": debrepo.DCGMI, "/lib/systemd/system/nvidia-dcgm-exporter.service": "x\n"}
    debrepo._build_stub(
        "datacenter-gpu-manager-exporter", debrepo.EXPORTER_VERSION, exporter, tmp_path, tmp_path / "w"
    )
    (deb,) = tmp_path.glob("*.deb")
    assert deb.name == "datacenter-gpu-manager-exporter_4.5.0-1_all.deb"
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "-rwxr-xr-x root/root" in next(
        line for line in listing.splitlines() if line.endswith("usr/bin/dcgmi")
    )
    assert "lib/systemd/system/nvidia-dcgm-exporter.service" in listing
    assert "Package: nvlsm\nVersion: 2025.06.10-1\n" in debrepo.stub_control("nvlsm", debrepo.NVLSM_VERSION)


def test_the_lab_dcgmi_passes_the_diag_the_op_runs(tmp_path: Path) -> None:
    (tmp_path / "dcgmi").write_text(debrepo.DCGMI)
    (tmp_path / "dcgmi").chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    script = DIAG.replace(DCGM_DIAG_PASSED, str(tmp_path / "passed"))  # the host's record, here
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0 and "Deployment | Pass" in done.stdout
    assert (tmp_path / "passed").is_file()
