"""The lab's Ray stand-in on the spare pair (lab hosts 3 and 4): an inventory of just those two hosts in a
multi_node group whose engine is the vLLM stand-in (docs/multinode.md), its wheel served by the lab package
server, and a teardown that leaves no unit, venv, Ray state, group release or model behind."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from raylab import RAY_UNIT, RayLab, clean_pair, pair_doc
from standin_wheel import PACKAGE, ensure_standin_wheel

from vllmctl.lab.testing import LabFleet

ENGINE_UNIT = "vllmctl-tiny-0.service"
MODEL_DIR = "/var/tmp/vllmctl-standin-{pid}/tiny"


def complete(lab: RayLab, prompt: str = "Hello") -> dict[str, Any]:
    """POST /v1/completions on the head, from the controller."""
    head = lab.hosts[0]
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 8}
    answer = httpx.post(f"http://{head.address}:8000/v1/completions", json=body, timeout=30)
    assert answer.status_code == 200, answer.text
    loaded: dict[str, Any] = answer.json()
    return loaded


def hostnames(lab: RayLab) -> list[str]:
    return [lab.sh(host, "hostname").strip() for host in lab.hosts]


def standin_lab_session(lab_fleet: LabFleet, workdir: Path) -> Iterator[RayLab]:
    """The spare pair with the stand-in as their engine and a multi_node group over them; nothing is
    installed or staged: `vllmctl apply` does both."""
    from vllmctl.lab.tinymodel import ensure_tiny_model
    from vllmctl.lab.wheelhouse import ensure_ray_wheels

    ensure_ray_wheels()
    version, _wheel = ensure_standin_wheel()
    model_dir = Path(MODEL_DIR.format(pid=os.getpid()))
    shutil.copytree(ensure_tiny_model(), model_dir, dirs_exist_ok=True)
    doc, hosts = pair_doc(lab_fleet, model_dir)
    doc["hosts"] = {h.name: doc["hosts"][h.name] for h in hosts}  # the deployment's hosts stay out of it
    engine = {"name": "vllm", "package": PACKAGE, "version": version, "index_url": lab_fleet.index_url}
    doc["defaults"]["engine"] = engine
    lab = RayLab(lab_fleet, hosts, doc, workdir)
    try:
        yield lab
    finally:
        more = ("/var/lib/vllmctl/releases", "/etc/vllmctl")
        clean_pair(lab_fleet, hosts, (ENGINE_UNIT, RAY_UNIT), model_dir, "stand-in lab", *more)
