"""The dashboard's engine queries and the engine rules' series on a real Prometheus (Debian's package)
scraping two real vLLM 0.32.0 captures (tests/fixtures/vllm_cpu/), served on loopback with the labels
`export prometheus` gives them: every engine panel of a 0.32.0 model returns one series per replica, and
every series an engine rule reads exists. Skipped without the prometheus binary."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from vllmctl.inventory.model import Inventory
from vllmctl.observe import alerts
from vllmctl.observe.dashboard import build, to_json

PROMETHEUS = shutil.which("prometheus")
CAPTURES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm_cpu"
SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed (apt-get install prometheus)"),
]


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    tmp_path = tmp_path_factory.mktemp("prometheus")
    servers, targets = [], []
    for index, capture in enumerate(("metrics_queueing.txt", "metrics_preempting.txt")):
        root = tmp_path / f"engine{index}"
        root.mkdir()
        shutil.copy(CAPTURES / capture, root / "metrics")
        server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        labels = {"job": "vllmctl", "model": "llama-8b", "host": f"gpu-0{index + 1}", "engine": "vllm"}
        targets.append({"targets": [f"127.0.0.1:{server.server_address[1]}"], "labels": labels})
    (tmp_path / "sd.json").write_text(json.dumps(targets))
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "vllmctl", "file_sd_configs": [{"files": [str(tmp_path / "sd.json")]}]}
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    address = f"127.0.0.1:{_free_port()}"
    assert PROMETHEUS is not None
    argv = [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}", f"--web.listen-address={address}"]
    process = subprocess.Popen(
        [*argv, f"--storage.tsdb.path={tmp_path / 'data'}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = httpx.Client(base_url=f"http://{address}", trust_env=False, timeout=10)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # both targets scraped three times: enough for rate()
            try:
                found = client.get("/api/v1/query", params={"query": "count_over_time(up[1m])"}).json()
                if [int(r["value"][1]) >= 3 for r in found["data"]["result"]] == [True, True]:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        yield client
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=30)
        for server in servers:
            server.shutdown()
            server.server_close()


def _query(client: httpx.Client, expr: str) -> list[Any]:
    body = client.get("/api/v1/query", params={"query": expr}).json()
    assert body["status"] == "success", (expr, body)
    return list(body["data"]["result"])


def test_every_engine_panel_returns_each_replica(prometheus: httpx.Client, fleet: Inventory) -> None:
    board = json.loads(to_json(build(fleet)))
    row = board["panels"][0]
    assert row["title"] == "llama-8b (vllm 0.32.0)"
    counts = {}
    for panel in row["panels"]:
        for target in panel["targets"]:
            if "haproxy_" in target["expr"] or "DCGM_" in target["expr"]:
                continue
            expr = re.sub(r"\$replica_\w+", ".*", target["expr"])
            counts[f"{panel['title']}: {target['legendFormat']}"] = len(_query(prometheus, expr))
    assert len(counts) == 20 and set(counts.values()) == {2}, counts


def test_every_series_an_engine_rule_reads_exists(prometheus: httpx.Client, fleet: Inventory) -> None:
    (engines,) = [g for g in alerts.rules(fleet)["groups"] if g["name"] == "vllmctl-engines"]
    for rule in engines["rules"]:
        if rule["labels"].get("model", "llama-8b") != "llama-8b" or "haproxy_" in rule["expr"]:
            continue
        for name, labels in SELECTOR.findall(rule["expr"]):
            assert _query(prometheus, f"{name}{labels}"), (rule["alert"], name)
