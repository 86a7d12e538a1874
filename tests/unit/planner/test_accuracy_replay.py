"""Issue #16's accuracy replay over the repository's cited public startups, held as a regression guard: the
figures that meet their targets keep meeting them, none is over-predicted by more than 5 %, and the one known
weights miss stays the named, explained one."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from planner_accuracy import replay  # noqa: E402
from startup_records import load_cases  # noqa: E402

# A dirty sm_75 fork build (0.28.1rc1.dev50+...d20260828) loads Qwen2.5-1.5B at 2.98 GiB, 0.10 above its
# checkpoint; upstream loads tied-embedding Qwen2.5 at checkpoint size.
KNOWN_WEIGHT_MISSES = ("search-index id 67109588529",)


def test_medians_meet_the_issue_targets_and_every_go_no_go_is_right() -> None:
    (weights, available, tokens, end_to_end, feasible), _ = replay(
        load_cases(BENCHMARKS / "data" / "vllm_startup_public.jsonl")[1]
    )
    assert len(available.errors) >= 35 and len(feasible.errors) >= 45
    assert weights.median() <= 0.01
    assert available.median() <= 0.02
    assert end_to_end.median() <= 0.02
    assert all(abs(error) <= 0.02 for error in tokens.errors)
    assert [case for case, error in zip(feasible.cases, feasible.errors, strict=True) if error] == []


def test_only_the_explained_records_miss() -> None:
    (weights, *_), over = replay(load_cases(BENCHMARKS / "data" / "vllm_startup_public.jsonl")[1])
    assert over == []
    off = [case for case, error in zip(weights.cases, weights.errors, strict=True) if abs(error) > 0.03]
    assert all(any(known in case for known in KNOWN_WEIGHT_MISSES) for case in off), off
