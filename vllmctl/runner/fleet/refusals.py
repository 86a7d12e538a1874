"""Where in the inventory file a flag vLLM refuses was written: the planner's input errors as problems with
file, line, column and field path (the planner itself knows no files).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from vllmctl.catalog.arch import ModelArch
from vllmctl.errors import InputError, InvalidInputError, Problem
from vllmctl.inventory.model import Inventory
from vllmctl.inventory.ports import planned_port_problems
from vllmctl.inventory.positions import FieldPath
from vllmctl.inventory.source import read_yaml
from vllmctl.planner.inventory_plan import HostModelPlan, InventoryPlan, plan_inventory
from vllmctl.planner.tuning import normalize_args
from vllmctl.status.proposals import Proposal


def _flag_path(doc_data: object, model: str, flag: str) -> FieldPath:
    """The engine_args key that spells `flag` (`--tp`, `tensor-parallel-size`, ...), else the model's own
    field of that name (max_model_len), else the model."""
    models = doc_data.get("models", {}) if isinstance(doc_data, dict) else {}
    body = models.get(model, {}) if isinstance(models, dict) else {}
    args = body.get("engine_args", {}) if isinstance(body, dict) else {}
    if isinstance(args, dict):
        for key in args:
            if next(iter(normalize_args({str(key): None}))) == flag:
                return ("models", model, "engine_args", str(key))
    if isinstance(body, dict) and flag in body:
        return ("models", model, flag)
    declared = {"speculative_config": "speculative", "max_lora_rank": "adapters", "max_loras": "adapters"}
    if isinstance(body, dict) and declared.get(flag) in body:  # flags the model's own keys render
        return ("models", model, declared[flag])
    return ("models", model)


def refused_problems(inv: Inventory, entries: Iterable[HostModelPlan]) -> list[Problem]:
    """One problem per (model, refusal) the inventory's own flags caused, located in its file."""
    failed = [e for e in entries if e.plan is None and e.input_error]
    if not failed:
        return []
    doc = read_yaml(inv.path)
    problems: dict[tuple[str, str], Problem] = {}
    for entry in failed:
        flags = entry.refused_flags or ("engine_args",)
        path = _flag_path(doc.data, entry.model, flags[0])
        key = (entry.model, entry.error)
        if key not in problems:
            problems[key] = Problem(doc.location(path, at_key=True), entry.error, entry.hint)
    return list(problems.values())


def raise_port_clashes(inv: Inventory, plan: InventoryPlan) -> None:
    """The ports the planned replicas take (port + i) must stay clear of each other, SSH and Ray."""
    problems = planned_port_problems(inv, plan.replica_counts())
    if problems:
        raise InputError(f"{inv.path}: the planned replicas' ports clash\n" + "\n".join(problems))


def raise_refused(inv: Inventory, entries: Iterable[HostModelPlan]) -> None:
    """Raise the inventory's refused flags as one input error (exit 2) naming file:line:column and field."""
    problems = refused_problems(inv, entries)
    if problems:
        raise InvalidInputError(problems)


def vet_proposals(
    inv: Inventory,
    proposals: list[Proposal],
    archs: Mapping[str, ModelArch],
    on_cpu: Callable[[Inventory, str, str], bool],
) -> list[Proposal]:
    """`plan --from-status` proposes only what vLLM starts: a change whose plan breaks one of vLLM's rules
    (or no longer fits) is withdrawn with the refusal as its reason. CPU builds (`on_cpu(inv, host, model)`)
    have no GPU rules to break."""
    vetted = []
    for proposal in proposals:
        if not proposal.changes:
            vetted.append(proposal)
            continue
        model = replace(inv.models[proposal.model], engine_args=dict(proposal.proposed))
        changed = replace(inv, models={**inv.models, proposal.model: model})
        entries = plan_inventory(changed, None, archs).entries
        failed = [
            e
            for e in entries
            if e.model == proposal.model and e.plan is None and not on_cpu(changed, e.host, e.model)
        ]
        if failed:
            why = f"withdrawn: vLLM would not start it: {failed[0].error}"
            proposal = replace(proposal, changes={}, reason=why)
        vetted.append(proposal)
    return vetted
