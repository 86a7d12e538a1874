"""Bring-up and teardown time of lab fleets (4 and 16 hosts by default), base image already cached.

Run as root: `python benchmarks/lab_bringup.py [--sizes 4 16] [--repeats 3]`; prints medians in seconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from vllmctl.lab.base import base_dir
from vllmctl.lab.testing import LabFleet, start_fleet, vllmctl


def all_answer(fleet: LabFleet) -> bool:
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda host: fleet.ssh(host, "true", timeout=60), fleet.hosts))
    return all(r.returncode == 0 for r in results)


def one_round(size: int, inventory: Path) -> tuple[float, float, float]:
    name = f"bench{size}"
    started = time.monotonic()
    fleet = start_fleet(name, size, inventory)
    up = time.monotonic() - started
    try:
        if not all_answer(fleet):
            raise SystemExit(f"not every host of {name} answered over SSH")
        ssh_ready = time.monotonic() - started
    finally:
        started_down = time.monotonic()
        result = vllmctl("lab", "down", "--name", name)
        down = time.monotonic() - started_down
    if result.returncode != 0:
        raise SystemExit(f"lab down failed: {result.stderr}")
    return up, ssh_ready, down


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not (base_dir() / "etc/os-release").exists():
        sys.exit("build the base image first (any `vllmctl lab up` does); this measures cached bring-ups")
    print(f"{'hosts':>5} {'up (s)':>8} {'up+ssh (s)':>11} {'down (s)':>9}   (median of {args.repeats})")
    with tempfile.TemporaryDirectory() as scratch:
        for size in args.sizes:
            rounds = [one_round(size, Path(scratch) / "lab.yml") for _ in range(args.repeats)]
            up, ready, down = (statistics.median(column) for column in zip(*rounds, strict=True))
            print(f"{size:>5} {up:>8.2f} {ready:>11.2f} {down:>9.2f}", flush=True)


if __name__ == "__main__":
    main()
