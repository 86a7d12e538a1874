"""Connections are built by several threads at once (`forks`): each gets a Fabric config of its own. One
shared config failed a Ray group's apply in a CI dry run: a Connection writes into its config, and the
re-merge that follows empties it for a moment under another thread's `Connection()`."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from vllmctl.transport.connection import connection_chain
from vllmctl.transport.target import Hop, SshTarget


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Threads switch every microsecond instead of every 5 ms, so an unsafe window is met in a second."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def target(index: int) -> SshTarget:
    jump = Hop("ops@bastion", "bastion", "ops", 22, ())
    address = f"10.0.{index // 250}.{index % 250 + 1}"
    return SshTarget(f"h{index}", f"h{index}", address, "ops", 22, (), False, (jump,), None, None, True, 5.0)


def test_connections_built_by_many_threads_at_once_all_come_up(busy_switching: None) -> None:
    with ThreadPoolExecutor(8) as pool:
        chains = list(pool.map(lambda i: connection_chain(target(i)), range(1000)))
    assert all(len(chain) == 2 for chain in chains)
    assert len({id(chain[-1].config) for chain in chains}) == len(chains)
