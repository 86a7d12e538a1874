"""The host's engine-gone helper, run as a program: a process left in a unit's cgroup, or one the lab's fake
nvidia-smi lists on a GPU the unit is pinned to, stops the start with that process named and the fix; one
that ends within the wait, or sits on another GPU, does not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from vllmctl.lab import fake_nvidia_smi
from vllmctl.lab.gpus import DRIVER_RELEASES, gpus_document, parse_gpu_spec
from vllmctl.ops.engine_gone import EXIT_STALE, SCRIPT

UNIT = "vllmctl-tiny-0.service"
# `systemctl show -p PROP --value -- UNIT`: the unit's cgroup, its GPU pin, when it went inactive
SYSTEMCTL = """#!/bin/sh
case $3 in
  ControlGroup) echo /system.slice/$6;;
  Environment) echo "HOME=/x CUDA_VISIBLE_DEVICES=1";;
  InactiveEnterTimestampMonotonic) echo 1000000;;
esac
"""


@pytest.fixture
def host(tmp_path: Path) -> Iterator[dict[str, object]]:
    """PATH with a systemctl stand-in and the lab's nvidia-smi (two GPUs), an empty cgroup tree, a
    compute-apps file and a live process to put in either."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(SYSTEMCTL)
    smi = f'#!/bin/sh\nexec {sys.executable} {fake_nvidia_smi.__file__} "$@"\n'
    (bin_dir / "nvidia-smi").write_text(smi)
    for tool in ("systemctl", "nvidia-smi"):
        (bin_dir / tool).chmod(0o755)
    gpus = gpus_document("lab-1", parse_gpu_spec("2xH100-80GB")[0], DRIVER_RELEASES["580"])
    (tmp_path / "gpus.json").write_text(json.dumps(gpus))
    cgroup = tmp_path / "cgroup" / "system.slice" / UNIT
    cgroup.mkdir(parents=True)
    (cgroup / "cgroup.procs").write_text("")
    worker = subprocess.Popen(["sleep", "300"])
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "VLLMCTL_LAB_GPUS": str(tmp_path / "gpus.json"),
        "VLLMCTL_LAB_COMPUTE_APPS": str(tmp_path / "compute-apps"),
        "VLLMCTL_CGROUP_ROOT": str(tmp_path / "cgroup"),
    }
    script = tmp_path / "engine-gone.py"
    script.write_text(SCRIPT)
    try:
        yield {
            "env": env,
            "script": script,
            "procs": cgroup / "cgroup.procs",
            "worker": worker,
            "dir": tmp_path,
        }
    finally:
        worker.kill()
        worker.wait()


def wait_gone(host: dict[str, object], deadline: float) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, str(host["script"]), str(deadline), UNIT]
    return subprocess.run(argv, capture_output=True, text=True, env=host["env"], timeout=60)  # type: ignore[arg-type]


def worker_pid(host: dict[str, object]) -> int:
    worker = host["worker"]
    assert isinstance(worker, subprocess.Popen)
    return int(worker.pid)


def holds(host: dict[str, object], gpu: int, mib: int) -> None:
    Path(str(host["env"]["VLLMCTL_LAB_COMPUTE_APPS"])).write_text(f"{worker_pid(host)} {gpu} {mib}\n")  # type: ignore[index]


def test_a_process_on_the_pinned_gpu_stops_the_start_with_its_evidence(host: dict[str, object]) -> None:
    holds(host, 1, 20480)
    done = wait_gone(host, 1)
    pid = worker_pid(host)
    assert done.returncode == EXIT_STALE, done.stderr
    assert f"{UNIT}: not started: processes still there" in done.stderr
    assert f"pid {pid} (sleep, state S (sleeping)) holds 20480 MiB of GPU 1, which {UNIT} is pinned to" in (
        done.stderr
    )
    assert f"fix: kill -9 {pid}, then apply again" in done.stderr and "reboot the host" in done.stderr


def test_a_process_on_another_gpu_is_not_in_the_way(host: dict[str, object]) -> None:
    holds(host, 0, 20480)
    done = wait_gone(host, 5)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_a_process_left_in_the_units_cgroup_stops_the_start(host: dict[str, object]) -> None:
    Path(str(host["procs"])).write_text(f"{worker_pid(host)}\n")
    done = wait_gone(host, 1)
    assert done.returncode == EXIT_STALE, done.stderr
    assert (
        f"pid {worker_pid(host)} (sleep, state S (sleeping)) is still in {UNIT}'s cgroup; the unit stopped"
        in (done.stderr)
    )


def test_a_process_that_ends_within_the_wait_lets_the_start_go_on(host: dict[str, object]) -> None:
    holds(host, 1, 20480)
    Path(str(host["procs"])).write_text(f"{worker_pid(host)}\n")
    worker = host["worker"]
    assert isinstance(worker, subprocess.Popen)
    ender = threading.Timer(1.5, worker.kill)
    ender.start()
    try:
        done = wait_gone(host, 30)
    finally:
        ender.cancel()
    assert done.returncode == 0, done.stderr
    assert f"{UNIT}: the last run's processes were gone after" in done.stdout


def test_no_nvidia_smi_checks_the_cgroup_alone(host: dict[str, object]) -> None:
    env = dict(host["env"])  # type: ignore[call-overload]
    os.remove(Path(str(host["dir"])) / "bin" / "nvidia-smi")
    holds(host, 1, 20480)
    assert wait_gone({**host, "env": env}, 1).returncode == 0
