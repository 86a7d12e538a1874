"""GPU facts from nvidia-smi: the GPU list (driver present, absent, tool missing), the topology, and the
processes holding GPU memory, each marked with the vllmctl unit it runs in (none: another process's)."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

from vllmctl.facts.base import Fact, fixed, lines
from vllmctl.paths import UNIT_PREFIX

QUERY = "index,name,memory.total,memory.used,driver_version,pci.bus_id"
GPUS_COMMAND = (
    "command -v nvidia-smi >/dev/null 2>&1 || { echo 'nvidia-smi: command not found'; exit 127; }; "
    f"nvidia-smi --query-gpu={QUERY} --format=csv,noheader,nounits"
)
TOPOLOGY_COMMAND = "command -v nvidia-smi >/dev/null 2>&1 || exit 127; nvidia-smi topo -m"

_MISSING_VALUES = {"[N/A]", "N/A", "[Not Supported]", ""}


def _int_or_none(value: str) -> int | None:
    return None if value in _MISSING_VALUES else int(float(value))


def _text_or_none(value: str) -> str | None:
    return None if value in _MISSING_VALUES else value


def parse_gpus(output: str, exit_code: int) -> dict[str, Any]:
    if exit_code == 127:
        return {"status": "not-installed", "gpus": []}
    first = next(iter(lines(output)), "")
    if exit_code != 0:
        status = "no-driver" if "couldn't communicate with the NVIDIA driver" in output else "error"
        return {"status": status, "gpus": [], "message": first.strip(), "exit_code": exit_code}
    gpus = []
    for row in csv.reader(io.StringIO(output), skipinitialspace=True):
        if not row or not row[0].strip():
            continue
        if len(row) != 6:
            return {"status": "error", "gpus": [], "message": f"unexpected nvidia-smi row: {row}"}
        index, name, total, used, driver, bus_id = (cell.strip() for cell in row)
        gpus.append(
            {
                "index": int(index),
                "name": name,
                "memory_total_mib": _int_or_none(total),
                "memory_used_mib": _int_or_none(used),
                "driver_version": _text_or_none(driver),
                "pci_bus_id": _text_or_none(bus_id),
            }
        )
    return {"status": "ok", "gpus": gpus}


_DEVICE = re.compile(r"^GPU\d+$")


def parse_topology(output: str, exit_code: int) -> dict[str, Any] | None:
    if exit_code != 0:
        return None
    rows = [line.rstrip() for line in output.splitlines()]
    header = next((row for row in rows if row[:1] in (" ", "\t") and row.strip().startswith("GPU0")), None)
    if header is None:
        return None
    devices = [word for word in header.split() if _DEVICE.match(word)]
    links: dict[str, dict[str, str]] = {}
    for row in rows:
        words = row.split()
        if len(words) > len(devices) and _DEVICE.match(words[0]) and row[:1] not in (" ", "\t"):
            links[words[0]] = {
                peer: value
                for peer, value in zip(devices, words[1 : 1 + len(devices)], strict=True)
                if peer != words[0]
            }
    return {"gpus": devices, "links": links}


APPS_MARK = "@@apps"
# the unit from the process's cgroup path (`.../system.slice/vllmctl-<name>.service`), "-" for none
GPU_PROCESSES_COMMAND = (
    "command -v nvidia-smi >/dev/null 2>&1 || exit 127; "
    "nvidia-smi --query-gpu=index,uuid --format=csv,noheader || exit $?; "
    f"echo {APPS_MARK}; "
    "nvidia-smi --query-compute-apps=pid,gpu_uuid,used_memory --format=csv,noheader,nounits 2>/dev/null | "
    "while IFS=', ' read -r pid uuid mib; do "
    f"unit=$(sed -n 's|.*/\\({UNIT_PREFIX}[^/]*\\.service\\).*|\\1|p' \"/proc/$pid/cgroup\" 2>/dev/null "
    "| head -n 1); "
    'printf \'%s %s %s %s\\n\' "$pid" "$uuid" "$mib" "${unit:--}"; done; true'
)


def parse_gpu_processes(output: str, exit_code: int) -> dict[str, Any] | None:
    """{"processes": [{"pid", "gpu" (index), "mib", "unit" (None: not vllmctl's)}]}; None without a driver."""
    if exit_code != 0:
        return None
    indexes: dict[str, int] = {}
    processes: list[dict[str, Any]] = []
    in_apps = False
    for line in lines(output):
        if line.strip() == APPS_MARK:
            in_apps = True
        elif not in_apps:
            index, _, uuid = (cell.strip() for cell in line.partition(","))
            if index.isdigit() and uuid:
                indexes[uuid] = int(index)
        else:
            words = line.split()
            if len(words) == 4 and words[0].isdigit() and words[1] in indexes and words[2].isdigit():
                unit = None if words[3] == "-" else words[3]
                processes.append(
                    {"pid": int(words[0]), "gpu": indexes[words[1]], "mib": int(words[2]), "unit": unit}
                )
    return {"processes": processes}


def foreign_gpu_mib(gpus: list[dict[str, Any]], held: dict[str, Any] | None) -> list[int]:
    """Per GPU, the memory in use minus what processes in vllmctl's units hold: what the planner must leave
    to others (a serving engine of ours is about to be replaced, not kept beside the new one)."""
    ours: dict[int, int] = {}
    for process in (held or {}).get("processes", []):
        if process["unit"]:
            ours[process["gpu"]] = ours.get(process["gpu"], 0) + process["mib"]
    return [
        max(0, gpu["memory_used_mib"] - ours.get(gpu["index"], 0))
        for gpu in gpus
        if isinstance(gpu.get("memory_used_mib"), int)
    ]


GPUS = Fact("gpus", fixed(GPUS_COMMAND), parse_gpus)
GPU_PROCESSES = Fact("gpu_processes", fixed(GPU_PROCESSES_COMMAND), parse_gpu_processes)
GPU_TOPOLOGY = Fact("gpu_topology", fixed(TOPOLOGY_COMMAND), parse_topology)
