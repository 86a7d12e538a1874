"""max_loras and max_lora_rank reach the unit of a model with adapters even where no GPU plan decided them."""

from __future__ import annotations

from executor_builders import inventory, model

from vllmctl.catalog.adapters import AdapterConfig
from vllmctl.inventory.model import AdapterSpec
from vllmctl.runner.fleet.lora_plans import with_lora_choice
from vllmctl.tasks.desired import ModelPlan, Replica

ADAPTERS = (AdapterSpec("a", "/srv/lora/a"), AdapterSpec("b", "org/b"))


def test_cpu_deployments_get_the_choice_and_explicit_values_win() -> None:
    inv = inventory(["h1", "h2"], {"m": model("m", ("h1", "h2"), adapters=ADAPTERS)})
    configs = {"/srv/lora/a": AdapterConfig(8, ("q_proj",)), "org/b": AdapterConfig(40, ("q_proj",))}
    given = {"h2": {"m": ModelPlan({"max_lora_rank": 128}, (Replica(0, 8100),))}}
    plans = with_lora_choice(inv, ["h1", "h2"], given, configs)
    assert plans["h1"]["m"] == ModelPlan({"max_loras": 2, "max_lora_rank": 64}, (Replica(0, 8000),))
    assert plans["h2"]["m"].engine_args == {"max_lora_rank": 128, "max_loras": 2}
    assert with_lora_choice(inv, ["h1"], {}, {})["h1"]["m"].engine_args == {
        "max_loras": 2,
        "max_lora_rank": 16,
    }
