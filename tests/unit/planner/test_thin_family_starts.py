"""Issue #49's non-hybrid thin families: the cited public starts each family row replays, and the family
count line, whose parts (replayed, cited but not replayed) add up to the records it names."""

from __future__ import annotations

import re
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from planner_accuracy import FAMILIES, family_count, family_of  # noqa: E402
from startup_records import load_cases  # noqa: E402

PUBLIC = BENCHMARKS / "data" / "vllm_startup_public.jsonl"


def test_the_family_count_line_adds_up() -> None:
    # it read "vision-language MoE: 3 replayed record(s); 3 cited for #49 (3 not replayed ...)": the three
    # replayed were classified by architecture, the three cited others not replayed, six in all
    records, cases = load_cases(PUBLIC)
    for family, _ in FAMILIES:
        line = family_count(family, records, cases)
        total, replayed, named, classified, cited = (int(n) for n in re.findall(r"\d+", line))
        members = [c for c in cases if family_of(c) == family]
        assert (replayed, total) == (len(members), replayed + cited), (family, line)
        assert named + classified == replayed, (family, line)
        naming = [r for r in records if r.get("family") == family and not r.get("excluded")]
        assert named + cited == len(naming), (family, line)
    line = family_count("vision-language MoE", records, cases)
    assert line.startswith("6 record(s): 3 replayed (0 named for the family, 3 classified"), line
