"""Operating-system facts: os-release, kernel, CPU/memory/disk sizes and the system Python version."""

from __future__ import annotations

import shlex
from typing import Any

from vllmctl.facts.base import Fact, fixed, lines

OS_RELEASE_COMMAND = "cat /etc/os-release"
KERNEL_COMMAND = "uname -srm"
RESOURCES_COMMAND = "nproc; awk '/^MemTotal:/ {print $2}' /proc/meminfo; df -Pk / | tail -n 1"
PYTHON_COMMAND = "python3 --version"


def parse_os_release(output: str, exit_code: int) -> dict[str, str] | None:
    if exit_code != 0:
        return None
    release: dict[str, str] = {}
    for line in lines(output):
        if line.lstrip().startswith("#") or "=" not in line:
            continue
        key, _, raw = line.partition("=")
        words = shlex.split(raw, posix=True) if raw.strip() else [""]
        release[key.strip().lower()] = " ".join(words)
    return release


def parse_kernel(output: str, exit_code: int) -> dict[str, str] | None:
    words = output.split()
    if exit_code != 0 or len(words) != 3:
        return None
    return {"name": words[0], "release": words[1], "machine": words[2]}


def parse_resources(output: str, exit_code: int) -> dict[str, Any] | None:
    rows = lines(output)
    if len(rows) < 3:
        return None
    cpus, mem_kib, disk = rows[0].strip(), rows[1].strip(), rows[-1].split()
    if not (cpus.isdigit() and mem_kib.isdigit()) or len(disk) < 6:
        return None
    return {
        "cpus": int(cpus),
        "memory_mib": int(mem_kib) // 1024,
        "disk_root": {"size_mib": int(disk[1]) // 1024, "available_mib": int(disk[3]) // 1024},
    }


def parse_python(output: str, exit_code: int) -> str | None:
    words = output.split()
    if exit_code != 0 or len(words) != 2 or words[0] != "Python":
        return None
    return words[1]


OS_RELEASE = Fact("os_release", fixed(OS_RELEASE_COMMAND), parse_os_release)
KERNEL = Fact("kernel", fixed(KERNEL_COMMAND), parse_kernel)
RESOURCES = Fact("resources", fixed(RESOURCES_COMMAND), parse_resources)
PYTHON = Fact("python", fixed(PYTHON_COMMAND), parse_python)
