"""The per-release table of multi-node launch flags read from vLLM's source, and the refusals it drives."""

from __future__ import annotations

import pytest

from vllmctl.errors import PlanError
from vllmctl.multinode import launch_support
from vllmctl.multinode.launch_flags import LAUNCH_FLAGS_BY_RELEASE, RELEASES_READ


def test_the_table_starts_at_the_first_release_read_and_is_ordered() -> None:
    firsts = [row[0] for row in LAUNCH_FLAGS_BY_RELEASE]
    assert firsts == sorted(firsts) and firsts[0] == RELEASES_READ[0]
    assert all(row[0] in RELEASES_READ for row in LAUNCH_FLAGS_BY_RELEASE)


def test_nnodes_first_shipped_in_0_11_1_and_dp_flags_are_older() -> None:
    assert "--nnodes" not in (launch_support.accepted_flags((0, 11, 0)) or ())
    for version in ((0, 11, 1), (0, 12, 0), (0, 32, 0), (0, 34, 0)):
        flags = launch_support.accepted_flags(version)
        assert flags is not None and set(launch_support.NNODES_FLAGS) <= flags
    old = launch_support.accepted_flags((0, 11, 0))
    assert old is not None and set(launch_support.DP_FLAGS) <= old
    assert "--data-parallel-external-lb" not in old and "--data-parallel-hybrid-lb" in old
    assert launch_support.all2all_default((0, 32, 0)) == "allgather_reducescatter"


def test_a_release_not_read_has_no_flags_and_is_refused_with_that_reason() -> None:
    assert launch_support.accepted_flags((0, 10, 2)) is None
    assert launch_support.accepted_flags((0, 35, 0)) is None
    with pytest.raises(PlanError) as refused:
        launch_support.check_release("big", "vllm", "0.35.0", launch_support.NNODES_FLAGS)
    assert refused.value.message == (
        "launcher vllm in group 'big': vLLM 0.35.0's launch flags were not read (read: 0.11.0 to 0.34.0, "
        "tools/gen_vllm_launch_flags.py), so its command line is not known"
    )
    launch_support.check_release("big", "vllm", "0.32.0+cpu", launch_support.NNODES_FLAGS)
