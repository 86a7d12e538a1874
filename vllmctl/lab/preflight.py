"""What `lab up` needs from the controller before it makes anything: Linux, root, and the tools.

Each gap is reported with the apt packages that close it.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable

from vllmctl.errors import VllmctlError

# tool -> Debian package that ships it
REQUIRED_TOOLS = {
    "systemd-nspawn": "systemd-container",
    "debootstrap": "debootstrap",
    "ip": "iproute2",
    "nsenter": "util-linux",
    "mount": "mount",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "dpkg-deb": "dpkg",
    "dpkg-scanpackages": "dpkg-dev",
    "apt-ftparchive": "apt-utils",
}
APT_LINE = "apt-get install debootstrap systemd-container openssh-client iproute2 dpkg-dev apt-utils"


def missing_tools(which: Callable[[str], str | None] | None = None) -> dict[str, str]:
    finder = which or shutil.which
    return {tool: package for tool, package in REQUIRED_TOOLS.items() if finder(tool) is None}


def require_root() -> None:
    if os.geteuid() != 0:
        raise VllmctlError(
            "`vllmctl lab` needs root: it creates network namespaces, bridges, mounts and containers",
            "run it with sudo, e.g. `sudo vllmctl lab up`",
        )


def preflight() -> None:
    if not sys.platform.startswith("linux"):
        raise VllmctlError(
            "`vllmctl lab` runs only on Linux (it uses systemd-nspawn, network namespaces and overlayfs)",
            "run it on a Debian or Ubuntu machine or VM",
        )
    require_root()
    missing = missing_tools()
    if missing:
        packages = " ".join(sorted(set(missing.values())))
        raise VllmctlError(
            f"`vllmctl lab` needs tools that are not installed: {', '.join(sorted(missing))}",
            f"install them with `apt-get install {packages}` (all of them: `{APT_LINE}`)",
        )
