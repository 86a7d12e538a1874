"""The candidates a tune may run are the inventory with the model's engine_args changed, validated and
planned as `apply` would: one that vLLM's rules or the memory plan refuse is recorded with why, never run."""

from __future__ import annotations

from pathlib import Path

import yaml

from vllmctl.inventory import load_inventory
from vllmctl.runner.tune.sweep import Variants
from vllmctl.tune.search import Trial, knobs_for, sweep

INVENTORY = {
    "vllmctl": 1,
    "hosts": {"gpu-1": {"address": "10.0.0.1", "gpus": {"model": "L40S", "count": 1}}},
    "models": {
        "qwen": {
            "source": "Qwen/Qwen2.5-7B",
            "hosts": ["gpu-1"],
            "engine_args": {"max_num_batched_tokens": 512},
        }
    },
}


def variants(tmp_path: Path) -> Variants:
    path = tmp_path / "fleet.yml"
    path.write_text(yaml.safe_dump(INVENTORY))
    work = tmp_path / "work"
    work.mkdir()
    return Variants(load_inventory(path), "qwen", "gpu-1", work)


def test_a_candidate_vllm_refuses_is_recorded_with_its_reason_and_never_run(tmp_path: Path) -> None:
    found = variants(tmp_path)
    _, plans = found.load({})
    planned = plans["gpu-1"]["qwen"].engine_args
    runs: list[dict[str, int]] = []

    def evaluate(changes: dict[str, int]) -> Trial:  # more sequences always win: the sweep climbs
        runs.append(changes)
        return Trial(changes, goodput=float(changes.get("max_num_seqs", 256)))

    trials = sweep(knobs_for(planned, 2048), evaluate, found.refusal, budget=10)
    refused = [t for t in trials if t.refused]
    # up past 512 sequences, and down to 256 tokens once 512 sequences won: more sequences than tokens
    assert [t.changes for t in refused] == [
        {"max_num_seqs": 1024},
        {"max_num_seqs": 512, "max_num_batched_tokens": 256},
    ]
    assert all("max-num-seqs-within-batched-tokens" in t.refused for t in refused)
    assert (
        "max_num_batched_tokens (512) must be greater than or equal to max_num_seqs (1024)"
        in refused[0].refused
    )
    assert not any(t.changes in runs for t in refused) and {"max_num_seqs": 512} in runs


def test_the_planned_candidate_is_the_plan_apply_makes(tmp_path: Path) -> None:
    _, plans = variants(tmp_path).load({})
    args = plans["gpu-1"]["qwen"].engine_args
    assert args["max_num_batched_tokens"] == 512 and args["max_num_seqs"] == 256


def test_a_candidate_that_does_not_fit_in_memory_is_never_run(tmp_path: Path) -> None:
    doc = {
        "vllmctl": 1,
        "hosts": {"gpu-1": {"address": "10.0.0.1", "gpus": {"model": "H100-80GB", "count": 1}}},
        "models": {
            "q": {
                "source": "Qwen/Qwen2.5-32B",
                "hosts": ["gpu-1"],
                "engine_args": {"max_model_len": 4096, "max_num_batched_tokens": 16384},
            }
        },
    }
    path = tmp_path / "fleet.yml"
    path.write_text(yaml.safe_dump(doc))
    found = Variants(load_inventory(path), "q", "gpu-1", tmp_path)
    runs: list[dict[str, int]] = []

    def evaluate(changes: dict[str, int]) -> Trial:  # a bigger token budget always wins: the sweep climbs
        runs.append(changes)
        return Trial(changes, goodput=float(changes.get("max_num_batched_tokens", 16384)))

    planned = found.load({})[1]["gpu-1"]["q"].engine_args
    (tokens,) = [k for k in knobs_for(planned, 4096) if k.flag == "max_num_batched_tokens"]
    trials = sweep([tokens], evaluate, found.refusal, budget=10)
    refused = [t for t in trials if t.refused]
    assert [t.changes for t in refused] == [{"max_num_batched_tokens": 65536}]
    assert "does not fit on 1x H100-80GB" in refused[0].refused
    assert runs == [{}, {"max_num_batched_tokens": 32768}]


def test_a_model_with_no_other_replica_to_serve_meanwhile_is_not_tuned(tmp_path: Path) -> None:
    import pytest

    from vllmctl.errors import InputError
    from vllmctl.runner.tune.sweep import _chosen_host

    path = tmp_path / "fleet.yml"
    path.write_text(yaml.safe_dump(INVENTORY))
    with pytest.raises(InputError, match="would leave 0 of its min_available 1 replicas serving"):
        _chosen_host(load_inventory(path), "qwen", None)
    doc = {**INVENTORY, "models": {"qwen": {**INVENTORY["models"]["qwen"], "min_available": 0}}}
    path.write_text(yaml.safe_dump(doc))
    assert _chosen_host(load_inventory(path), "qwen", None) == "gpu-1"


def test_tensor_parallelism_is_a_knob_only_where_the_model_fits_several_ways(tmp_path: Path) -> None:
    from vllmctl.runner.tune.sweep import Tuner, TuneRequest

    def options(model: str, count: int) -> tuple[int, ...]:
        doc = {
            "vllmctl": 1,
            "hosts": {f"gpu-{i}": {"address": f"10.0.0.{i}", "gpus": {"model": "L40S", "count": count}}
                      for i in (1, 2)},
            "models": {"m": {"source": model, "hosts": ["gpu-1", "gpu-2"]}},
        }  # fmt: skip
        path = tmp_path / f"{count}.yml"
        path.write_text(yaml.safe_dump(doc))
        work = tmp_path / f"work-{count}-{model.replace('/', '_')}"
        work.mkdir()
        return Tuner(TuneRequest(str(path), "m", {"ttft_p99_ms": 500}), lambda _: None, work).tp_options()

    assert options("Qwen/Qwen2.5-7B", 2) == (1, 2)  # fits on one L40S or across two
    assert options("Qwen/Qwen2.5-32B", 2) == (2,)  # 64 GB of weights: only across both
