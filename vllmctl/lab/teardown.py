"""Taking a lab fleet apart completely (processes, cgroups, mounts, netns, veths, bridge, package server).

Every step tolerates a half-made fleet, so the same code rolls back a failed `lab up` and runs `lab down`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from vllmctl.errors import InputError, VllmctlError
from vllmctl.lab import machines, network, state
from vllmctl.lab.inventory_doc import written_by_lab
from vllmctl.lab.layout import FleetLayout, LabHost, fleet_layout
from vllmctl.lab.preflight import require_root

STOP_GRACE_S = 8.0
TEARDOWN_PASSES = 3
TEARDOWN_RETRY_WAIT_S = 1.0


def host_dir(name: str, host: LabHost) -> Path:
    return state.fleet_dir(name) / "hosts" / host.name


def layout_of(saved: state.FleetState) -> FleetLayout:
    return fleet_layout(saved.name, saved.subnet, saved.host_count)


def _mounts_under(directory: Path) -> list[str]:
    prefix = str(directory) + "/"
    with open("/proc/self/mounts") as handle:
        points = [line.split()[1] for line in handle]
    return [point for point in points if point.startswith(prefix)]


def leftovers(saved: state.FleetState) -> list[str]:
    """Everything of this fleet still present on the controller, named for people."""
    layout = layout_of(saved)
    found = network.leftovers(layout)
    found += [f"mount {point}" for point in _mounts_under(state.fleet_dir(saved.name))]
    for host in layout.hosts:
        if machines.running_pids(layout, host):
            found.append(f"processes of {host.name}")
    for root in machines.cgroup_roots():
        if (root / layout.cgroup).exists():
            found.append(f"cgroup {root / layout.cgroup}")
    if state.process_alive(saved.pkg_server_pid, "vllmctl.lab.pkgserver"):
        found.append(f"package server pid {saved.pkg_server_pid}")
    return found


def _stop_pkg_server(pid: int | None) -> None:
    if not state.process_alive(pid, "vllmctl.lab.pkgserver") or pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 3
    while state.process_alive(pid, "vllmctl.lab.pkgserver") and time.monotonic() < deadline:
        time.sleep(0.05)
    if state.process_alive(pid, "vllmctl.lab.pkgserver"):
        os.kill(pid, signal.SIGKILL)
    _reap(pid)


def _reap(pid: int) -> None:
    # Launchers are our children only when a failed bring-up is rolled back in the same process.
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _steps(saved: state.FleetState) -> list[tuple[str, Callable[[], None]]]:
    layout = layout_of(saved)
    hosts = layout.hosts
    deadline = time.monotonic() + STOP_GRACE_S
    steps: list[tuple[str, Callable[[], None]]] = []
    steps += [
        (f"stop {h.name}", partial(machines.request_stop, layout, h, host_dir(saved.name, h))) for h in hosts
    ]
    steps += [(f"wait for {h.name}", partial(machines.finish_stop, layout, h, deadline)) for h in hosts]
    steps += [(f"reap {pid}", partial(_reap, pid)) for pid in saved.launcher_pids.values()]
    steps.append(("stop the package server", partial(_stop_pkg_server, saved.pkg_server_pid)))
    steps += [(f"unmount {h.name}", partial(machines.unmount, host_dir(saved.name, h))) for h in hosts]
    steps += [(f"network of {h.name}", partial(network.remove_host_network, h)) for h in hosts]
    steps.append(("bridge", partial(network.remove_bridge, layout)))
    steps += [
        (f"cgroup {r}", partial(machines.remove_cgroup_tree, r / layout.cgroup))
        for r in machines.cgroup_roots()
    ]
    return steps


def teardown(saved: state.FleetState) -> None:
    """Run every removal step even when one fails, then check that nothing of the fleet is left."""
    failures: list[str] = []
    remains: list[str] = []
    # Cgroups and mounts of a stopping container can vanish or stay busy for a moment after its processes
    # exit; every step is idempotent, so a short second pass removes what the first raced against.
    for attempt in range(TEARDOWN_PASSES):
        if attempt:
            time.sleep(TEARDOWN_RETRY_WAIT_S)
        failures = []
        for what, step in _steps(saved):
            try:
                step()
            except Exception as exc:  # keep going: a later step may still free what this one needed
                failures.append(f"{what}: {exc}")
        remains = leftovers(saved)
        if not remains:
            break
    if remains:
        detail = f"; errors: {'; '.join(failures)}" if failures else ""
        raise VllmctlError(
            f"lab fleet {saved.name!r} could not be removed completely: {', '.join(remains)}{detail}",
            f"retry `vllmctl lab down --name {saved.name}`; its state is kept so nothing is forgotten",
        )
    if saved.inventory:
        inventory = Path(saved.inventory)
        if inventory.is_file() and written_by_lab(inventory.read_text(), saved.name):
            inventory.unlink()
    _remove_in_background(state.fleet_dir(saved.name))
    state.restore_inotify_if_last()


def _remove_in_background(directory: Path) -> None:
    """Renamed out of the fleets' folder at once (the fleet is gone), then deleted by a detached `rm`: a
    host's overlay holding an engine venv is ~70,000 files, tens of seconds of disk work nobody waits for."""
    trash = state.TRASH_DIR / f"{directory.name}-{os.getpid()}-{time.monotonic_ns()}"
    try:
        state.TRASH_DIR.mkdir(parents=True, exist_ok=True)
        directory.rename(trash)
    except FileNotFoundError:
        return
    except OSError:
        shutil.rmtree(directory, ignore_errors=True)
        return
    empty_trash()


def empty_trash() -> None:
    """Delete whatever is in the trash folder, detached (also what an interrupted earlier delete left)."""
    left = sorted(state.TRASH_DIR.glob("*")) if state.TRASH_DIR.is_dir() else []
    if left:
        argv = ["rm", "-rf", "--", *map(str, left)]
        subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )


def down(name: str) -> None:
    require_root()
    busy = f"a `vllmctl lab up` or `lab down` for fleet {name!r} is in progress"
    with state.lock(name, busy, "wait for it to finish, then retry"):
        saved = state.load(name)
        if saved is None:
            names = ", ".join(s.name for s in state.all_states()) or "none"
            raise InputError(
                f"there is no lab fleet named {name!r}", f"fleets here: {names} (`vllmctl lab list`)"
            )
        teardown(saved)


@dataclass(frozen=True)
class FleetStatus:
    name: str
    hosts: int
    running: int
    cidr: str
    state: str
    inventory: str | None
    pkg_server: bool


def statuses() -> list[FleetStatus]:
    found = []
    for saved in state.all_states():
        layout = layout_of(saved)
        running = sum(
            1 for h in layout.hosts if state.process_alive(saved.launcher_pids.get(h.name), "systemd-nspawn")
        )
        if saved.phase != "up":
            label = "creating or stale"
        elif running == saved.host_count:
            label = "running"
        else:
            label = "stale" if running == 0 else "degraded"
        serving = state.process_alive(saved.pkg_server_pid, "vllmctl.lab.pkgserver")
        found.append(
            FleetStatus(saved.name, saved.host_count, running, layout.cidr, label, saved.inventory, serving)
        )
    return found
