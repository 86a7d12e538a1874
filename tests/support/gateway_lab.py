"""The gateway lab tests' helpers: the shared deployment behind HAProxy on its first spare host, and a client
streaming completions through it without pause (tests/lab/gateway/)."""

from __future__ import annotations

import copy
import os
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from fast_start import FAST_START

from vllmctl.gateway.runtime import SHOW_STAT, parse_stat

MODEL = "tinyprov"
GATEWAY_PORT = 9100
CHECK_INTERVAL_S = 1.0


@dataclass
class Gateway:
    deployment: Any
    failures: list[str] = field(default_factory=list)
    served: int = 0

    @property
    def host(self) -> Any:
        return self.deployment.spare_hosts[0]

    @property
    def url(self) -> str:
        return f"http://{self.host.address}:{GATEWAY_PORT}"

    def inventory(self, name: str, engine_args: dict[str, Any] | None = None, balance: str = "") -> Path:
        doc = copy.deepcopy(self.deployment.inventory_doc)
        doc["models"][MODEL]["min_available"] = 1  # one replica serves while the other restarts (#37)
        if engine_args is not None:
            doc["models"][MODEL]["engine_args"] = {**FAST_START, **engine_args}
        doc["gateway"] = {
            "hosts": [self.host.name],
            "models": {MODEL: {"port": GATEWAY_PORT}},
            "check_interval_s": CHECK_INTERVAL_S,
            "drain_timeout_s": 60,
        }
        if balance:
            doc["gateway"]["balance"] = balance
        return Path(self.deployment.write_inventory(name, doc))

    def vllmctl(self, *argv: str, timeout: float = 1500) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "NO_COLOR": "1",
            "COLUMNS": "200",
            "XDG_STATE_HOME": str(self.deployment.state_dir),
        }
        env["VLLMCTL_TEST_HF_TOKEN"] = self.deployment.token
        argv_ = [sys.executable, "-m", "vllmctl", *argv]
        return subprocess.run(argv_, capture_output=True, text=True, timeout=timeout, env=env)

    def stats(self) -> dict[str, Any]:
        return parse_stat(self.root(self.host, SHOW_STAT.render()))

    def root(self, host: Any, command: str) -> str:
        return str(self.deployment.sh(host, f"sudo -n sh -c {shlex.quote(command)}"))

    def wait_status(self, wanted: str, servers: int, within_s: float) -> float:
        started = time.monotonic()
        while time.monotonic() - started < within_s:
            found = [s for s in self.stats().values() if s.status.startswith(wanted)]
            if len(found) >= servers:
                return time.monotonic() - started
            time.sleep(0.2)
        raise AssertionError(f"not {servers} server(s) {wanted} within {within_s}s: {self.stats()}")

    def complete(self, client: httpx.Client) -> None:
        body = {"model": MODEL, "prompt": "Hello", "max_tokens": 16, "temperature": 0, "stream": True}
        try:
            with client.stream("POST", f"{self.url}/v1/completions", json=body, timeout=60) as reply:
                text = "".join(reply.iter_text())
            if reply.status_code != 200 or "[DONE]" not in text:
                self.failures.append(f"{time.time():.3f} status {reply.status_code}: {text[-200:]}")
            else:
                self.served += 1
        except httpx.HTTPError as exc:
            self.failures.append(f"{time.time():.3f} {type(exc).__name__}: {exc}")


class Stream:
    """A client sending streamed completions through the gateway, one after another, until stopped. Paced:
    an engine kept busy on these 2-core machines starves the other one's start (its kernels compile)."""

    def __init__(self, gateway: Gateway, clients: int = 1, pause_s: float = 0.5) -> None:
        self.gateway, self.stop, self.pause_s = gateway, threading.Event(), pause_s
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(clients)]

    def _loop(self) -> None:
        with httpx.Client(trust_env=False) as client:
            while not self.stop.wait(self.pause_s):
                self.gateway.complete(client)

    def __enter__(self) -> Stream:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)


class Watch:
    """Samples HAProxy's servers until stopped; `none_up` lists the samples where a model had no server UP."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway, self.stop = gateway, threading.Event()
        self.none_up: list[dict[str, str]] = []
        self.samples = 0
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(0.3):
            states = {ref: s.status for ref, s in self.gateway.stats().items()}
            self.samples += 1
            for model in {ref.split("/")[0] for ref in states}:
                mine = [s for ref, s in states.items() if ref.startswith(f"{model}/")]
                if not any(status.startswith("UP") for status in mine):
                    self.none_up.append(states)

    def __enter__(self) -> Watch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)
