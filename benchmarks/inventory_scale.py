"""Times `vllmctl validate` and `vllmctl plan --offline` on generated fleets of 1,000 and 10,000 hosts (one
group of 8xH100 hosts serving one model), beside `ansible-inventory --list` reading the same fleet in
Ansible's YAML form, all in the same run. Goal (issue #32): at 10,000 hosts validate <= 5 s and plan <= 10 s,
and 1,000 -> 10,000 at most 12x for both (linear, not quadratic).

Usage: python benchmarks/inventory_scale.py [--sizes 1000,10000] [--runs 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOALS = {"validate": 5.0, "plan --offline": 10.0}
MAX_RATIO = 12.0


def names(hosts: int) -> list[str]:
    return [f"gpu{i:05d}" for i in range(hosts)]


def address(i: int) -> str:
    return f"10.{i // 62500}.{i // 250 % 250}.{i % 250 + 1}"


def vllmctl_fleet(path: Path, hosts: int) -> Path:
    lines = ["vllmctl: 1", "defaults:", '  driver: {branch: "580", reboot: false}', "hosts:"]
    lines += [
        f"  {n}: {{address: {address(i)}, gpus: {{model: H100-80GB, count: 8}}}}"
        for i, n in enumerate(names(hosts))
    ]
    lines += ["groups:", f"  fleet: [{', '.join(names(hosts))}]", "models:"]
    lines += [
        "  llama-8b:",
        "    source: meta-llama/Llama-3.1-8B-Instruct",
        "    hosts: [fleet]",
        "    port: 8000",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def ansible_fleet(path: Path, hosts: int) -> Path:
    lines = ["all:", "  children:", "    fleet:", "      hosts:"]
    lines += [
        f"        {n}: {{ansible_host: {address(i)}, gpu_model: H100-80GB, gpu_count: 8}}"
        for i, n in enumerate(names(hosts))
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def timed(argv: list[str], runs: int) -> float:
    """Median wall time of a fresh process per run (what a user waits for); a failed run stops the bench."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            sys.exit(f"{' '.join(argv[:4])}... exited {done.returncode}:\n{done.stderr[-2000:]}")
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    peer = shutil.which("ansible-inventory")
    results: dict[str, dict[int, float]] = {}
    with tempfile.TemporaryDirectory() as work:
        for hosts in sizes:
            inventory = str(vllmctl_fleet(Path(work) / f"fleet{hosts}.yml", hosts))
            vllmctl = [sys.executable, "-m", "vllmctl"]
            commands = {
                "validate": [*vllmctl, "validate", "--no-controller-checks", inventory],
                "plan --offline": [*vllmctl, "plan", "--offline", inventory],
            }
            if peer:
                ansible = str(ansible_fleet(Path(work) / f"ansible{hosts}.yml", hosts))
                commands["ansible-inventory --list (peer)"] = [peer, "-i", ansible, "--list"]
            for label, argv in commands.items():
                results.setdefault(label, {})[hosts] = timed(argv, args.runs)
    print(f"{'command':34} " + " ".join(f"{f'{n:,} hosts':>13}" for n in sizes) + "   ratio   goal")
    for label, by_size in results.items():
        ratio = by_size[sizes[-1]] / by_size[sizes[0]] if len(sizes) > 1 else 1.0
        goal = GOALS.get(label)
        verdict = ""
        if goal is not None:
            met = by_size[sizes[-1]] <= goal and ratio <= MAX_RATIO
            verdict = f"<= {goal:.0f} s, <= {MAX_RATIO:.0f}x: {'met' if met else 'NOT met'}"
        cells = " ".join(f"{by_size[n]:>11.2f} s" for n in sizes)
        print(f"{label:34} {cells} {ratio:6.1f}x   {verdict}")
    if peer:
        for label in GOALS:
            print(
                f"{label} / ansible-inventory at {sizes[-1]:,} hosts: "
                f"{results[label][sizes[-1]] / results['ansible-inventory --list (peer)'][sizes[-1]]:.2f}x"
            )


if __name__ == "__main__":
    main()
