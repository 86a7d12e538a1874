"""The caching allocator's whole-block counting that 'Model loading took' includes."""

from __future__ import annotations

import pytest

from vllmctl.planner.allocator import allocated_block_bytes

MIB = 1 << 20


@pytest.mark.parametrize(
    ("size", "counted"),
    [
        (259 * MIB, 260 * MIB),  # Qwen2.5-7B gate_up: 1 MiB left is not split off
        (129.5 * MIB, 130 * MIB),  # its down projection
        (24.5 * MIB, 24.5 * MIB),  # 1.5 MiB left over is split off and stays free
        (256 * MIB, 256 * MIB),  # whole 2 MiB multiples (Llama-3.1-8B's shapes) cost nothing more
        (9.5 * MIB, 9.5 * MIB),  # below 10 MiB: shares a 20 MiB segment that is split
        (11.25 * MIB, 12 * MIB),  # from 10 MiB: its own segment, in 2 MiB steps
        (1000, 1024),  # every request rounds to 512 bytes
    ],
)
def test_blocks_counted(size: float, counted: float) -> None:
    assert allocated_block_bytes(size) == counted
