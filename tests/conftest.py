"""Shared fixtures: lab fleets of real container hosts and a local real vLLM (session-scoped, always torn
down), and marker skips.

`lab`-marked tests are skipped, with the reason, when this machine cannot run a lab (not root, no tools).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from vllmctl.errors import VllmctlError
from vllmctl.lab.testing import LabFleet, start_fleet, stop_fleet

if TYPE_CHECKING:  # imported where used: the engine helpers pull in numpy and httpx, the unit suite need not
    from vllmctl.lab.local_engine import LocalServer, ServeLocalVllm


def lab_unavailable_reason() -> str | None:
    if not sys.platform.startswith("linux"):
        return "lab tests need Linux"
    if os.geteuid() != 0:
        return "lab tests need root (network namespaces, mounts, systemd-nspawn)"
    from vllmctl.lab.preflight import APT_LINE, missing_tools

    missing = missing_tools()
    if missing:
        return f"lab tests need {', '.join(sorted(missing))}: {APT_LINE}"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    needs_lab = [item for item in items if item.get_closest_marker("lab") is not None]
    if not needs_lab:
        return
    reason = lab_unavailable_reason()
    if reason is None:
        return
    for item in needs_lab:
        item.add_marker(pytest.mark.skip(reason=reason))


def reap_orphaned_test_fleets() -> None:
    """Remove fleets left by test sessions that were killed before their teardown could run."""
    from vllmctl.lab import state

    for saved in state.all_states():
        match = re.fullmatch(r"pt(\d+)-.+", saved.name)
        if match and not Path(f"/proc/{match[1]}").exists():
            stop_fleet(saved.name)


@pytest.fixture(scope="session")
def lab_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabFleet]:
    """Four lab hosts shared by the whole session, removed at its end even when tests fail."""
    reap_orphaned_test_fleets()
    name = f"pt{os.getpid()}-4"
    inventory = tmp_path_factory.mktemp("lab4") / "lab.yml"
    try:
        yield start_fleet(name, 4, inventory, gpus="8xH100-80GB,2xL40S")
    finally:
        stop_fleet(name)


@pytest.fixture(scope="session")
def lab_fleet_16(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabFleet]:
    """Sixteen lab hosts shared by the whole session (keep at most one such fleet on a machine)."""
    reap_orphaned_test_fleets()
    name = f"pt{os.getpid()}-16"
    inventory = tmp_path_factory.mktemp("lab16") / "lab.yml"
    try:
        yield start_fleet(name, 16, inventory)
    finally:
        stop_fleet(name)


@pytest.fixture(scope="session")
def serve_local_vllm(tmp_path_factory: pytest.TempPathFactory) -> ServeLocalVllm:
    """Starts real vLLM (CPU build) with the tiny model on 127.0.0.1: skips where no engine can be built here,
    fails where it does not start; always stopped, whole process group."""
    from vllmctl.lab.local_engine import EngineUnavailableError, free_port, local_vllm_server

    @contextmanager
    def serve(
        extra_args: Sequence[str] = (), ports: Iterable[int] = (), ready_deadline_s: float = 300.0
    ) -> Iterator[LocalServer]:
        log = tmp_path_factory.mktemp("vllm") / "server.log"
        try:
            port = free_port(ports)
            with local_vllm_server(
                extra_args, port=port, log_path=log, ready_deadline_s=ready_deadline_s
            ) as server:
                yield server
        except EngineUnavailableError as exc:
            pytest.skip(exc.message.splitlines()[0])
        except VllmctlError as exc:
            pytest.fail(exc.render())

    return serve


@pytest.fixture(scope="session")
def local_vllm(serve_local_vllm: ServeLocalVllm) -> Iterator[LocalServer]:
    """One server with vLLM's default flags, shared by every test that needs no flags of its own."""
    with serve_local_vllm() as server:
        yield server
