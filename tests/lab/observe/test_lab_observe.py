"""The exported dashboard and alerts against a real Prometheus (Debian's package) on the controller, scraping
the shared deployment's two real vLLM-CPU engines and the gateway (HAProxy's exporter) through the files
`export prometheus` writes, with streamed completions sent through the gateway: every dashboard query and
every metric an alert rule reads returns a series; `promtool check rules` passes; an engine stopped on one
host fires the engine-down and below-min_available alerts within their `for` windows, and both resolve once
`apply` brings it back. The deployment's own inventory (no gateway) is applied again at the end."""

from __future__ import annotations

import copy
import json
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from gateway_lab import MODEL, Gateway, Stream

pytestmark = [pytest.mark.lab, pytest.mark.engine]

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
METRICS_PORT = 8405
INTERVAL = "5s"  # scrape and rule evaluation: the `for` windows are minutes, the test waits seconds
LOAD_S = 90
# `for` 1m, plus a scrape and an evaluation to notice, plus a scrape's timeout on the stopped engine
FIRE_WITHIN_S = 60 + 3 * 5 + 10 + 30
RESOLVE_WITHIN_S = 120
SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Prometheus:
    """A Prometheus server on the controller, in a temporary directory, scraping the exported targets."""

    def __init__(self, work: Path, scrape: str, rules: Path) -> None:
        config = yaml.safe_load(scrape)
        for job in config["scrape_configs"]:
            job["scrape_interval"] = INTERVAL
        config["global"] = {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL}
        config["rule_files"] = [str(rules)]
        (work / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.url = f"http://127.0.0.1:{_free_port()}"
        assert PROMETHEUS is not None
        argv = [
            PROMETHEUS,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
        ]
        argv += [f"--web.listen-address={self.url.removeprefix('http://')}"]
        self.log = (work / "prometheus.log").open("w")
        self.process = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        self.client = httpx.Client(base_url=self.url, trust_env=False, timeout=30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if self.client.get("/-/ready").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"Prometheus not ready in 60 s: {(work / 'prometheus.log').read_text()[-3000:]}")

    def query(self, expr: str) -> list[dict[str, Any]]:
        reply = self.client.get("/api/v1/query", params={"query": expr})
        body = reply.json()
        assert body.get("status") == "success", (expr, body)
        return list(body["data"]["result"])

    def firing(self) -> set[tuple[str, str]]:
        alerts = self.client.get("/api/v1/alerts").json()["data"]["alerts"]
        return {
            (a["labels"]["alertname"], a["labels"].get("model", "")) for a in alerts if a["state"] == "firing"
        }

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        self.client.close()
        self.log.close()


@pytest.fixture(scope="module")
def gateway(deployment: Any) -> Iterator[Gateway]:
    found = Gateway(deployment)
    try:
        yield found
    finally:  # the deployment's own inventory has no gateway: its apply takes HAProxy off the host again
        code, _, output = deployment.apply(deployment.state_dir / "deploy.yml")
        assert code == 0, output[-4000:]


def _inventory(gateway: Gateway, name: str, min_available: int | None = None) -> Path:
    doc = yaml.safe_load(gateway.inventory(name).read_text())
    doc["gateway"]["metrics_port"] = METRICS_PORT
    if min_available is not None:
        doc["models"][MODEL]["min_available"] = min_available
    return Path(gateway.deployment.write_inventory(name, copy.deepcopy(doc)))


def _wait(check: Any, within_s: float, what: str) -> float:
    started = time.monotonic()
    while time.monotonic() - started < within_s:
        if check():
            return time.monotonic() - started
        time.sleep(2)
    raise AssertionError(f"{what} not within {within_s} s")


@pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None, reason="Debian's prometheus package not installed"
)
def test_dashboard_and_alerts_against_a_real_prometheus(gateway: Gateway, tmp_path: Path) -> None:
    served = _inventory(gateway, "observe.yml")
    code, _, output = gateway.deployment.apply(served)
    assert code == 0, output[-6000:]
    # the rules' inventory asks both replicas to serve, so one engine down is below min_available
    strict = _inventory(gateway, "observe-strict.yml", min_available=2)

    sd, rules, board = tmp_path / "vllmctl.json", tmp_path / "alerts.yml", tmp_path / "grafana"
    for argv in (
        ("export", "prometheus", str(served), "--output", str(sd)),
        ("export", "alerts", str(strict), "--output", str(rules)),
        ("export", "grafana", str(served), "--output-dir", str(board)),
    ):
        done = gateway.vllmctl(*argv, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    scrape = gateway.vllmctl(
        "export", "prometheus", str(served), "--format", "scrape-config", "--sd-file", str(sd)
    )
    assert scrape.returncode == 0, scrape.stderr
    assert PROMTOOL is not None
    check = subprocess.run(
        [PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr

    prometheus = Prometheus(tmp_path, scrape.stdout, rules)
    try:
        with Stream(gateway, clients=2, pause_s=0.2):
            time.sleep(LOAD_S)
            dashboard = json.loads((board / "vllmctl-fleet.json").read_text())
            empty = []
            for row in dashboard["panels"]:
                for panel in row["panels"]:
                    for target in panel["targets"]:
                        expr = re.sub(r"\$replica_\w+", ".*", target["expr"])
                        if not prometheus.query(expr):
                            empty.append(f"{row['title']} / {panel['title']}: {expr}")
            assert empty == [], "\n".join(empty)
        groups = yaml.safe_load(rules.read_text())["groups"]
        unread = []
        for rule in (rule for group in groups for rule in group["rules"]):
            for name, labels in SELECTOR.findall(rule["expr"]):
                if not prometheus.query(f"{name}{labels}"):
                    unread.append(f"{rule['alert']}: {name}{labels}")
        assert unread == [], "\n".join(unread)
        assert prometheus.firing() == set()

        host = gateway.deployment.engine_hosts[1]
        gateway.root(host, f"systemctl stop vllmctl-{MODEL}-0.service")
        wanted = {("VllmctlEngineDown", MODEL), ("VllmctlBelowMinAvailable", MODEL)}
        fired_s = _wait(lambda: wanted <= prometheus.firing(), FIRE_WITHIN_S, f"{wanted} firing")
        print(f"engine-down and below-min_available fired {fired_s:.0f} s after the stop")

        code, _, output = gateway.deployment.apply(served)
        assert code == 0, output[-6000:]
        resolved_s = _wait(lambda: not wanted & prometheus.firing(), RESOLVE_WITHIN_S, f"{wanted} resolved")
        print(f"both resolved {resolved_s:.0f} s after apply returned")
    finally:
        prometheus.close()
