"""`vllmctl plan` shows the preset decisions with their reasons, from an inventory that uses them."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from vllmctl import cli

INVENTORY = """\
vllmctl: 1
hosts:
  gpu-01: {address: 10.0.0.1, gpus: {model: H100-80GB, count: 4}}
  gpu-02: {address: 10.0.0.2, gpus: {model: H100-80GB, count: 2}, engine: {name: sglang, version: "0.5.2"}}
models:
  coder:
    source: Qwen/Qwen3-8B
    hosts: gpu-01
    max_model_len: 16384
    use_case: code
    profile: memory-saver
  vision:
    source: Qwen/Qwen2.5-VL-7B-Instruct
    hosts: gpu-01
    port: 8001
    max_model_len: 32768
    multimodal: {images_per_prompt: 2}
  moe:
    source: Qwen/Qwen3-30B-A3B
    hosts: gpu-01
    port: 8002
    engine_args: {tensor_parallel_size: 1}
  chat:
    source: Qwen/Qwen3-8B
    hosts: gpu-02
    use_case: chat
    workload: shared_prefix
    sampling: {top_p: 0.8}
"""


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "presets.yml"
    path.write_text(textwrap.dedent(INVENTORY))
    return path


def test_plan_json_carries_every_preset_decision(inventory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", str(inventory), "--json", "--offline"]) == 0
    entries = {e["model"]: e["plan"] for e in json.loads(capsys.readouterr().out)["entries"]}
    coder = entries["coder"]["engine_args"]
    assert coder["override_generation_config"] == {"repetition_penalty": 1.0, "temperature": 0.0}
    assert coder["compilation_config"] == {"cudagraph_capture_sizes": [1, 2, 4, 8, 16, 32]}
    assert entries["vision"]["engine_args"]["limit_mm_per_prompt"] == {"image": 2, "video": 0}
    assert entries["vision"]["memory"]["encoder_gib"] > 1.26
    moe = {d["flag"]: d["reason"] for d in entries["moe"]["reasons"]}
    assert moe["tensor_parallel_size"].startswith("explicit; TP=1: ")
    assert moe["enable_expert_parallel"] == "one GPU per replica: no expert group to split experts across"
    chat = entries["chat"]
    assert chat["engine_args"]["preferred_sampling_params"] == {
        "repetition_penalty": 1.1,
        "temperature": 0.7,
        "top_p": 0.8,
    }
    assert chat["engine_args"]["schedule_policy"] == "lpm"
    assert any("both temperature (0.7) and top_p (0.8)" in w for w in chat["warnings"])


def test_plan_table_shows_decisions_and_warnings(
    inventory: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.setenv("NO_COLOR", "1")
    assert cli.main(["plan", str(inventory), "--offline", "--limit", "gpu-01"]) == 0
    out, err = capsys.readouterr()
    assert "override_generation_config" in out and "use_case code: greedy decoding" in out
    assert "compilation_config" in out and "memory-saver: capture 6 sizes up to 32" in out
    assert "limit_mm_per_prompt" in out and "vision encoder 1.26 GiB weights" in out
    assert "vision encoder" in out and "(weights + profile run, included above)" in out
    assert "enable_expert_parallel" in out
    assert "gpu-01 / coder:" in out and "gpu-02" not in out
    assert "max_model_len is not set" not in err  # coder is memory-saver but sets max_model_len
