"""Glue at the edge for commands: host selection (--limit), the plans apply deploys (GPU and CPU engines),
per-host contexts, secrets, SSH remotes and the local audit log."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from vllmctl.catalog.adapters import load_adapter_configs
from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.loader import load_arch
from vllmctl.console import Ui
from vllmctl.errors import InputError, VllmctlError
from vllmctl.facts.gpu import foreign_gpu_mib
from vllmctl.inventory.model import Inventory, runs_on_cpu
from vllmctl.multinode.plan import with_planned_clusters
from vllmctl.planner.inventory_plan import GpuFacts, InventoryPlan, deployment_request, plan_inventory
from vllmctl.planner.presets import CpuEnginePlan, cpu_engine_plan
from vllmctl.planner.rules.base import HostResources
from vllmctl.runner.core.fact_cache import FactCache
from vllmctl.runner.core.remote import SshRemote
from vllmctl.runner.fleet.lora_plans import with_lora_choice
from vllmctl.runner.fleet.refusals import raise_port_clashes, raise_refused
from vllmctl.runner.fleet.staging import local_models
from vllmctl.tasks.adapters import staged_sources
from vllmctl.tasks.desired import HostContext, ModelPlan, Replica, api_key_secret
from vllmctl.transport import SshTransport

T = TypeVar("T")


def select_hosts(inventory: Inventory, limit: str | None) -> list[str]:
    """Hosts in inventory order; `limit` is a comma list of host or group names."""
    if not limit:
        return list(inventory.hosts)
    wanted: set[str] = set()
    for selector in (part.strip() for part in limit.split(",")):
        if not selector:
            continue
        found = inventory.hosts_for(selector)
        if not found:
            known = ", ".join([*inventory.hosts, *inventory.groups])
            raise InputError(f"--limit: no host or group named {selector!r}", f"known: {known}")
        wanted.update(found)
    return [name for name in inventory.hosts if name in wanted]


def resolve_secrets(
    inventory: Inventory, environ: Mapping[str, str], only: Collection[str] | None = None
) -> dict[str, str]:
    values: dict[str, str] = {}
    for name, ref in inventory.secrets.items():
        if only is not None and name not in only:
            continue
        if ref.env:
            if ref.env not in environ:
                raise InputError(
                    f"secret {name}: environment variable {ref.env} is not set", f"export {ref.env}"
                )
            values[name] = environ[ref.env]
        elif ref.file:
            try:
                values[name] = Path(ref.file).expanduser().read_text().strip()
            except OSError as exc:
                raise InputError(
                    f"secret {name}: cannot read {ref.file}: {exc.strerror}", "fix the path"
                ) from exc
    return values


def api_keys(inventory: Inventory, environ: Mapping[str, str]) -> dict[str, str]:
    """Model -> the API key its engine requires (`api_key: {secret: NAME}`), read on the controller so the
    gate, rollback and `vllmctl bench` can send it; only those secrets are read."""
    wanted = {m.name: api_key_secret(m.engine_args) for m in inventory.models.values()}
    return keys_from(inventory, resolve_secrets(inventory, environ, {s for s in wanted.values() if s}))


def keys_from(inventory: Inventory, secrets: Mapping[str, str]) -> dict[str, str]:
    """Model -> its API key, out of secrets already resolved (apply resolves them all once)."""
    wanted = {m.name: api_key_secret(m.engine_args) for m in inventory.models.values()}
    return {model: secrets[secret] for model, secret in wanted.items() if secret and secret in secrets}


def host_contexts(
    inventory: Inventory,
    hosts: list[str],
    secrets: Mapping[str, str],
    plans: Mapping[str, Mapping[str, ModelPlan]] | None = None,
    stage_models: bool = True,
) -> dict[str, HostContext]:
    """One HostContext per host. `stage_models` (apply only) reads the local model folders and wheelhouses
    the hosts will receive; read-only commands pass False and never hash a model folder."""
    local: dict[str, list[dict[str, Any]] | None] = {}
    if stage_models:
        served = [m for m in inventory.models.values() if set(m.hosts) & set(hosts)]
        sources = [s for m in served for s in (m.source, *staged_sources(m))]
        sources += [
            str(inventory.hosts[n].vars["engine_wheelhouse"])
            for n in hosts
            if "engine_wheelhouse" in inventory.hosts[n].vars
        ]
        local = local_models(sources)
    return {
        name: HostContext(inventory, inventory.hosts[name], (plans or {}).get(name, {}), secrets, local)
        for name in hosts
    }


def ssh_remote(ctx: HostContext) -> SshRemote:
    return SshRemote(SshTransport(ctx.host))


def cached_ssh_remote(root: Path) -> Callable[[HostContext], SshRemote]:
    """Remotes that may answer a no-op `begin` from the facts a no-op run kept (runner/core/fact_cache.py)."""
    cache = FactCache(root)

    def remote(ctx: HostContext) -> SshRemote:
        return SshRemote(SshTransport(ctx.host), cache)

    return remote


def fan_out(names: Sequence[str], work: Callable[[str], T], forks: int) -> dict[str, T | VllmctlError]:
    """`work` for each name in parallel, at most `forks` at once: the fleet's one SSH fan-out. A name whose
    work raised VllmctlError gets that error as its value, so one failing host never hides the others."""

    def guarded(name: str) -> T | VllmctlError:
        try:
            return work(name)
        except VllmctlError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=max(1, min(forks, len(names) or 1))) as pool:
        return dict(zip(names, pool.map(guarded, names), strict=True))


def on_each_host(
    contexts: Mapping[str, HostContext], work: Callable[[SshRemote], dict[str, Any]], forks: int
) -> dict[str, dict[str, Any]]:
    """Per host what `work` returns over its own SSH connection, or {"error": message, "hint": hint}."""

    def one(name: str) -> dict[str, Any]:
        remote = ssh_remote(contexts[name])
        try:
            return work(remote)
        finally:
            remote.close()

    outcomes = fan_out(list(contexts), one, forks)
    return {
        host: {"error": found.message, "hint": found.hint} if isinstance(found, VllmctlError) else found
        for host, found in outcomes.items()
    }


def gather_fleet_facts(
    contexts: Mapping[str, HostContext], facts: tuple[str, ...], timeout_s: float, forks: int
) -> dict[str, dict[str, Any]]:
    """Per host either {"facts": {...}} or {"error": message, "hint": hint}; one round trip per host."""
    requests: dict[str, tuple[str, ...]] = {name: () for name in facts}
    return on_each_host(contexts, lambda remote: {"facts": remote.gather(requests, timeout_s)}, forks)


def load_model_archs(inv: Inventory, online: bool) -> tuple[dict[str, ModelArch], dict[str, VllmctlError]]:
    """Architectures by model source, and for the ones that cannot be loaded, the error saying why."""
    archs: dict[str, ModelArch] = {}
    failures: dict[str, VllmctlError] = {}
    wanted = [(m.source, m.revision) for m in inv.models.values()]
    wanted += [(s.model, s.revision) for m in inv.models.values() if (s := m.speculative) and s.model]
    for source, revision in wanted:
        if source in archs or source in failures:
            continue
        try:
            archs[source] = load_arch(source, revision, online=online)
        except VllmctlError as exc:
            failures[source] = exc
    return archs, failures


def gpu_facts_from(gathered: Mapping[str, Mapping[str, Any]], ui: Ui) -> dict[str, GpuFacts]:
    """(name, count, memory MiB) per host whose nvidia-smi answered; the others keep their declaration."""
    found: dict[str, GpuFacts] = {}
    for host, result in gathered.items():
        gpus = result.get("facts", {}).get("gpus") or {}
        if "error" in result:
            ui.warn(f"{host}: facts not gathered ({result['error']}); planning from declared gpus")
        elif gpus.get("status") != "ok" or not gpus.get("gpus"):
            ui.warn(
                f"{host}: no GPUs reported ({gpus.get('status', 'unknown')}); planning from declared gpus"
            )
        else:
            first = gpus["gpus"][0]
            found[host] = (str(first["name"]), len(gpus["gpus"]), int(first["memory_total_mib"]))
    return found


def host_resources_from(gathered: Mapping[str, Mapping[str, Any]]) -> dict[str, HostResources]:
    """Host memory, the GPU memory other processes hold (the most on any GPU; what vllmctl's own units hold
    is not counted) and the engine venvs with triton_kernels (the MXFP4 MoE backend), per host whose
    facts came back."""
    found: dict[str, HostResources] = {}
    for host, result in gathered.items():
        facts = result.get("facts", {})
        memory = (facts.get("resources") or {}).get("memory_mib")
        gpus = (facts.get("gpus") or {}).get("gpus") or []
        used = foreign_gpu_mib(gpus, facts.get("gpu_processes"))
        venvs = (facts.get("engine_venvs") or {}).items()
        triton = sorted(
            str(v["version"])
            for name, v in venvs
            if v["engine"] == "vllm" and "triton-kernels" in v["installed"] and not name.endswith(".partial")
        )
        found[host] = HostResources(
            ram_gib=memory / 1024 if isinstance(memory, int) else None,
            gpu_used_gib=max(used) / 1024 if used else None,
            triton_kernels=tuple(triton),
        )
    return found


def fleet_plan(
    inv: Inventory, gpu_facts: Mapping[str, GpuFacts] | None = None, online: bool = False
) -> InventoryPlan:
    """The plan commands act on: architectures from the catalog, local directories, or the hub if online."""
    archs, _ = load_model_archs(inv, online=online)
    return plan_inventory(inv, gpu_facts, archs, adapters=load_adapter_configs(inv.models.values(), online))


def gpu_entries(inv: Inventory, plan: InventoryPlan) -> InventoryPlan:
    """The entries of deployments on a GPU build of their engine; CPU builds get `cpu_engine_plans`."""
    return InventoryPlan(tuple(e for e in plan.entries if not runs_on_cpu(inv, e.host, e.model)))


def served_plan(
    inv: Inventory, gpu_facts: Mapping[str, GpuFacts] | None = None, online: bool = False
) -> InventoryPlan:
    """The GPU plan of what apply deploys: a CPU-engine deployment has none (one replica, as given)."""
    return gpu_entries(inv, fleet_plan(inv, gpu_facts, online))


def cpu_engine_plans(inv: Inventory, archs: Mapping[str, ModelArch]) -> dict[tuple[str, str], CpuEnginePlan]:
    """(host, model) -> the engine-independent decisions for each deployment on a CPU build of its engine."""
    plans: dict[tuple[str, str], CpuEnginePlan] = {}
    for model in inv.models.values():
        for host in model.hosts:
            if not runs_on_cpu(inv, host, model.name):
                continue
            request = deployment_request(model, inv.hosts[host])
            plans[(host, model.name)] = cpu_engine_plan(request, archs.get(model.source))
    return plans


def planned_inventory(
    inv: Inventory,
    gpu_facts: Mapping[str, GpuFacts] | None = None,
    archs: Mapping[str, ModelArch] | None = None,
) -> Inventory:
    """`inv` with each model whose plan needs several of its hosts made one engine over them (a group named
    after the model, multinode/plan.py); every command that treats groups reads the inventory through this.
    Without `archs`, the architectures are read offline."""
    archs = load_model_archs(inv, online=False)[0] if archs is None else archs
    return with_planned_clusters(inv, gpu_entries(inv, plan_inventory(inv, gpu_facts, archs)).entries)


def deployment_plans(
    inv: Inventory,
    hosts: list[str],
    gpu_facts: Mapping[str, GpuFacts] | None = None,
    online: bool = True,
    archs: Mapping[str, ModelArch] | None = None,
    resources: Mapping[str, HostResources] | None = None,
) -> dict[str, dict[str, ModelPlan]]:
    """The planner's engine args and replicas per host and model, as apply renders them into units; `archs`
    as already loaded, else loaded here.

    Before any host is touched: engine flags vLLM would refuse raise an input error naming the inventory's
    line (exit 2); a GPU deployment with no plan that fits raises PlanError (exit 1).
    """
    archs = load_model_archs(inv, online=online)[0] if archs is None else archs
    adapters = load_adapter_configs(inv.models.values(), online=online)
    planned = gpu_entries(inv, plan_inventory(inv, gpu_facts, archs, resources, adapters))
    wanted = InventoryPlan(tuple(e for e in planned.entries if e.host in hosts))
    raise_refused(inv, wanted.entries)
    wanted.raise_for_failures()
    raise_port_clashes(inv, planned)
    plans = model_plans(wanted)
    for (host, name), cpu in cpu_engine_plans(inv, archs).items():
        given = inv.models[name].engine_args
        args = cpu.engine_args(given)
        if host in hosts and args != given:  # no decision of its own: the unit stays as the inventory says
            plans.setdefault(host, {})[name] = ModelPlan(args, (Replica(0, cpu.port),))
    return with_lora_choice(inv, hosts, plans, adapters)


def model_plans(plan: InventoryPlan) -> dict[str, dict[str, ModelPlan]]:
    """host -> model -> the engine args and replicas units are rendered from, for entries with a plan."""
    plans: dict[str, dict[str, ModelPlan]] = {}
    for entry in plan.entries:
        if entry.plan is not None:
            replicas = tuple(Replica(r.index, r.port, r.gpu_indices) for r in entry.plan.replicas)
            plans.setdefault(entry.host, {})[entry.model] = ModelPlan(dict(entry.plan.engine_args), replicas)
    return plans
