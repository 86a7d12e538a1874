"""The suite's scheduling holds under the installed pytest and pytest-xdist: the tests of one xdist_group run
on one worker (`make test` keeps each lab fleet's modules together by it, tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SAMPLE = textwrap.dedent(
    """
    import time

    import pytest

    pytestmark = pytest.mark.xdist_group("{group}")


    @pytest.mark.parametrize("n", range(4))
    def test_where(n):
        time.sleep(0.2)
    """
)


def test_each_xdist_group_runs_on_one_worker(tmp_path: Path) -> None:
    for group in ("one", "two"):
        (tmp_path / f"test_{group}.py").write_text(SAMPLE.format(group=group))
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-v"]
    result = subprocess.run([*argv, str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stdout[-3000:]
    passed = [line for line in result.stdout.splitlines() if " PASSED " in line]
    workers: dict[str, set[str]] = {}
    for line in passed:  # "[gw0] [ 12%] PASSED test_one.py::test_where[0]@one"
        group = "one" if "test_one.py" in line else "two"
        workers.setdefault(group, set()).add(line.split("]", 1)[0].lstrip("["))
    assert len(passed) == 8, result.stdout[-3000:]
    assert all(len(found) == 1 for found in workers.values()), passed  # pytest 9.2 with xdist 3.8: two each
