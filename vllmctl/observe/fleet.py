"""What the dashboard and the rules read from the inventory: each model's hosts, engine releases and metric
names, and the PromQL selectors over the labels `export prometheus` gives its targets."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from vllmctl.inventory.model import Inventory
from vllmctl.observe.names import EngineMetrics, engine_metrics
from vllmctl.tasks.desired import HostContext

JOB = "vllmctl"  # the job label `export prometheus` gives every target (tested equal)
RATE = "5m"
GATEWAY = f'job="{JOB}", component="gateway"'
DCGM = f'job="{JOB}", component="dcgm-exporter"'


@dataclass(frozen=True)
class ModelView:
    """One model as its panels and rules see it."""

    name: str
    hosts: tuple[str, ...]  # the hosts whose engines serve it (a multi-node model: its head)
    releases: tuple[str, ...]  # "vllm 0.32.0", one per distinct engine release of its hosts
    metrics: tuple[EngineMetrics, ...]  # distinct name sets over those releases
    min_available: int
    slo: dict[str, float] = field(default_factory=dict)
    gateway: bool = False  # behind a gateway whose HAProxy exporter is scraped
    dcgm: bool = False  # at least one of its hosts runs DCGM Exporter

    def selector(self, replicas: str | None = None) -> str:
        """Its engine targets: `replicas` (a Grafana variable) narrows to the chosen instances."""
        chosen = f', instance=~"${replicas}"' if replicas else ""
        return f'{{job="{JOB}", model="{self.name}"{chosen}}}'

    def hosts_regex(self) -> str:
        return "|".join(self.hosts)

    def series(
        self, pick: Callable[[EngineMetrics], str | None], suffix: str = "", sel: str = ""
    ) -> str | None:
        """`pick`'s metric with `sel` for every name set of the model, joined by `or`; None if none has it."""
        names = sorted({name for name in map(pick, self.metrics) if name is not None})
        if not names:
            return None
        parts = [f"{name}{suffix}{sel}" for name in names]
        return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"


def model_views(inventory: Inventory) -> list[ModelView]:
    """Every model of the inventory, in inventory order."""
    gateway = inventory.gateway
    scraped = gateway is not None and gateway.metrics_port is not None
    views = []
    for model in inventory.models.values():
        hosts = model.cluster.hosts[:1] if model.cluster is not None else model.hosts
        engines = [HostContext(inventory, inventory.hosts[name], {}).engine(model) for name in hosts]
        releases = tuple(dict.fromkeys(f"{engine.name} {engine.version}" for engine in engines))
        metrics = tuple(dict.fromkeys(engine_metrics(engine.name, engine.version) for engine in engines))
        views.append(
            ModelView(
                name=model.name,
                hosts=tuple(hosts),
                releases=releases,
                metrics=metrics,
                min_available=model.min_available,
                slo=dict(model.slo),
                gateway=scraped and gateway is not None and model.name in gateway.ports,
                dcgm=any(inventory.hosts[name].driver.dcgm_exporter for name in model.hosts),
            )
        )
    return views


def quantile(q: float, histogram: str, by: str = "instance") -> str:
    """The `q` quantile of a histogram's buckets (`histogram` ends in `_bucket{...}`) over RATE."""
    return f"histogram_quantile({q}, sum by (le, {by}) (rate({histogram}[{RATE}])))"
