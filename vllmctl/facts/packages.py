"""Package facts: installed `nvidia-driver-*` Debian packages, apt holds, `/var/run/reboot-required`,
the boot id and which installers (apt-get, uv) the host has; the versions its apt sources offer."""

from __future__ import annotations

from typing import Any

from vllmctl.facts.base import Fact, fixed, lines, quoted_words

HOLDS_MARK = "@@holds"
REBOOT_MARK = "@@reboot-required"
TOOLS_MARK = "@@tools"
BOOT_MARK = "@@boot-id"
DRIVER_PACKAGES_COMMAND = (
    "command -v dpkg-query >/dev/null 2>&1 || { echo 'dpkg-query: command not found'; exit 127; }; "
    "dpkg-query -W -f='${Package}\\t${Version}\\t${db:Status-Abbrev}\\n' 'nvidia-driver-*' 2>/dev/null; "
    f"echo {HOLDS_MARK}; apt-mark showhold 2>/dev/null; "
    f"echo {REBOOT_MARK}; if [ -e /var/run/reboot-required ]; then echo yes; else echo no; fi; "
    f"echo {BOOT_MARK}; cat /proc/sys/kernel/random/boot_id 2>/dev/null; "
    f"echo {TOOLS_MARK}; for t in apt-get uv; do command -v $t >/dev/null 2>&1 && echo $t; done; true"
)


def parse_driver_packages(output: str, exit_code: int) -> dict[str, Any]:
    """`installed` maps package -> version for installed packages (`ii`, `hi`), not `rc` leftovers."""
    if exit_code == 127:
        return {
            "apt": False,
            "installed": {},
            "held": [],
            "reboot_required": False,
            "tools": [],
            "boot_id": None,
        }
    section = "packages"
    installed: dict[str, str] = {}
    held: list[str] = []
    tools: list[str] = []
    reboot = False
    boot_id: str | None = None
    for line in lines(output):
        marks = {HOLDS_MARK: "holds", REBOOT_MARK: "reboot", BOOT_MARK: "boot", TOOLS_MARK: "tools"}
        if line.strip() in marks:
            section = marks[line.strip()]
        elif section == "packages":
            fields = line.split("\t")
            # Status-Abbrev: wanted action (i install, h hold, ...) then state (i installed, c config-files)
            if len(fields) == 3 and fields[2][1:2] == "i":
                installed[fields[0]] = fields[1]
        elif section == "holds":
            held.append(line.strip())
        elif section == "reboot":
            reboot = line.strip() == "yes"
        elif section == "boot":
            boot_id = line.strip()
        else:
            tools.append(line.strip())
    return {
        "apt": "apt-get" in tools,
        "installed": installed,
        "held": sorted(held),
        "reboot_required": reboot,
        "tools": sorted(tools),
        "boot_id": boot_id,
    }


DRIVER_PACKAGES = Fact("driver_packages", fixed(DRIVER_PACKAGES_COMMAND), parse_driver_packages)


def dpkg_command(args: tuple[str, ...]) -> str:
    return (
        "command -v dpkg-query >/dev/null 2>&1 || exit 127; "
        f"dpkg-query -W -f='${{Package}}\\t${{Version}}\\t${{db:Status-Abbrev}}\\n' {quoted_words(args)} "
        "2>/dev/null; true"
    )


def parse_dpkg(output: str, exit_code: int) -> dict[str, str] | None:
    """Installed packages among those asked for, name -> version; None on a host without dpkg."""
    if exit_code == 127:
        return None
    found: dict[str, str] = {}
    for line in lines(output):
        fields = line.split("\t")
        if len(fields) == 3 and fields[2][1:2] == "i":
            found[fields[0]] = fields[1]
    return found


DPKG = Fact("dpkg", dpkg_command, parse_dpkg, needs_args=True)


def apt_versions_command(args: tuple[str, ...]) -> str:
    madison = f"apt-cache madison {quoted_words(args)} 2>/dev/null"
    return f"command -v apt-cache >/dev/null 2>&1 || exit 127; {madison}; true"


def parse_apt_versions(output: str, exit_code: int) -> dict[str, list[str]] | None:
    """What the host's apt sources offer of the packages asked for, name -> Debian versions, each once, in
    apt's order (newest first); a package no source offers is absent; None on a host without apt."""
    if exit_code == 127:
        return None
    found: dict[str, list[str]] = {}
    for line in lines(output):
        fields = [field.strip() for field in line.split("|")]
        if len(fields) >= 3 and fields[0] and fields[1]:
            versions = found.setdefault(fields[0], [])
            if fields[1] not in versions:
                versions.append(fields[1])
    return found


APT_VERSIONS = Fact("apt_versions", apt_versions_command, parse_apt_versions, needs_args=True)
