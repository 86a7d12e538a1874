"""The caching allocator's whole-block counting that 'Model loading took' includes."""

from __future__ import annotations

import pytest

from vllmctl.planner.allocator import LOAD_MAX_SPLIT, allocated_block_bytes, load_max_split
from vllmctl.planner.versions import parse_version

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


@pytest.mark.parametrize(
    ("size", "counted"),
    [
        (24.5 * MIB, 26 * MIB),  # from 20 MiB (max_split_size) a segment is never split: Qwen2.5-7B's o_proj
        (52.5 * MIB, 54 * MIB),  # Qwen2.5-1.5B's gate_up, 1.5 MiB left over
        (16.625 * MIB, 16.625 * MIB),  # below 20 MiB the old rule: Qwen2.5-0.5B's gate_up is split
        (259 * MIB, 260 * MIB),
    ],
)
def test_blocks_counted_under_vllms_load_time_max_split(size: float, counted: float) -> None:
    assert allocated_block_bytes(size, LOAD_MAX_SPLIT) == counted


def test_the_load_time_max_split_is_cuda_from_021() -> None:
    assert load_max_split(parse_version("0.21.0"), "nvidia") == LOAD_MAX_SPLIT == 20 * MIB
    assert load_max_split(parse_version("0.20.0"), "nvidia") == float("inf")
    assert load_max_split(parse_version("0.30.0"), "amd") == float("inf")  # is_cuda() only
