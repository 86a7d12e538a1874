"""The lab's Ray stand-in on the spare pair (lab hosts 3 and 4): an inventory of just those two hosts in a
multi_node group whose engine is the vLLM stand-in (docs/multinode.md), its wheel served by the lab package
server, and a teardown that leaves no unit, venv, Ray state, group release or model behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from raylab import RAY_UNIT, RayLab, pair_doc
from standin_wheel import PACKAGE, ensure_standin_wheel

from vllmctl.lab.testing import LabFleet, LabHostInfo

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
        teardown(lab_fleet, hosts, model_dir)


def teardown(fleet: LabFleet, hosts: tuple[LabHostInfo, LabHostInfo], model_dir: Path) -> None:
    """Every step on every host, each under its own limit, even when one is slow (as raylab.py's)."""
    leftovers = f"/opt/vllmctl/venvs /var/lib/vllmctl/ray /var/lib/vllmctl/groups {model_dir.parent}"
    units = f"/etc/systemd/system/{RAY_UNIT} /etc/systemd/system/{ENGINE_UNIT}"
    reload = "sudo systemctl daemon-reload; sudo systemctl reset-failed"
    steps = (
        (f"sudo systemctl disable --now {ENGINE_UNIT} {RAY_UNIT}", 300),
        (f"sudo rm -rf {units} {leftovers} /var/lib/vllmctl/releases /etc/vllmctl; {reload}", 600),
    )
    slow = []
    for host in hosts:
        for command, timeout in steps:
            started = time.monotonic()
            try:
                fleet.ssh(host, command, timeout=timeout)
            except subprocess.TimeoutExpired:
                slow.append(f"{host.name}: `{command}` took over {timeout} s")
            print(f"stand-in lab teardown: {host.name}: {command[:40]}... {time.monotonic() - started:.1f} s")
    shutil.rmtree(model_dir.parent, ignore_errors=True)
    assert not slow, slow
