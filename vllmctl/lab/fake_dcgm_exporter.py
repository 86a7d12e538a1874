#!/usr/bin/python3
"""The lab's stand-in for NVIDIA's DCGM Exporter (`/usr/bin/dcgm-exporter -f COUNTERS [-a :PORT]`): serves on
/metrics exactly the fields its counters file lists, in the exporter's text format and labels, from the lab
GPU spec (/etc/vllmctl-lab/gpus.json), read at each scrape. A field it does not know stops it at start, as an
unknown field stops the real exporter. Standard library only: it runs on the host's python3."""

from __future__ import annotations

import itertools
import json
import os
import socket
import sys
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

GPUS_JSON = os.environ.get("VLLMCTL_LAB_GPUS", "/etc/vllmctl-lab/gpus.json")
# dcgmFabricManagerStatus_t (go-dcgm's DCGM_FI_DEV_FABRIC_MANAGER_STATUS states, in order)
FM_STATES = {"N/A": 0, "Not Started": 1, "In Progress": 2, "Completed": 3}
Value = Callable[[dict[str, Any], dict[str, Any]], float]


def _fabric(doc: dict[str, Any]) -> float:
    """As the lab nvidia-smi's Fabric state: not supported outside an NVLink fabric."""
    if not doc.get("nvswitches") and not doc.get("sw_mng_bridges"):
        return 0
    return FM_STATES.get(str((doc.get("fabric") or {}).get("state", "Not Started")), 4)


FIELDS: dict[str, Value] = {
    "DCGM_FI_DEV_SM_CLOCK": lambda g, d: 1980,
    "DCGM_FI_DEV_MEM_CLOCK": lambda g, d: 2619,
    "DCGM_FI_DEV_MEMORY_TEMP": lambda g, d: 35,
    "DCGM_FI_DEV_GPU_TEMP": lambda g, d: 30,
    "DCGM_FI_DEV_POWER_USAGE": lambda g, d: 70.0,
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": lambda g, d: 0,
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": lambda g, d: 0,
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": lambda g, d: 0,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": lambda g, d: 0,
    "DCGM_FI_DEV_GPU_UTIL": lambda g, d: 0,
    "DCGM_FI_DEV_MEM_COPY_UTIL": lambda g, d: 0,
    "DCGM_FI_DEV_ENC_UTIL": lambda g, d: 0,
    "DCGM_FI_DEV_DEC_UTIL": lambda g, d: 0,
    "DCGM_FI_DEV_XID_ERRORS": lambda g, d: int(g.get("last_xid", 0)),
    "DCGM_FI_DEV_FB_FREE": lambda g, d: int(g["memory_total_mib"]) - int(g["memory_used_mib"]),
    "DCGM_FI_DEV_FB_USED": lambda g, d: int(g["memory_used_mib"]),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": lambda g, d: 0,
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": lambda g, d: 0,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": lambda g, d: int(g.get("remapped_rows_uncorrectable", 0)),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": lambda g, d: 0,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": lambda g, d: 1 if g.get("remap_failure") else 0,
    "DCGM_FI_DEV_FABRIC_MANAGER_STATUS": lambda g, d: _fabric(d),
}


def counters(path: str) -> list[tuple[str, str, str]]:
    """(field, type, help) of each line of a counters CSV that is not a comment."""
    rows = []
    with open(path) as handle:
        for line in handle:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            field, kind, *rest = (part.strip() for part in line.split(","))
            rows.append((field, kind, ",".join(rest)))
    return rows


def render(rows: list[tuple[str, str, str]], doc: dict[str, Any], hostname: str) -> str:
    gpus = [gpu for gpu in doc.get("gpus", []) if not gpu.get("lost")]  # what NVML no longer lists
    out = []
    for field, kind, text in rows:
        out += [f"# HELP {field} {text}", f"# TYPE {field} {kind}"]
        for gpu in gpus:
            labels = (
                f'gpu="{gpu["index"]}",UUID="{gpu["uuid"]}",pci_bus_id="{gpu["pci_bus_id"]}",'
                f'device="nvidia{gpu["index"]}",modelName="{gpu["name"]}",Hostname="{hostname}"'
            )
            out.append(f"{field}{{{labels}}} {FIELDS[field](gpu, doc):g}")
    return "\n".join(out) + "\n"


def main(args: list[str]) -> int:
    path, address = "/etc/dcgm-exporter/default-counters.csv", ":9400"
    for flag, value in itertools.pairwise(args):
        if flag in ("-f", "--collectors"):
            path = value
        elif flag in ("-a", "--address"):
            address = value
    rows = counters(path)
    unknown = [field for field, _, _ in rows if field not in FIELDS]
    if unknown:
        print(f"dcgm-exporter (lab stand-in): unknown DCGM fields in {path}: {unknown}", file=sys.stderr)
        return 1
    host, _, port = address.rpartition(":")
    hostname = socket.gethostname()

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            with open(GPUS_JSON) as handle:
                body = render(rows, json.load(handle), hostname).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    ThreadingHTTPServer((host, int(port)), Metrics).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
