"""Issue #35 on real lab hosts: a fleet of two, the lab's vLLM stand-in (NOT vLLM) served on the second host,
reached only through the first as jump host: its SSH and engine ports dropped for the controller by nftables
in the engine host's network namespace. `apply` passes its gate, `status` reads live metrics, `bench` streams
at concurrency and `rollback` waits for health, all through SSH port forwards; with `ssh.tunnel_http: never`
`status`, `bench` and `apply` fail naming the port and the setting (`apply` before it changes anything); no
run leaves a forward, thread or forwarded connection."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from standin_wheel import PACKAGE, ensure_standin_wheel

from vllmctl.lab.testing import LabFleet, LabHostInfo, in_mounts_of, start_fleet, stop_fleet

pytestmark = pytest.mark.lab

MODEL = "tiny"
PORT = 8000
TABLE = "vllmctl_tunnel_test"


@dataclass
class Tunnelled:
    fleet: LabFleet
    jump: LabHostInfo
    engine: LabHostInfo
    work: Path
    doc: dict[str, Any]

    def inventory(self, name: str = "auto", tunnel_http: str | None = None, **engine_args: int) -> Path:
        doc = json.loads(json.dumps(self.doc))
        entry = doc["hosts"][self.engine.name]
        if tunnel_http is not None:
            entry["ssh"]["tunnel_http"] = tunnel_http
        doc["models"][MODEL]["engine_args"].update(engine_args)
        path = self.work / f"{name}.yml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def env(self) -> dict[str, str]:
        return {**os.environ, "NO_COLOR": "1", "COLUMNS": "250", "XDG_STATE_HOME": str(self.work / "state")}

    def vllmctl(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "vllmctl", *args]
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=self.env(), check=False
        )

    def sh(self, host: LabHostInfo, command: str) -> str:
        done = self.fleet.ssh(host, command, timeout=60)
        assert done.returncode == 0, f"{host.name}: {command}: {done.stderr}"
        return done.stdout

    def on_engine(self, *argv: str) -> str:
        """A command on the engine host, run in its namespaces from here: the controller has no SSH to it."""
        return in_mounts_of(self.fleet, self.engine, list(argv), net=True)

    def forwarded_connections(self) -> list[str]:
        """Established TCP connections to the engine port on its host (what sshd opens for a channel)."""
        ports = f"( dport >= :{PORT} and dport <= :{PORT + 99} )"
        found = self.on_engine("ss", "-Htn", "state", "established", ports)
        return [line for line in found.splitlines() if line.strip()]

    def from_jump(self, path: str) -> int:
        probe = f"import urllib.request; print(urllib.request.urlopen('http://{self.engine.address}:{PORT}{path}').status)"
        return int(self.sh(self.jump, f'python3 -c "{probe}"').strip())


def netns_of(fleet: LabFleet, host: LabHostInfo) -> str:
    from vllmctl.lab.testing import _lab_host

    return str(_lab_host(fleet, host)[1].netns)


def block_controller(fleet: LabFleet, host: LabHostInfo) -> None:
    """nftables in the host's network namespace drops the controller's packets to SSH and the engine ports;
    the jump host (a lab peer) and the host's own loopback, where sshd delivers forwarded channels, still
    reach it."""
    from vllmctl.lab import state
    from vllmctl.lab.teardown import layout_of

    saved = state.load(fleet.name)
    assert saved is not None
    controller = layout_of(saved).bridge_address
    rules = (
        f"table inet {TABLE} {{\n  chain input {{\n    type filter hook input priority 0; policy accept;\n"
        f"    ip saddr {controller} tcp dport {{ 22, {PORT}-{PORT + 99} }} drop\n  }}\n}}\n"
    )
    argv = ["ip", "netns", "exec", netns_of(fleet, host), "nft", "-f", "-"]
    subprocess.run(argv, input=rules, text=True, check=True, timeout=30)


@pytest.fixture(scope="module")
def tun(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tunnelled]:
    from vllmctl.lab.tinymodel import ensure_tiny_model

    name = f"pt{os.getpid()}-tun"
    work = tmp_path_factory.mktemp("tunnel")
    model_dir = Path(f"/var/tmp/vllmctl-tunnel-{os.getpid()}/tiny")
    try:
        fleet = start_fleet(name, 2, work / "lab.yml", gpus="1xH100-80GB")  # one replica
        version, _ = ensure_standin_wheel(fleet.directory / "wheels")
        shutil.copytree(ensure_tiny_model(), model_dir, dirs_exist_ok=True)
        jump, engine = fleet.hosts
        doc: dict[str, Any] = yaml.safe_load(fleet.inventory.read_text())
        doc["defaults"]["engine"] = {
            "name": "vllm",
            "package": PACKAGE,
            "version": version,
            "index_url": fleet.index_url,
        }
        entry = doc["hosts"][engine.name]
        entry["ssh"] = {"jump_host": f"ops@{jump.address}"}
        doc["hosts"] = {engine.name: entry}  # the jump host is no inventory host, as a bastion is not
        doc["groups"] = {}
        # the stand-in starts only with the Ray backend; without a Ray cluster in its env it serves alone
        args = {"distributed_executor_backend": "ray"}
        doc["models"] = {
            MODEL: {"source": str(model_dir), "hosts": engine.name, "port": PORT, "engine_args": args}
        }
        block_controller(fleet, engine)
        yield Tunnelled(fleet, jump, engine, work, doc)
    finally:
        stop_fleet(name)
        shutil.rmtree(model_dir.parent, ignore_errors=True)


def listening_sockets() -> set[str]:
    """Inodes of the TCP sockets this process holds in LISTEN state."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    listening = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                listening.add(fields[9])
    return listening


def in_process(tun: Tunnelled, monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """The CLI in this process, so what it leaves behind (listeners, threads, forwards) can be counted."""
    from vllmctl.cli import main

    for key, value in tun.env().items():
        monkeypatch.setenv(key, value)
    return main(list(args))


def assert_nothing_left(before: set[str]) -> None:
    from vllmctl.transport import tunnel

    assert tunnel._RUN.forwards() == {}
    assert [t.name for t in threading.enumerate() if t.name.startswith("tunnel ")] == []
    assert listening_sockets() - before == set()


def test_apply_passes_its_gate_through_the_tunnel(tun: Tunnelled) -> None:
    applied = tun.vllmctl("apply", str(tun.inventory()), "--yes", "--json", "--health-timeout", "300")
    assert applied.returncode == 0, applied.stdout[-5000:] + applied.stderr[-3000:]
    assert "open FAILED" not in applied.stderr  # the health wait's refused channels are expected, not said
    gate = json.loads(applied.stdout)["hosts"][tun.engine.name]["release"]
    assert gate["status"] == "passed", gate
    # the smoke benchmark's figures say what the tunnel added to each request, measured on the host
    assert all(isinstance(f["tunnel_overhead_ms"], float) for f in gate["figures"].values()), gate
    # the engine serves, the jump host reaches it, the controller does not: the gate went through SSH
    assert tun.from_jump("/health") == 200
    with pytest.raises(httpx.TimeoutException):
        httpx.get(f"http://{tun.engine.address}:{PORT}/health", timeout=3)
    with pytest.raises(TimeoutError):  # nor its sshd: every SSH step went through the jump host too
        socket.create_connection((tun.engine.address, 22), timeout=3)
    assert tun.forwarded_connections() == []


def test_status_reads_live_metrics_through_the_tunnel_and_leaves_nothing(
    tun: Tunnelled, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = listening_sockets()
    code = in_process(tun, monkeypatch, "status", str(tun.inventory()), "--json")
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    [entry] = json.loads(out)["entries"]
    assert entry["http"] == "tunnel" and entry["healthy"] is True and entry["ok"] is True, entry
    assert entry["metrics"] is not None, entry
    assert_nothing_left(before)
    assert tun.forwarded_connections() == []


def test_bench_streams_at_concurrency_through_the_tunnel(tun: Tunnelled) -> None:
    argv = ("--json", "--concurrency", "1,4", "--requests", "8", "--output-tokens", "8")
    done = tun.vllmctl("bench", str(tun.inventory()), *argv, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [endpoint] = json.loads(done.stdout)["endpoints"]
    assert endpoint["http"] == "tunnel", endpoint
    # measured: GET /health through the forward against the same on the engine host's loopback
    assert isinstance(endpoint["tunnel_overhead_ms"], float) and endpoint["tunnel_overhead_ms"] >= 0, endpoint
    levels = endpoint["levels"]
    assert [level["concurrency"] for level in levels] == [1, 4], levels
    assert all(level["completed"] == level["requests"] == 8 for level in levels), levels
    assert "ms per request: latencies include it" in done.stderr
    assert tun.forwarded_connections() == []


def test_a_failing_run_closes_its_tunnel_too(
    tun: Tunnelled, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An SLO no engine meets: the benchmark runs through the tunnel, the run fails, nothing is left."""
    before = listening_sockets()
    argv = ("--json", "--concurrency", "1", "--requests", "8", "--slo", "ttft_p99_ms=0.001")
    code = in_process(tun, monkeypatch, "bench", str(tun.inventory()), *argv)
    out = capsys.readouterr().out
    assert code != 0
    [endpoint] = json.loads(out)["endpoints"]
    assert endpoint["http"] == "tunnel" and endpoint["violations"], endpoint
    assert_nothing_left(before)


def test_never_fails_naming_the_unreachable_port_and_the_setting(tun: Tunnelled) -> None:
    never = tun.inventory("never", tunnel_http="never")
    for command in (("status", str(never)), ("bench", str(never), "--concurrency", "1", "--requests", "8")):
        done = tun.vllmctl(*command, timeout=300)
        assert done.returncode != 0, done.stdout[-2000:]
        said = " ".join(done.stderr.split())
        assert f"port {PORT} at {tun.engine.address} is unreachable from the controller" in said, said
        assert "ssh.tunnel_http is never" in said and "ssh.tunnel_http: auto" in said, said


def test_rollback_waits_for_health_through_the_tunnel(tun: Tunnelled) -> None:
    """A second release (an engine argument changed, which the stand-in ignores), then `rollback` to the
    first: both gate through the tunnel, and status reads the engine through it afterwards."""
    second = tun.inventory("second", max_num_seqs=8)
    applied = tun.vllmctl("apply", str(second), "--yes", "--json", "--health-timeout", "300")
    assert applied.returncode == 0, applied.stdout[-5000:] + applied.stderr[-3000:]
    rolled = tun.vllmctl("rollback", str(second), "--yes", "--json", "--health-timeout", "300")
    assert rolled.returncode == 0, rolled.stdout[-5000:] + rolled.stderr[-3000:]
    print(rolled.stdout[-2000:])
    shown = tun.vllmctl("status", str(tun.inventory()), "--json", timeout=300)
    [entry] = json.loads(shown.stdout)["entries"]
    assert entry["http"] == "tunnel" and entry["healthy"] is True, entry
    assert tun.forwarded_connections() == []


def test_apply_with_never_fails_naming_the_port_and_the_setting(tun: Tunnelled) -> None:
    """A change to deploy with `tunnel_http: never`: the run stops with the port and the setting named, and
    the engine keeps serving the release it had."""
    before = tun.on_engine("readlink", "/var/lib/vllmctl/releases/current").strip()
    never = tun.inventory("never-change", tunnel_http="never", max_num_seqs=16)
    done = tun.vllmctl("apply", str(never), "--yes", "--json", "--health-timeout", "120")
    assert done.returncode != 0, done.stdout[-3000:]
    said = " ".join(done.stderr.split())
    assert f"port {PORT} at {tun.engine.address} is unreachable from the controller" in said, said[-3000:]
    assert "ssh.tunnel_http is never" in said, said[-3000:]
    print(done.stderr[-1500:])
    assert tun.on_engine("readlink", "/var/lib/vllmctl/releases/current").strip() == before
    assert tun.from_jump("/health") == 200
