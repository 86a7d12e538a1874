"""The shared Debian bookworm root every lab host overlays: built once with debootstrap, cached, reused.

Built into a temporary directory and renamed into place under a file lock, so two builds never race.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from contextlib import AbstractContextManager
from pathlib import Path

from vllmctl.errors import VllmctlError
from vllmctl.lab.state import blocking_lock

CACHE_DIR = Path(os.environ.get("VLLMCTL_LAB_CACHE", "/var/cache/vllmctl/lab"))
SUITE = "bookworm"
MIRROR = os.environ.get("VLLMCTL_LAB_MIRROR", "http://deb.debian.org/debian")
PACKAGES = (
    "systemd",
    "dbus",
    "openssh-server",
    "python3",
    "python3-venv",
    "sudo",
    "iproute2",
    "procps",
    "ca-certificates",
)
# Bump when the customisation below changes so a stale cached base is not reused.
BASE_VERSION = "3"
OPS_USER = "ops"

SSHD_LAB_CONFIG = """\
# vllmctl lab: key auth only, one ed25519 host key generated per host
HostKey /etc/ssh/ssh_host_ed25519_key
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
"""

# Units that only make sense on a real machine; masked so `is-system-running` reaches `running`.
MASKED_UNITS = (
    "systemd-networkd-wait-online.service",
    "systemd-timesyncd.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "e2scrub_all.timer",
    "fstrim.timer",
    "getty@tty1.service",
    "serial-getty@.service",
    "console-getty.service",
)


def base_dir() -> Path:
    return CACHE_DIR / f"base-{SUITE}-v{BASE_VERSION}"


def cache_lock(name: str) -> AbstractContextManager[None]:
    return blocking_lock(CACHE_DIR / f".{name}.lock")


def _run(argv: list[str], what: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-15:]
        raise VllmctlError(
            f"{what} failed (exit {result.returncode}):\n" + "\n".join(tail),
            "the base image needs the Debian mirror; set VLLMCTL_LAB_MIRROR to a reachable one and retry",
        )


def _customise(root: Path) -> None:
    """Things every host shares: the ops sudo user, sshd settings, masked units, no baked-in identity."""
    chroot = ["chroot", str(root)]
    _run([*chroot, "useradd", "--create-home", "--shell", "/bin/bash", "--uid", "1000", OPS_USER], "useradd")
    # '*' (not the default '!') so sshd never treats the key-only account as locked.
    _run([*chroot, "usermod", "--password", "*", OPS_USER], "usermod")
    sudoers = root / "etc/sudoers.d" / OPS_USER
    sudoers.write_text(f"{OPS_USER} ALL=(ALL) NOPASSWD:ALL\n")
    sudoers.chmod(0o440)
    (root / "etc/ssh/sshd_config.d/vllmctl-lab.conf").write_text(SSHD_LAB_CONFIG)
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    for unit in MASKED_UNITS:
        (root / "etc/systemd/system" / unit).unlink(missing_ok=True)
        (root / "etc/systemd/system" / unit).symlink_to("/dev/null")
    (root / "etc/machine-id").write_text("")
    (root / "etc/hostname").unlink(missing_ok=True)
    (root / "etc/resolv.conf").unlink(missing_ok=True)
    (root / "etc/resolv.conf").write_text("")
    (root / "etc/vllmctl-lab").mkdir(exist_ok=True)
    shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
    (root / "var/lib/apt/lists/partial").mkdir(parents=True, exist_ok=True)
    shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)


def ensure_base() -> Path:
    """Return the cached base root, building it first if it is missing (minutes, needs the mirror)."""
    target = base_dir()
    if (target / "etc/os-release").exists():
        return target
    with cache_lock("base"):
        if (target / "etc/os-release").exists():
            return target
        scratch = Path(tempfile.mkdtemp(prefix=".base-build-", dir=CACHE_DIR))
        try:
            _run(
                [
                    "debootstrap",
                    "--variant=minbase",
                    f"--include={','.join(PACKAGES)}",
                    SUITE,
                    str(scratch),
                    MIRROR,
                ],
                "debootstrap",
            )
            _customise(scratch)
            scratch.rename(target)
        finally:
            if scratch.exists():
                shutil.rmtree(scratch, ignore_errors=True)
    return target
