"""The lab's DCGM Exporter stand-in, run as the packaged unit runs it: it serves exactly the fields its
counters file lists, per GPU nvidia-smi lists, with the exporter's labels; an unknown field stops it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from vllmctl.lab import fake_dcgm_exporter
from vllmctl.ops.dcgm import DEFAULT_COUNTERS, EXPORTER_COUNTERS, counters_csv

SCRIPT = Path(fake_dcgm_exporter.__file__)


def _gpu(index: int, **extra: object) -> dict[str, object]:
    return {
        "index": index,
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-{index:08d}",
        "pci_bus_id": f"00000000:{0x18 + index:02X}:00.0",
        "memory_total_mib": 81559,
        "memory_used_mib": 1000 * index,
        **extra,
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(tmp_path: Path, counters: str) -> tuple[subprocess.Popen[str], str, Path]:
    gpus = tmp_path / "gpus.json"
    doc = {"nvswitches": 4, "fabric": {"state": "In Progress"}, "gpus": [_gpu(0), _gpu(1, last_xid=79)]}
    doc["gpus"].append(_gpu(2, lost=True))
    gpus.write_text(json.dumps(doc))
    (tmp_path / "counters.csv").write_text(counters)
    port = _free_port()
    argv = [sys.executable, str(SCRIPT), "-f", str(tmp_path / "counters.csv"), "-a", f"127.0.0.1:{port}"]
    env = {"VLLMCTL_LAB_GPUS": str(gpus)}
    process = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return process, f"http://127.0.0.1:{port}/metrics", gpus


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    process, url, gpus = _start(tmp_path, EXPORTER_COUNTERS)
    try:
        for _ in range(100):
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        yield url, gpus
    finally:
        process.kill()
        process.wait()


def _series(text: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, rest = line.partition("{")
            found.setdefault(name, []).append(rest)
    return found


def test_it_serves_each_listed_field_for_each_listed_gpu(served: tuple[str, Path]) -> None:
    url, gpus = served
    series = _series(httpx.get(url, timeout=5).text)
    assert set(series) == {line.split(",")[0] for line in EXPORTER_COUNTERS.splitlines()}
    assert all(len(rows) == 2 for rows in series.values())  # GPU 2 fell off the bus: NVML lists two
    (xid,) = [row for row in series["DCGM_FI_DEV_XID_ERRORS"] if 'gpu="1"' in row]
    assert xid.endswith("} 79") and 'UUID="GPU-00000001"' in xid and 'device="nvidia1"' in xid
    assert all(row.endswith("} 2") for row in series["DCGM_FI_DEV_FABRIC_MANAGER_STATUS"])  # in progress
    doc = json.loads(gpus.read_text())
    doc["fabric"] = {"state": "Completed"}
    gpus.write_text(json.dumps(doc))  # read again at each scrape
    series = _series(httpx.get(url, timeout=5).text)
    assert all(row.endswith("} 3") for row in series["DCGM_FI_DEV_FABRIC_MANAGER_STATUS"])


def test_the_packaged_defaults_have_no_fabric_manager_status(tmp_path: Path) -> None:
    process, url, _ = _start(tmp_path, counters_csv(DEFAULT_COUNTERS))
    try:
        for _ in range(100):
            try:
                text = httpx.get(url, timeout=1).text
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        assert "DCGM_FI_DEV_GPU_TEMP{" in text and "FABRIC_MANAGER" not in text
    finally:
        process.kill()
        process.wait()


def test_an_unknown_field_stops_it_at_start(tmp_path: Path) -> None:
    process, _, _ = _start(tmp_path, "DCGM_FI_DEV_NO_SUCH_FIELD, gauge, x\n")
    _, err = process.communicate(timeout=30)
    assert process.returncode == 1 and "DCGM_FI_DEV_NO_SUCH_FIELD" in err
