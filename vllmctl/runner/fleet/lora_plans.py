"""The engine args apply renders for a model with LoRA adapters: max_loras and max_lora_rank chosen from the
adapters' configs wherever no plan decided them (a CPU build of the engine, or a plan without them)."""

from __future__ import annotations

from vllmctl.catalog.adapters import AdapterConfigs
from vllmctl.inventory.model import Inventory
from vllmctl.planner.lora import choose_lora, lora_request
from vllmctl.tasks.desired import ModelPlan, Replica


def with_lora_choice(
    inv: Inventory, hosts: list[str], plans: dict[str, dict[str, ModelPlan]], configs: AdapterConfigs
) -> dict[str, dict[str, ModelPlan]]:
    """`plans` with max_loras and max_lora_rank chosen from each model's adapters where not given."""
    for model in inv.models.values():
        if not model.adapters:
            continue
        wanted = lora_request([configs.get(a.source) for a in model.adapters])
        choice = choose_lora(wanted.ranks, wanted.unknown)
        for host in (h for h in model.hosts if h in hosts):
            plan = plans.get(host, {}).get(model.name) or ModelPlan(
                dict(model.engine_args), (Replica(0, model.port),)
            )
            args = {**plan.engine_args, **choice.engine_args(plan.engine_args)}
            plans.setdefault(host, {})[model.name] = ModelPlan(args, plan.replicas)
    return plans
