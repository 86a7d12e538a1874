"""Desired state, pure: (Inventory, host, per-model engine plans) -> operation calls for each named task.

A playbook names tasks; each task here expands to operation calls. Adding a phase is adding a task here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllmctl.engine_flags import KNOWN_FLAGS, to_cli
from vllmctl.errors import VllmctlError
from vllmctl.inventory.model import EngineSpec, Host, Inventory, ModelDeployment
from vllmctl.ops import sha256_text
from vllmctl.paths import (
    ETC_DIR,
    HF_HOME,
    HOME_DIR,
    HUB_CACHE,
    MANAGED_DIRS,
    SERVICE_USER,
    STATE_DIR,
    VENVS_DIR,
)
from vllmctl.render import quoting
from vllmctl.render.templates import engine_flags, render_template
from vllmctl.tasks.adapters import serving_args


@dataclass(frozen=True)
class OpCall:
    op: str
    args: Mapping[str, Any]


@dataclass(frozen=True)
class Replica:
    index: int
    port: int
    gpus: tuple[int, ...] | None = None


@dataclass(frozen=True)
class ModelPlan:
    """What the planner decided for one model on one host; the default is the inventory's engine_args."""

    engine_args: Mapping[str, Any]
    replicas: tuple[Replica, ...]


@dataclass(frozen=True)
class HostContext:
    inventory: Inventory
    host: Host
    plans: Mapping[str, ModelPlan] = field(default_factory=dict)
    # secret name -> value, resolved at the edge; written to env files as NAME.upper() (hf_token -> HF_TOKEN)
    secrets: Mapping[str, str] = field(default_factory=dict)
    # local model source (and wheelhouse) -> its files measured on the controller, None when absent there
    local_files: Mapping[str, Sequence[Mapping[str, Any]] | None] = field(default_factory=dict)
    # host -> model -> plan for every host a gateway balances over (apply fills it when there is a gateway)
    fleet_plans: Mapping[str, Mapping[str, ModelPlan]] = field(default_factory=dict)
    # "<engine>-<version>" -> the CUDA its wheels name, read by runner/fleet/engine_cuda.py; absent: the table
    engine_cuda: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # folders a fan-out copies to this host before its run: `--check` plans no push of them
    fanned_out: frozenset[str] = frozenset()

    def models(self) -> list[ModelDeployment]:
        """The models this host serves on its own: a multi-node model is one engine over its group, brought
        up as a group release after the per-host tasks (runner/multinode/apply_groups.py), never per host."""
        return [m for m in self.staged_models() if m.cluster is None]

    def staged_models(self) -> list[ModelDeployment]:
        """Every model on this host, multi-node ones included: each node needs the weights and the venv."""
        return [m for m in self.inventory.models.values() if self.host.name in m.host_set]

    def plan(self, model: ModelDeployment) -> ModelPlan:
        return self.plans.get(model.name) or ModelPlan(dict(model.engine_args), (Replica(0, model.port),))

    def replicas_on(self, host: str, model: ModelDeployment) -> tuple[Replica, ...]:
        """The replicas `model` runs on another `host` of the fleet (its gateway's servers); a multi-node
        model's, this host's too, from the fleet's plans (its group's API servers)."""
        own = host == self.host.name and model.cluster is None
        plans = self.plans if own else self.fleet_plans.get(host, {})
        found = plans.get(model.name)
        return found.replicas if found else (Replica(0, model.port),)

    def engine(self, model: ModelDeployment) -> EngineSpec:
        return model.engine or self.host.engine


def venv_path(engine: EngineSpec) -> str:
    return f"{VENVS_DIR}/{quoting.venv_dir_name(f'{engine.name}-{engine.version}')}"


def unit_name(model: str, replica: int) -> str:
    return quoting.unit_file_name(f"vllmctl-{model}-{replica}.service")


def env_path(model: str) -> str:
    return quoting.confined_path(ETC_DIR, quoting.path_component(f"{model}.env"))


def exec_argv(model: ModelDeployment, engine: EngineSpec, plan: ModelPlan, replica: Replica) -> list[str]:
    python = f"{venv_path(engine)}/bin/python"
    if engine.name == "sglang":
        head = [python, "-m", "sglang.launch_server", "--model-path", model.source]
    else:
        head = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model.source]
    head += ["--served-model-name", model.name, "--host", "0.0.0.0", "--port", str(replica.port)]
    if model.revision:
        head += ["--revision", model.revision]
    if model.max_model_len and "max_model_len" not in plan.engine_args:
        head += ["--max-model-len", str(model.max_model_len)]
    implied = {k: v for k, v in serving_args(model).items() if k not in plan.engine_args}
    return head + _flags(engine.name, {**plan.engine_args, **implied})


def _flags(engine: str, engine_args: Mapping[str, Any]) -> list[str]:
    """Known flags use the engine's own spelling (e.g. `--no-x`); others get the generic form."""
    known = KNOWN_FLAGS.get(engine, {})
    argv: list[str] = []
    for name, value in engine_args.items():
        if isinstance(value, Mapping) and "secret" in value and engine == "vllm" and name == "api_key":
            continue  # VLLM_API_KEY in the 0600 env file: a unit's ExecStart and argv are world-readable
        if isinstance(value, Mapping) and "secret" in value:
            raise VllmctlError(
                f"engine arg {name} uses secret {value['secret']}: secrets in engine flags are not built yet",
                "a unit's ExecStart is world-readable: pass it through the model's env file instead",
            )
        argv += to_cli(engine, name, value) if name in known else engine_flags({name: value})
    return argv


def render_unit(ctx: HostContext, model: ModelDeployment, replica: Replica) -> str:
    engine = ctx.engine(model)
    plan = ctx.plan(model)
    return render_template(
        f"{engine.name}.service.j2",
        {
            "model": model.name,
            "replica": replica.index,
            "engine": engine.name,
            "engine_version": engine.version,
            "user": SERVICE_USER,
            "home": HOME_DIR,
            "env_file": env_path(model.name),
            "gpus": replica.gpus,
            "exec_argv": exec_argv(model, engine, plan, replica),
            "restart_sec": 10,
            "start_timeout_sec": 1800,
            "unit_stem": unit_name(model.name, replica.index).removesuffix(".service"),
        },
    )


def api_key_secret(engine_args: Mapping[str, Any]) -> str | None:
    """The secret an engine's `api_key: {secret: NAME}` names (its value reaches VLLM_API_KEY), or None."""
    value = engine_args.get("api_key")
    return str(value["secret"]) if isinstance(value, Mapping) and "secret" in value else None


def index_credentials(engine: EngineSpec) -> str | None:
    """The secret holding a package index's USER:PASSWORD (`engine.index_credentials`)."""
    return engine.index_credentials or None


def env_secrets(ctx: HostContext, model: ModelDeployment) -> dict[str, str]:
    """The secrets that reach `model`'s env file: those the inventory gives it (`Inventory.secrets_for`),
    never a package index's credentials (pip gets them through stdin, the engine never)."""
    wanted = set(ctx.inventory.secrets_for(model.name))
    engines = [ctx.host.engine, *(m.engine for m in ctx.inventory.models.values() if m.engine)]
    wanted -= {index_credentials(engine) for engine in engines}
    return {name: value for name, value in ctx.secrets.items() if name in wanted}


def render_env(ctx: HostContext, model: ModelDeployment) -> str:
    environment = {"HF_HOME": HF_HOME, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    # hub models are staged before the start (model_staging): the engine reads them offline from there
    environment.update({"HF_HUB_CACHE": HUB_CACHE, "HF_HUB_OFFLINE": "1"})
    environment.update({str(k): str(v) for k, v in ctx.host.vars.get("env", {}).items()})
    environment.update({name.upper(): value for name, value in env_secrets(ctx, model).items()})
    api_key = api_key_secret(ctx.plan(model).engine_args)
    if api_key is not None and api_key in ctx.secrets:
        environment["VLLM_API_KEY"] = ctx.secrets[api_key]
    return render_template("model.env.j2", {"model": model.name, "environment": environment})


Params = Mapping[str, Any]


def applied_hash(ctx: HostContext, model: ModelDeployment, replica: Replica) -> str:
    """What a replica was started with: unit + env content; a change to either restarts it."""
    return sha256_text(render_unit(ctx, model, replica) + "\0" + render_env(ctx, model))


def _base_layout(ctx: HostContext, params: Params) -> list[OpCall]:
    dirs = list(MANAGED_DIRS)
    # root only: each applied hash digests the env file, and a digest of a short API key can be guessed
    modes = {STATE_DIR: "0700"}
    return [OpCall("directory", {"path": path, "mode": modes.get(path, "0755")}) for path in dirs]


def _service_user(ctx: HostContext, params: Params) -> list[OpCall]:
    name = str(params.get("name", SERVICE_USER))
    return [
        OpCall("service_user", {"name": name, "home": HOME_DIR}),
        OpCall("directory", {"path": HOME_DIR, "mode": "0750", "owner": name, "group": name}),
    ]


def _model_env_files(ctx: HostContext, params: Params) -> list[OpCall]:
    """Every staged model's: a hub download reads its token there, and a multi-node engine its env."""
    return [
        OpCall("env_file", {"path": env_path(m.name), "content": render_env(ctx, m)})
        for m in ctx.staged_models()
    ]


def _model_units(ctx: HostContext, params: Params) -> list[OpCall]:
    return [
        OpCall("systemd_unit", {"name": unit_name(m.name, r.index), "content": render_unit(ctx, m, r)})
        for m in ctx.models()
        for r in ctx.plan(m).replicas
    ]


def _model_services(ctx: HostContext, params: Params) -> list[OpCall]:
    """Applied hash = unit + env content, so a change to either restarts the replica, even after a failure."""
    start = bool(params.get("start", True))
    calls = []
    for model in ctx.models():
        for replica in ctx.plan(model).replicas:
            args = {
                "name": unit_name(model.name, replica.index),
                "enabled": start,
                "running": start,
                "applied": applied_hash(ctx, model, replica),
                "why_stopped": "not started: the playbook says start: false",
                "reboot_on_stale": ctx.engine(model).reboot_on_stale,
            }
            calls.append(OpCall("service", args))
    return calls


Task = Callable[[HostContext, Params], list[OpCall]]

# The host-layout and model tasks; tasks/__init__.py joins them with the provisioning tasks.
MODEL_TASKS: dict[str, Task] = {
    "base_layout": _base_layout,
    "service_user": _service_user,
    "model_env_files": _model_env_files,
    "model_units": _model_units,
    "model_services": _model_services,
}
