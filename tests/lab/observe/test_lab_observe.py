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
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gateway_lab import MODEL, Gateway, Stream
from prometheus_lab import PROMETHEUS, PROMTOOL, Prometheus, export_all

pytestmark = [pytest.mark.lab, pytest.mark.engine]

METRICS_PORT = 8405
LOAD_S = 90
# `for` 1m, plus a scrape and an evaluation to notice, plus a scrape's timeout on the stopped engine
FIRE_WITHIN_S = 60 + 3 * 5 + 10 + 30
RESOLVE_WITHIN_S = 120
SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})")


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

    scrape, rules, board = export_all(gateway.vllmctl, served, strict, tmp_path)
    assert PROMTOOL is not None
    check = subprocess.run(
        [PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr

    prometheus = Prometheus(tmp_path, scrape, rules)
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
