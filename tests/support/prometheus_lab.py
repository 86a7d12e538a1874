"""A real Prometheus (Debian's package) on the controller, for the lab tests of the exported dashboard and
alert rules: it scrapes what `export prometheus` lists, every INTERVAL, and evaluates the rules as often."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
INTERVAL = "5s"  # scrape and rule evaluation: the `for` windows are minutes, the tests wait seconds


def export_all(
    vllmctl: Callable[..., subprocess.CompletedProcess[str]], served: Path, rules_from: Path, work: Path
) -> tuple[str, Path, Path]:
    """What a user loads, written under `work`: `export prometheus`'s file SD for `served` and the scrape
    config reading it, `export alerts` for `rules_from`, `export grafana` for `served`."""
    sd, rules, board = work / "sd.json", work / "alerts.yml", work / "grafana"
    for argv in (
        ("export", "prometheus", str(served), "--output", str(sd)),
        ("export", "alerts", str(rules_from), "--output", str(rules)),
        ("export", "grafana", str(served), "--output-dir", str(board)),
    ):
        done = vllmctl(*argv, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
    scrape = vllmctl("export", "prometheus", str(served), "--format", "scrape-config", "--sd-file", str(sd))
    assert scrape.returncode == 0, scrape.stderr
    return scrape.stdout, rules, board


def free_port() -> int:
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
        self.url = f"http://127.0.0.1:{free_port()}"
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

    def firing_labels(self) -> list[dict[str, str]]:
        """Each firing alert's labels."""
        alerts = self.client.get("/api/v1/alerts").json()["data"]["alerts"]
        return [dict(a["labels"]) for a in alerts if a["state"] == "firing"]

    def pending(self) -> set[tuple[str, str]]:
        """(alert, host) of each alert pending (true, its `for` window not yet over) or firing."""
        alerts = self.client.get("/api/v1/alerts").json()["data"]["alerts"]
        return {(a["labels"]["alertname"], a["labels"].get("host", "")) for a in alerts}
