"""Times planning a fleet: 1,000 hosts x 3 models through plan_inventory (target: well under a second).

Usage: python benchmarks/planner_speed.py [hosts]
"""

from __future__ import annotations

import sys
import time

from vllmctl.catalog.loader import load_arch
from vllmctl.inventory.model import (
    DriverSpec,
    EngineSpec,
    GpuSpec,
    Host,
    Inventory,
    ModelDeployment,
    SshSettings,
)
from vllmctl.planner.inventory_plan import plan_inventory

FLEET_GPUS = (("H100-80GB", 8), ("L40S", 4), ("A100-80GB", 8), ("H200", 8), ("L4", 4))
MODELS = ("meta-llama/Llama-3.1-8B", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen2.5-7B-Instruct-AWQ")


def fleet(host_count: int) -> Inventory:
    hosts = {}
    for i in range(host_count):
        gpu, count = FLEET_GPUS[i % len(FLEET_GPUS)]
        hosts[f"gpu{i:04d}"] = Host(f"gpu{i:04d}", f"10.0.{i // 250}.{i % 250}", SshSettings(),
                                    GpuSpec(gpu, count), DriverSpec(), EngineSpec())  # fmt: skip
    names = tuple(hosts)
    models = {
        f"m{j}": ModelDeployment(f"m{j}", source, names, port=8000 + 100 * j, profile=profile)
        for j, (source, profile) in enumerate(zip(MODELS, ("throughput", "balanced", "latency"), strict=True))
    }
    return Inventory("fleet.yml", hosts, {}, models)


def main(argv: list[str]) -> int:
    host_count = int(argv[1]) if len(argv) > 1 else 1000
    inventory = fleet(host_count)
    archs = {source: load_arch(source, online=False) for source in MODELS}
    start = time.perf_counter()
    result = plan_inventory(inventory, archs=archs)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    plan_inventory(inventory, archs=archs)
    warm = time.perf_counter() - start
    planned = sum(entry.plan is not None for entry in result.entries)
    print(f"planned {len(result.entries)} host x model pairs ({planned} fit) for {host_count} hosts")
    print(f"first run {cold * 1000:.1f} ms, second run {warm * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
