"""adapter_config.json as the planner reads it: rank and targets, with an error naming the file otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllmctl.catalog.adapters import (
    AdapterConfig,
    load_adapter_config,
    load_adapter_configs,
    parse_adapter_config,
)
from vllmctl.errors import InputError
from vllmctl.inventory.model import AdapterSpec, ModelDeployment


def test_rank_and_targets_from_a_local_folder(tmp_path: Path) -> None:
    (tmp_path / "adapter_config.json").write_text(
        json.dumps({"r": 16, "target_modules": ["q_proj", "o_proj"]})
    )
    assert load_adapter_config(str(tmp_path)) == AdapterConfig(16, ("q_proj", "o_proj"))
    assert parse_adapter_config('{"r": 8, "target_modules": "all-linear"}', "x") == AdapterConfig(
        8, ("all-linear",)
    )


@pytest.mark.parametrize("text", ['{"target_modules": []}', '{"r": 0}', '{"r": "8"}', "not json"])
def test_a_config_without_a_positive_integer_rank_is_refused(text: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_adapter_config(text, "/srv/lora/x/adapter_config.json")
    assert caught.value.message.startswith("/srv/lora/x/adapter_config.json: ")


def test_unreadable_adapters_are_left_out_for_the_planners_default(tmp_path: Path) -> None:
    (tmp_path / "adapter_config.json").write_text('{"r": 32}')
    adapters = (AdapterSpec("a", str(tmp_path)), AdapterSpec("b", str(tmp_path / "missing")))
    found = load_adapter_configs([ModelDeployment("m", "/srv/m", ("h",), adapters=adapters)], online=False)
    assert found == {str(tmp_path): AdapterConfig(32, ())}
