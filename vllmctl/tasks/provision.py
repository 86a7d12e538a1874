"""Desired state for provisioning, pure: the driver, engine venvs, model staging and health tasks a playbook
names, expanded for one host into operation calls (joined into `vllmctl.tasks.TASKS`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from vllmctl.bench.readiness import startup_deadline_s
from vllmctl.fanout.hub import hub_folder
from vllmctl.inventory.model import EngineSpec, ModelDeployment, runs_on_cpu
from vllmctl.ops.engine import CPU_VARIANT_DEBS, CPU_VARIANT_REMOVALS
from vllmctl.ops.gpu_memory import VLLM_DEFAULT_UTILIZATION
from vllmctl.paths import WHEELHOUSE_DIR
from vllmctl.render.quoting import venv_dir_name
from vllmctl.tasks.adapters import is_local, stage_call, staging_calls
from vllmctl.tasks.desired import (
    HostContext,
    ModelPlan,
    OpCall,
    Params,
    Replica,
    applied_hash,
    env_path,
    index_credentials,
    unit_name,
    venv_path,
)


def local_files(ctx: HostContext, source: str) -> Sequence[Mapping[str, Any]] | None:
    return ctx.local_files.get(source)


def _engines(ctx: HostContext, params: Params) -> list[EngineSpec]:
    """The engines this host's models use, each once, and the host's own with `host_engine: true`."""
    found: dict[tuple[str, str], EngineSpec] = {}
    wanted = [ctx.engine(m) for m in ctx.staged_models()]
    for engine in [*wanted, ctx.host.engine] if params.get("host_engine") else wanted:
        found.setdefault((engine.name, engine.version), engine)
    return list(found.values())


def pinned_branch(ctx: HostContext) -> str | None:
    branch = ctx.host.driver.branch
    return None if branch is None else str(branch)


def requested_flavor(ctx: HostContext) -> str | None:
    """`driver.flavor`, else the older host var `driver_flavor`; None lets the operation choose per GPU."""
    if ctx.host.driver.flavor is not None:
        return ctx.host.driver.flavor
    legacy = ctx.host.vars.get("driver_flavor")
    return None if legacy is None else str(legacy)


def _driver_args(ctx: HostContext) -> dict[str, Any]:
    gpu = ctx.host.gpus.model if ctx.host.gpus is not None else None
    return {"branch": pinned_branch(ctx), "flavor": requested_flavor(ctx), "gpu": gpu}


def _driver_install(ctx: HostContext, params: Params) -> list[OpCall]:
    return [OpCall("nvidia_driver", _driver_args(ctx))]


def _driver_reboot(ctx: HostContext, params: Params) -> list[OpCall]:
    """After a reboot the host's engines (those whose units start at boot) are waited for until they serve."""
    engines = [{k: v for k, v in call.args.items() if k != "applied"} for call in _health_check(ctx, params)]
    args = {**_driver_args(ctx), "reboot": ctx.host.driver.reboot, "engines": engines}
    return [OpCall("driver_reboot", args)]


def _nouveau_blacklist(ctx: HostContext, params: Params) -> list[OpCall]:
    return [OpCall("nouveau_blacklist", {"branch": pinned_branch(ctx)})]


def _unattended_upgrades(ctx: HostContext, params: Params) -> list[OpCall]:
    return [OpCall("unattended_upgrades", {"branch": pinned_branch(ctx)})]


def _kernel_modules(ctx: HostContext, params: Params) -> list[OpCall]:
    return [OpCall("kernel_modules", _driver_args(ctx))]


def _nvlsm(ctx: HostContext, params: Params) -> list[OpCall]:
    return [OpCall("nvlsm", {"branch": pinned_branch(ctx)})]


def _dcgm_exporter(ctx: HostContext, params: Params) -> list[OpCall]:
    args = {"branch": pinned_branch(ctx), "exporter": ctx.host.driver.dcgm_exporter}
    return [OpCall("dcgm_exporter", args)]


def _dcgm_diag(ctx: HostContext, params: Params) -> list[OpCall]:
    models = [m.name for m in ctx.models()]
    return [OpCall("dcgm_diag", {"diag": ctx.host.driver.dcgm_diag, "models": models})]


def _fabric_manager(ctx: HostContext, params: Params) -> list[OpCall]:
    return [OpCall("fabric_manager", {"branch": pinned_branch(ctx)})]


def _persistence(ctx: HostContext, params: Params) -> list[OpCall]:
    return [OpCall("persistence", {"branch": pinned_branch(ctx)})]


def wheelhouse_dest(engine: EngineSpec) -> str:
    return f"{WHEELHOUSE_DIR}/{venv_dir_name(f'{engine.name}-{engine.version}')}"


def _engine_install(ctx: HostContext, params: Params) -> list[OpCall]:
    """One venv per engine version; a controller wheelhouse (host var `engine_wheelhouse`) is pushed first."""
    calls: list[OpCall] = []
    local_wheelhouse = ctx.host.vars.get("engine_wheelhouse")
    engines = _engines(ctx, params)
    if not engines:
        return []
    for engine in engines:
        args: dict[str, Any] = {
            "engine": engine.name,
            "version": engine.version,
            "package": engine.distribution,
            "extras": "[all]" if engine.name == "sglang" and engine.package is None else "",
            "index_url": engine.index_url,
            # USER:PASSWORD read on the controller; the op hands it to pip through stdin, never argv
            "index_credentials": ctx.secrets.get(index_credentials(engine) or ""),
            "driver_branch": pinned_branch(ctx),
            "remove": list(CPU_VARIANT_REMOVALS) if engine.distribution.endswith("-cpu") else [],
        }
        reading = ctx.engine_cuda.get(f"{engine.name}-{engine.version}")
        if reading is not None:
            args["cuda"] = dict(reading)
        if engine.distribution.endswith("-cpu"):
            why = f"{engine.distribution} {engine.version}"
            calls.append(OpCall("system_packages", {"names": list(CPU_VARIANT_DEBS), "why": why}))
        if local_wheelhouse:
            dest = wheelhouse_dest(engine)
            calls.append(
                OpCall("model_sync", {"dest": dest, "files": local_files(ctx, str(local_wheelhouse))})
            )
            args["wheelhouse"] = dest
        calls.append(OpCall("engine_venv", args))
    in_use = sorted(f"{e.name}-{e.version}" for e in engines)
    keep = max(e.keep_venvs for e in engines)
    return [*calls, OpCall("engine_prune", {"keep": max(keep, len(in_use)), "in_use": in_use})]


def weights_mib(ctx: HostContext, model: ModelDeployment) -> float:
    files = local_files(ctx, model.source) if is_local(model.source) else None
    return sum(int(f["size"]) for f in files or ()) / 2**20


def staging(ctx: HostContext) -> list[tuple[str, dict[str, Any]]]:
    """(operation, args) for every model, adapter and draft the host stages."""
    staged = []
    for model in ctx.staged_models():
        files = partial(local_files, ctx)
        hub = {"venv": venv_path(ctx.engine(model)), "env_file": env_path(model.name)}
        size = float(ctx.host.vars.get("model_size_mib", {}).get(model.name, 0))
        staged.append(stage_call(model.source, model.revision, model.name, files, {**hub, "size_mib": size}))
        staged += staging_calls(model, files, hub)
    return staged


def hub_downloads(ctx: HostContext) -> list[dict[str, Any]]:
    """The args of each hub download the host's run makes (its staged marker says it is done)."""
    return [args for op, args in staging(ctx) if op == "model_download"]


def _model_staging(ctx: HostContext, params: Params) -> list[OpCall]:
    """Local sources are mirrored at the same path on the host, so the unit's `--model` is the same."""
    return [OpCall(op, _fanned_out(ctx, op, args)) for op, args in staging(ctx)]


def _fanned_out(ctx: HostContext, op: str, args: dict[str, Any]) -> dict[str, Any]:
    """--check: a folder the fan-out brings before this run (a hub model's marked staged by its copy)."""
    folder = args["dest"] if op == "model_sync" else hub_folder(str(args["repo"]))
    return {**args, "fanned_out": True} if folder in ctx.fanned_out else args


def _health_check(ctx: HostContext, params: Params) -> list[OpCall]:
    calls = []
    for model in ctx.models():
        deadline = float(params.get("deadline_s") or startup_deadline_s(weights_mib(ctx, model) / 1024))
        for replica in ctx.plan(model).replicas:
            args = {
                "name": unit_name(model.name, replica.index),
                "applied": applied_hash(ctx, model, replica),
                "port": replica.port,
                "model": model.name,
                "env_file": env_path(model.name),
                "deadline_s": deadline,
            }
            calls.append(OpCall("service_health", args))
    return calls


def tp_groups(plan: ModelPlan, replica: Replica) -> list[list[int]]:
    """The GPUs of each tensor-parallel group of one replica, whose P2P the gate judges: vLLM puts
    consecutive ranks in one TP group, one group per pipeline stage; without assigned GPUs the engine sees
    them all and takes the first tp x pp. Assigned GPUs that do not match tp x pp are judged as one group."""
    tp = int(plan.engine_args.get("tensor_parallel_size") or 1)
    pp = int(plan.engine_args.get("pipeline_parallel_size") or 1)
    gpus = list(range(tp * pp)) if replica.gpus is None else list(replica.gpus)
    if len(gpus) != tp * pp:
        return [sorted(gpus)]
    return [sorted(gpus[stage * tp : (stage + 1) * tp]) for stage in range(pp)]


def _gpu_health(ctx: HostContext, params: Params) -> list[OpCall]:
    """The health gate before this host's engines start: MIG is judged on the GPUs its replicas use (all of
    them when a replica names none), P2P between the GPUs of each tensor-parallel group."""
    models = ctx.models()
    replicas = [r for m in models for r in ctx.plan(m).replicas]
    in_use = (
        None if any(r.gpus is None for r in replicas) else sorted({g for r in replicas for g in r.gpus or ()})
    )
    groups = [g for m in models for r in ctx.plan(m).replicas for g in tp_groups(ctx.plan(m), r)]
    args = {
        "models": [m.name for m in models],
        "in_use": in_use,
        "tp_groups": groups,
        "gpus_declared": ctx.host.gpus is not None,
        "gpus_expected": ctx.host.gpus.count if ctx.host.gpus is not None else None,
    }
    return [OpCall("gpu_health", args), OpCall("gpu_memory", {"budgets": gpu_budgets(ctx)})]


def gpu_budgets(ctx: HostContext) -> list[dict[str, Any]]:
    """Each vLLM replica on a GPU build: the GPUs it uses (the first tp x pp when it names none) and the share
    of each it plans to take, which the `gpu_memory` gate checks against what other processes hold."""
    budgets = []
    for model in ctx.models():
        if ctx.engine(model).name != "vllm" or runs_on_cpu(ctx.inventory, ctx.host.name, model.name):
            continue
        plan = ctx.plan(model)
        share = float(plan.engine_args.get("gpu_memory_utilization") or VLLM_DEFAULT_UTILIZATION)
        for replica in plan.replicas:
            gpus = sorted({g for group in tp_groups(plan, replica) for g in group})
            budgets.append({"model": model.name, "gpus": gpus, "utilization": share})
    return budgets


PROVISION_TASKS = {
    "gpu_health": _gpu_health,
    "dcgm_diag": _dcgm_diag,
    "kernel_modules": _kernel_modules,
    "driver_install": _driver_install,
    "nouveau_blacklist": _nouveau_blacklist,
    "unattended_upgrades": _unattended_upgrades,
    "driver_reboot": _driver_reboot,
    "nvlsm": _nvlsm,
    "fabric_manager": _fabric_manager,
    "dcgm_exporter": _dcgm_exporter,
    "persistence": _persistence,
    "engine_install": _engine_install,
    "model_staging": _model_staging,
    "health_check": _health_check,
}
