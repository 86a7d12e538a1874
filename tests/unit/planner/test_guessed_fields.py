"""No silent guesses (#49): a config whose model_type no known config class reads has its left-out fields
named where they are guessed, refused where another value would move memory past the error band, and read
through transformers' own class where transformers knows the type the shipped table lacks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllmctl.catalog import class_defaults
from vllmctl.catalog.arch import parse_config
from vllmctl.catalog.gpus import lookup_gpu
from vllmctl.catalog.loader import catalog_entries
from vllmctl.cli import main
from vllmctl.errors import InputError
from vllmctl.planner import DeploymentRequest, plan_deployment

H100 = lookup_gpu("H100-80GB")
# A model type no transformers release has, without num_key_value_heads: small enough that any KV head count
# moves its memory by less than the error band.
SMALL: dict[str, Any] = {
    "model_type": "acme_lm",
    "architectures": ["AcmeForCausalLM"],
    "hidden_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "intermediate_size": 1536,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}
# The same, at 7B size with a long context: one KV head per query head or a single one is 16 GiB apart.
LARGE = {**SMALL, "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
         "intermediate_size": 14336, "max_position_embeddings": 32768}  # fmt: skip


def _config(tmp_path: Path, config: dict[str, Any]) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def _estimate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["estimate", *argv, "--gpu", "H100-80GB", "--json"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_guessed_kv_head_count_is_named_in_the_estimate_and_its_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _estimate(capsys, "--model", _config(tmp_path, SMALL))
    assert code == 0
    data = json.loads(out)
    assert data["guessed"] == {"num_key_value_heads": 8}
    named = [r for r in data["reasons"] if "num_key_value_heads" in r]
    assert named and "guessed num_key_value_heads = 8" in named[0] and "'acme_lm'" in named[0]


def test_a_guessed_field_is_named_in_the_plan_and_its_json() -> None:
    arch = parse_config(SMALL, "acme/small")
    plan = plan_deployment(arch, H100, 1, DeploymentRequest(max_model_len=4096))
    assert plan.guessed == (("num_key_value_heads", 8),)
    assert plan.to_json()["guessed"] == {"num_key_value_heads": 8}
    assert any("guessed num_key_value_heads = 8" in w for w in plan.warnings)


def test_a_guess_that_moves_the_kv_figure_past_the_band_is_refused_with_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tmp_path, LARGE)
    code, _, err = _estimate(capsys, "--model", path)
    assert code == 2
    assert f"{path}: config.json does not give num_key_value_heads" in err
    assert "the KV cache one full-length request needs would move by" in err
    assert "add num_key_value_heads to the config.json" in err
    with pytest.raises(InputError, match="does not give num_key_value_heads"):
        plan_deployment(parse_config(LARGE, "acme/large"), H100, 8, DeploymentRequest())
    given = parse_config({**LARGE, "num_key_value_heads": 8}, "acme/large-gqa")
    assert given.guessed == ()
    assert plan_deployment(given, H100, 8, DeploymentRequest()).guessed == ()


def test_a_guessed_context_counts_only_when_max_model_len_is_not_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {k: v for k, v in LARGE.items() if k != "max_position_embeddings"}
    config["num_key_value_heads"] = 8
    path = _config(tmp_path, config)
    code, _, err = _estimate(capsys, "--model", path)
    assert code == 2 and "does not give max_position_embeddings" in err and "or set max_model_len" in err
    code, out, _ = _estimate(capsys, "--model", path, "--max-model-len", "2048")
    assert code == 0 and json.loads(out)["guessed"] == {"max_position_embeddings": 2048}


def test_a_catalog_model_guesses_nothing() -> None:
    entry = catalog_entries()["meta-llama/llama-3.1-8b"]
    assert parse_config(entry["config"]).guessed == ()


def test_a_model_type_the_table_lacks_reads_transformers_own_class(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    table = class_defaults.defaults_table()
    without = {**table, "model_types": {k: v for k, v in table["model_types"].items() if k != "mistral"}}
    monkeypatch.setattr(class_defaults, "defaults_table", lambda: without)
    config = dict(catalog_entries()["mistralai/mistral-7b-instruct-v0.2"]["config"])
    del config["num_key_value_heads"], config["sliding_window"]
    arch = parse_config(config, "mistral without kv heads")
    assert arch.num_kv_heads == 8  # MistralConfig's default, not a guess of one per query head (32)
    assert arch.sliding_window == 4096 and arch.guessed == ()


def test_without_transformers_the_same_config_names_its_guesses(monkeypatch: pytest.MonkeyPatch) -> None:
    table = class_defaults.defaults_table()
    without = {**table, "model_types": {k: v for k, v in table["model_types"].items() if k != "mistral"}}
    monkeypatch.setattr(class_defaults, "defaults_table", lambda: without)
    monkeypatch.setattr(class_defaults, "transformers_entry", lambda model_type: None)
    config = dict(catalog_entries()["mistralai/mistral-7b-instruct-v0.2"]["config"])
    del config["num_key_value_heads"]
    assert parse_config(config, "mistral").guessed == (("num_key_value_heads", 32),)


def test_plan_names_a_guess_and_refuses_the_one_past_the_band_at_its_inventory_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, config in (("small", SMALL), ("large", LARGE)):
        (tmp_path / name).mkdir()
        _config(tmp_path / name, config)
    inventory = tmp_path / "fleet.yml"
    inventory.write_text(
        "vllmctl: 1\n"
        "hosts:\n  gpu-1: {address: 10.0.0.1, gpus: {model: H100-80GB, count: 2}}\n"
        "models:\n"
        f"  small: {{source: {tmp_path / 'small'}, hosts: gpu-1, port: 8000, max_model_len: 4096}}\n"
        f"  large: {{source: {tmp_path / 'large'}, hosts: gpu-1, port: 8100}}\n"
    )
    assert main(["plan", str(inventory), "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    entries = {e["model"]: e for e in data["entries"]}
    assert entries["small"]["plan"]["guessed"] == {"num_key_value_heads": 8}
    assert "does not give num_key_value_heads" in entries["large"]["error"]
    (problem,) = data["problems"]
    assert (problem["line"], problem["field"]) == (6, "models.large")
    large = tmp_path / "large"
    assert problem["message"].startswith(f"{large}: config.json does not give num_key_value_heads")
    assert "add num_key_value_heads to the config.json" in problem["hint"]
