"""`vllmctl status` shows the GPU health gate's verdict per host (`gpu_gate`): the gate's own plan over the
host's facts, so it says what the next apply's gate would."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vllmctl.inventory import load_inventory
from vllmctl.runner.status.gpu_gate import host_gate
from vllmctl.tasks.desired import HostContext

FACTS = Path(__file__).parents[1] / "facts" / "gpu_health"


def health(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FACTS / f"{name}.json").read_text())["fact"]
    return loaded


def contexts(tmp_path: Path) -> dict[str, HostContext]:
    path = tmp_path / "inv.yml"
    path.write_text(
        "vllmctl: 1\nhosts:\n"
        "  a: {address: 10.0.0.1, gpus: {model: H100-80GB, count: 2}}\n"
        "  idle: {address: 10.0.0.2}\n"
        "models:\n  tiny: {source: /srv/tiny, hosts: [a], port: 8000}\n"
    )
    inv = load_inventory(str(path))
    return {name: HostContext(inv, host) for name, host in inv.hosts.items()}


def test_each_host_gets_passed_refused_not_gated_or_unknown(tmp_path: Path) -> None:
    ctx = contexts(tmp_path)
    healthy = {"facts": {"gpu_health": health("hgx_h100_healthy"), "gpu_topology": None}}
    assert host_gate(ctx["a"], healthy)["status"] == "passed"
    broken = {"facts": {"gpu_health": health("hgx_fabric_in_progress_xid_mig"), "gpu_topology": None}}
    refused = host_gate(ctx["a"], broken)
    assert refused["status"] == "refused" and refused["reason"].startswith("fabric: GPU 0")
    assert host_gate(ctx["idle"], healthy) == {"status": "not gated", "reason": "no engine on this host"}
    # the GPU memory gate too: a process outside vllmctl's units holds most of GPU 0 (tiny plans vLLM's 0.9)
    smi = {"status": "ok", "gpus": [{"index": 0, "memory_total_mib": 81559, "memory_used_mib": 70000}]}
    held = {"processes": [{"pid": 4242, "gpu": 0, "mib": 70000, "unit": None}]}
    crowded = {"facts": {**healthy["facts"], "gpus": smi, "gpu_processes": held}}
    verdict = host_gate(ctx["a"], crowded)
    assert verdict["status"] == "refused" and verdict["reason"].startswith("gpu memory: GPU 0"), verdict
    assert "pid 4242 (70000 MiB)" in verdict["reason"]
    lost = host_gate(ctx["a"], {"error": "ssh: connect to host 10.0.0.1 port 22: No route to host"})
    assert lost == {
        "status": "unknown",
        "reason": "facts not gathered: ssh: connect to host 10.0.0.1 port 22: No route to host",
    }


def test_gate_view_gathers_the_gates_facts_once_per_host(tmp_path: Path, monkeypatch: Any) -> None:
    from vllmctl.runner.status import gpu_gate

    asked: list[tuple[str, ...]] = []

    def gathered(contexts: Any, facts: tuple[str, ...], timeout_s: float, forks: int) -> dict[str, Any]:
        asked.append(facts)
        return {"a": {"facts": {"gpu_health": health("hgx_h100_healthy"), "gpu_topology": None}}}

    monkeypatch.setattr(gpu_gate, "gather_fleet_facts", gathered)
    inv = next(iter(contexts(tmp_path).values())).inventory
    view = gpu_gate.gate_view(inv, ["a", "idle"], 5.0)
    assert asked == [("gpu_health", "gpu_topology", "gpus", "gpu_processes")]
    assert view["a"]["status"] == "passed" and view["idle"]["status"] == "unknown"


def test_the_table_view_names_only_hosts_whose_gate_refuses_or_is_unknown() -> None:
    from vllmctl.status.view import gate_lines

    verdicts = {
        "b": {"status": "refused", "reason": "mig: GPU 0 has MIG on"},
        "a": {"status": "passed", "reason": "healthy: 8 GPUs"},
        "cpu": {"status": "not gated", "reason": "no engine on this host"},
        "lost": {"status": "unknown", "reason": "facts not gathered: timed out"},
    }
    assert gate_lines(verdicts) == [
        "b: GPU gate refused: mig: GPU 0 has MIG on",
        "lost: GPU gate unknown: facts not gathered: timed out",
    ]
