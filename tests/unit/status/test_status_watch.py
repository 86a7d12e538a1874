"""`vllmctl status --watch`: rounds every `--every` seconds until Ctrl-C, redrawn as table and findings or
streamed as one JSON document per line; Ctrl-C ends it with the last round's verdict, never a traceback.
Metrics come over real HTTP from the stand-in for a queueing vLLM (tests/status/conftest.py)."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from vllmctl import cli
from vllmctl.commands import status as status_command
from vllmctl.console import Ui
from vllmctl.runner.status import collect as status_flow
from vllmctl.status.model import ModelStatus

from .test_plan_from_status_command import _inventory, host_facts  # noqa: F401  (a fixture)


def test_rounds_are_paced_from_their_start_and_ctrl_c_keeps_the_last_whole_round() -> None:
    now = [0.0]
    slept: list[float] = []
    shown: list[list[ModelStatus]] = []
    rounds = iter([[ModelStatus("a", "m", 1)], [ModelStatus("b", "m", 1)]])

    def gather() -> list[ModelStatus]:
        now[0] += 1.5  # a round takes 1.5 s of scrapes
        return next(rounds)

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 2:
            raise KeyboardInterrupt
        now[0] += seconds

    last = status_flow.watch(gather, shown.append, 5.0, clock=lambda: now[0], sleep=sleep)
    assert slept == [3.5, 3.5]
    assert [s[0].host for s in shown] == ["a", "b"]
    assert last == [ModelStatus("b", "m", 1)]


def test_a_round_slower_than_every_starts_the_next_at_once() -> None:
    now = [0.0]
    slept: list[float] = []

    def gather() -> list[ModelStatus]:
        now[0] += 9.0
        return []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        raise KeyboardInterrupt

    status_flow.watch(gather, lambda _: None, 5.0, clock=lambda: now[0], sleep=sleep)
    assert slept == [0.0]


def _run_rounds(argv: list[str], rounds: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """Run `status` in-process; the round after `rounds` is interrupted as Ctrl-C would interrupt it."""
    gathered = [0]
    real_gather = status_flow.gather

    def counted(*args: Any) -> list[ModelStatus]:
        gathered[0] += 1
        if gathered[0] > rounds:
            raise KeyboardInterrupt
        return real_gather(*args)

    monkeypatch.setattr(status_flow, "gather", counted)
    out = io.StringIO()
    ui = Ui(out=out, err=io.StringIO())
    args = cli.build_parser().parse_args(argv)
    code = status_command.run(args, ui)
    return code, out.getvalue()


@pytest.mark.usefixtures("host_facts")
def test_watch_json_streams_one_document_per_round(
    tmp_path: Path, queueing_vllm_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = _inventory(tmp_path, queueing_vllm_port)
    argv = ["status", str(inventory), "--watch", "--json", "--every", "0", "--interval", "0.05"]
    code, out = _run_rounds(argv, 2, monkeypatch)
    lines = out.splitlines()
    assert len(lines) == 2
    for line in lines:
        doc = json.loads(line)
        (entry,) = doc["entries"]
        assert doc["ok"] and doc["time"]
        assert (entry["metrics"]["requests_running"], entry["metrics"]["requests_waiting"]) == (2, 6)
        assert [a["code"] for a in entry["advice"]] == ["max-num-seqs-too-low"]
    assert code == 0


@pytest.mark.usefixtures("host_facts")
def test_piped_watch_prints_each_round_with_its_findings(
    tmp_path: Path, queueing_vllm_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = _inventory(tmp_path, queueing_vllm_port)
    argv = ["status", str(inventory), "--watch", "--every", "0", "--interval", "0.05"]
    code, out = _run_rounds(argv, 2, monkeypatch)
    assert code == 0
    assert out.count("every 0s, Ctrl-C to stop") == 2
    assert out.count("max-num-seqs-too-low") == 2  # the advice cell of each round's table
    # the finding's sentence, with its evidence and the change, sits under each table
    assert out.count("waiting_max=6") == 2 and out.count("-> max_num_seqs=4") == 2


def test_a_terminal_redraws_one_screen_in_place(tmp_path: Path, queueing_vllm_port: int) -> None:
    inventory = _inventory(tmp_path, queueing_vllm_port, ssh_port=1)
    argv = [sys.executable, "-m", "vllmctl", "status", str(inventory), "--watch", "--every", "0.2"]
    argv += ["--interval", "0.05", "--timeout", "5"]
    controller, terminal = pty.openpty()
    env = {key: value for key, value in os.environ.items() if key not in ("NO_COLOR", "COLUMNS")}
    env |= {"TERM": "xterm", "COLUMNS": "160", "LINES": "40"}
    with subprocess.Popen(argv, stdout=terminal, stderr=subprocess.PIPE, env=env) as proc:
        os.close(terminal)
        seen = b""
        deadline = time.monotonic() + 60
        while seen.count(b"Ctrl-C to stop") < 2 and time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 1)
            if ready:
                seen += os.read(controller, 65536)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    os.close(controller)
    assert seen.count(b"Ctrl-C to stop") >= 2, seen[-2000:]
    assert b"\x1b[1A" in seen  # the cursor goes back up: the second round is drawn over the first
    assert b"unreachable" in seen
    assert proc.returncode == 1 and b"Traceback" not in err


def test_ctrl_c_ends_a_real_watch_with_the_verdict_and_no_traceback(
    tmp_path: Path, queueing_vllm_port: int
) -> None:
    inventory = _inventory(tmp_path, queueing_vllm_port, ssh_port=1)  # SSH refused: the host is unreachable
    argv = [sys.executable, "-m", "vllmctl", "status", str(inventory), "--watch", "--json", "--every", "0.2"]
    argv += ["--interval", "0.05", "--timeout", "5"]
    env = {**os.environ, "NO_COLOR": "1"}
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        second = json.loads(proc.stdout.readline())
        time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    for doc in (first, second):
        (entry,) = doc["entries"]
        assert not doc["ok"] and entry["error"].startswith("unreachable")
    assert proc.returncode == 1  # the last round was not ok
    assert "Traceback" not in err
