"""The driver-stack operations beyond their recorded cases: Debian with Secure Boot refused with the fix, the
signed-modules package name per flavour, the DCGM diag script run against a stand-in `dcgmi`, and the
persistence drop-in's command line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from vllmctl.ops import OPERATIONS, OpError
from vllmctl.ops.dcgm import DIAG
from vllmctl.ops.kernel_modules import signed_modules_package
from vllmctl.ops.persistence import dropin
from vllmctl.paths import DCGM_DIAG_PASSED

DEBIAN = {"id": "debian", "version_id": "12"}
NO_DRIVER = {"status": "no-driver", "gpus": []}


def _kernel_facts(os_release: dict[str, str], secure_boot: bool | None) -> dict[str, object]:
    health = {"secure_boot": secure_boot, "kernel_release": "6.1.0-28-amd64", "kernel_headers": False}
    return {"gpu_health": health, "gpus": NO_DRIVER, "os_release": os_release, "dpkg": {}}


def test_debian_with_secure_boot_is_refused_with_the_mok_fix() -> None:
    with pytest.raises(OpError) as caught:
        OPERATIONS["kernel_modules"]({"branch": "535"}, _kernel_facts(DEBIAN, True))
    assert "Secure Boot is on" in caught.value.message and "debian" in caught.value.message
    assert "mokutil --import /var/lib/dkms/mok.pub" in caught.value.hint


def test_debian_with_a_running_driver_is_left_alone_under_secure_boot() -> None:
    facts = _kernel_facts(DEBIAN, True)
    facts["gpus"] = {"status": "ok", "gpus": [{"driver_version": "535.216.01", "name": "NVIDIA L40S"}]}
    assert OPERATIONS["kernel_modules"]({"branch": "535"}, facts).noop


def test_a_flavour_the_gpu_cannot_run_is_refused_before_any_signed_module_is_installed() -> None:
    facts = _kernel_facts({"id": "ubuntu"}, True)
    with pytest.raises(OpError, match="proprietary kernel modules"):
        OPERATIONS["kernel_modules"]({"branch": "570", "gpu": "B200", "flavor": "server"}, facts)


@pytest.mark.parametrize(
    ("flavor", "package"),
    [
        ("", "linux-modules-nvidia-535-6.8.0-60-generic"),
        ("open", "linux-modules-nvidia-535-open-6.8.0-60-generic"),
        ("server", "linux-modules-nvidia-535-server-6.8.0-60-generic"),
        ("server-open", "linux-modules-nvidia-535-server-open-6.8.0-60-generic"),
    ],
)
def test_signed_modules_follow_ubuntus_names(flavor: str, package: str) -> None:
    assert signed_modules_package("535.216", flavor, "6.8.0-60-generic") == package


def _diag(tmp_path: Path, output: str, code: int) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "dcgmi"
    fake.write_text(f"#!/bin/sh\ncat <<'OUT'\n{output}\nOUT\nexit {code}\n")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    script = DIAG.replace(DCGM_DIAG_PASSED, str(tmp_path / "passed"))  # the host's record, here
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, check=False)


def test_a_passing_diag_succeeds(tmp_path: Path) -> None:
    done = _diag(tmp_path, "| Deployment | Pass |\n| PCIe       | Pass |", 0)
    assert done.returncode == 0 and "Pass" in done.stdout and not done.stderr
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text()
    assert (tmp_path / "passed").read_text() == boot_id  # what the next plan compares with this boot's id


def test_a_failing_diag_fails_with_its_output_tail(tmp_path: Path) -> None:
    done = _diag(tmp_path, "| Deployment | Pass |\n| PCIe       | Fail |\n| GPU 3: link width x8", 226)
    assert done.returncode == 1 and not (tmp_path / "passed").exists()
    assert done.stderr.startswith("dcgmi diag -r 1 failed (exit 226):")
    assert "GPU 3: link width x8" in done.stderr


def test_a_fail_in_the_table_fails_even_when_dcgmi_exits_zero(tmp_path: Path) -> None:
    done = _diag(tmp_path, "| Memory | Fail |", 0)
    assert done.returncode == 1 and "| Memory | Fail |" in done.stderr
    assert not (tmp_path / "passed").exists()


def test_only_the_tail_of_a_long_diag_is_kept(tmp_path: Path) -> None:
    done = _diag(tmp_path, "\n".join(f"line {n}" for n in range(100)) + "\n| Fail |", 1)
    assert "line 0\n" not in done.stderr and "| Fail |" in done.stderr


def test_the_persistence_dropin_drops_only_the_flag_and_quotes_each_word_for_execstart() -> None:
    packaged = "/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose 5%"
    lines = dropin(packaged).splitlines()
    # the empty ExecStart= first: systemd appends to a list otherwise, and a simple service takes one command
    assert lines[1:] == [
        "[Service]",
        "ExecStart=",
        'ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose "5%%"',
    ]


def test_a_packaged_command_line_expanding_variables_is_not_rewritten() -> None:
    """`$OPTIONS` is expanded at start: a drop-in repeating it would pass the literal word."""
    unit = {"load_state": "loaded", "active_state": "active", "unit_file_state": "enabled"}
    unit["exec_start"] = "/usr/bin/nvidia-persistenced --no-persistence-mode $OPTIONS"
    facts = {"services": {"nvidia-persistenced.service": unit}, "paths": {}}
    step = OPERATIONS["persistence"]({"branch": "580"}, facts)
    assert not step.actions and step.noop is not None and "expands variables: not rewritten" in step.noop


# Ubuntu 24.04's nvidia-driver-580-server-open and the packages it pulls, NVIDIA's FM, NVLSM
UBUNTU_580_OPEN = (
    "nvidia-driver-580-server-open",
    "libnvidia-compute-580-server",
    "libnvidia-gl-580-server",
    "libnvidia-common-580-server",
    "nvidia-kernel-common-580-server",
    "nvidia-utils-580-server",
    "nvidia-compute-utils-580-server",
    "nvidia-firmware-580-server-580.95.05",
    "xserver-xorg-video-nvidia-580-server",
    "nvidia-fabricmanager-580",
    "libnvidia-nscq-580",
    "cuda-drivers-580",
    "nvlsm",
)
NOT_THE_DRIVER = (
    "linux-image-6.8.0-60-generic",
    "linux-modules-nvidia-580-server-open-6.8.0-60-generic",
    "cuda-toolkit-12-8",
    "python3",
    "nvtop",
    "openssh-server",
)


def test_unattended_upgrades_skip_every_driver_versioned_package_and_nothing_else() -> None:
    """unattended-upgrades reads each Package-Blacklist entry as a Python regex matched from the start of the
    package name (its README; Ubuntu's 50unattended-upgrades: `"linux-";` matches all packages starting
    with linux-): the entries cover the branch; the kernel and its signed modules move together."""
    import re

    from vllmctl.ops.unattended import BLACKLIST

    entries = re.findall(r'^\s+"([^"]+)";$', BLACKLIST, flags=re.MULTILINE)
    assert entries and BLACKLIST.startswith("//") and "Unattended-Upgrade::Package-Blacklist {" in BLACKLIST

    def skipped(package: str) -> bool:
        return any(re.match(entry, package) for entry in entries)

    assert [p for p in UBUNTU_580_OPEN if not skipped(p)] == []
    assert [p for p in NOT_THE_DRIVER if skipped(p)] == []
