"""`validate` and `plan --offline` stay linear in hosts: the work they do (Python and C calls, counted, not
timed) for 1,000 hosts is about 4x that for 250 (a check that walks every host per host makes it 16x).
benchmarks/inventory_scale.py times 1,000 and 10,000 hosts."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vllmctl import cli

LINEAR_RATIO = 4.6  # 4x the hosts; what is fixed per run (the planner, imports) keeps it above 4


def fleet(path: Path, hosts: int) -> Path:
    """One group of identical 8xH100 hosts serving one model, as a big fleet is written."""
    names = [f"gpu{i:05d}" for i in range(hosts)]
    lines = ["vllmctl: 1", "defaults:", '  driver: {branch: "580", reboot: false}', "hosts:"]
    lines += [f"  {n}: {{address: 10.0.{i // 250}.{i % 250 + 1}, gpus: {{model: H100-80GB, count: 8}}}}"
              for i, n in enumerate(names)]  # fmt: skip
    lines += ["groups:", f"  fleet: [{', '.join(names)}]", "models:"]
    lines += ["  llama:", "    source: meta-llama/Llama-3.1-8B-Instruct", "    hosts: [fleet]"]
    path.write_text("\n".join(lines) + "\n")
    return path


def calls(run: Callable[[], Any]) -> int:
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("command", [["validate", "--no-controller-checks"], ["plan", "--offline", "--json"]])
def test_work_grows_linearly_with_hosts(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(hosts: int) -> int:
        inventory = str(fleet(tmp_path / f"fleet{hosts}.yml", hosts))
        return calls(lambda: cli.main([command[0], inventory, *command[1:]]))

    run(10)  # imports and caches, once
    small, large = run(250), run(1000)
    capsys.readouterr()
    assert large / small <= LINEAR_RATIO, (small, large)


def test_a_problem_on_every_host_stays_linear(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller's checks where the default ~/.ssh/known_hosts does not exist: one problem per host,
    each de-duplicated against the others (a list scan made 10,000 hosts take 55 s)."""
    monkeypatch.setenv("HOME", str(tmp_path))

    def run(hosts: int) -> int:
        inventory = str(fleet(tmp_path / f"fleet{hosts}.yml", hosts))
        return calls(lambda: cli.main(["validate", inventory]))

    run(10)
    small, large = run(250), run(1000)
    assert capsys.readouterr().err.count("known_hosts ~/.ssh/known_hosts does not exist") == 10 + 250 + 1000
    assert large / small <= LINEAR_RATIO, (small, large)
