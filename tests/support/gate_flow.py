"""A temp-dir host for the release gate: its context, units, health and bench fakes, clock and options
(shared by the gate-flow and runner-gate tests)."""

from __future__ import annotations

from typing import Any

from local_remote import LocalRemote

from vllmctl.bench.readiness import HealthResult
from vllmctl.bench.report import EndpointReport
from vllmctl.bench.stats import RequestResult, summarize
from vllmctl.inventory.model import DriverSpec, EngineSpec, Host, Inventory, ModelDeployment, SshSettings
from vllmctl.runner.releases.release import (
    GateOptions,
    desired_manifest,
)
from vllmctl.tasks.desired import HostContext

UNIT = "vllmctl-m-0.service"
VENV = "/opt/vllmctl/venvs/vllm-0.11.0"


def ctx(engine_args: dict[str, Any], slo: dict[str, float] | None = None) -> HostContext:
    host = Host("gpu1", "10.0.0.1", SshSettings(), None, DriverSpec(), EngineSpec())
    model = ModelDeployment("m", "/srv/models/tiny", ("gpu1",), engine_args=engine_args, slo=slo or {})
    inv = Inventory(path="inv.yml", hosts={"gpu1": host}, groups={}, models={"m": model})
    return HostContext(inv, host)


def apply_units(remote: LocalRemote, context: HostContext) -> None:
    """What the playbook's model_units and model_services phases leave behind: units installed and started."""
    for name, content in desired_manifest(context, GateOptions()).units.items():
        remote.local(f"/etc/systemd/system/{name}").write_text(content)
        (remote.root / "active" / name).touch()


def health(remote: LocalRemote) -> Any:
    def check(
        url: str, model: str, deadline_s: float, on_progress: Any, api_key: str | None = None
    ) -> HealthResult:
        unit = remote.local(f"/etc/systemd/system/{UNIT}").read_text()
        ok = (remote.root / "active" / UNIT).exists() and "--bogus" not in unit
        return HealthResult(ok, 2.0, 4, "ready" if ok else "health", "" if ok else "connection refused")

    return check


def bench(url: str, model: str, api_key: str | None = None) -> EndpointReport:
    done = [RequestResult(ok=True, ttft=0.08, itl=(0.01,) * 7, latency=0.15, output_tokens=8)] * 4
    return EndpointReport(url, model, (summarize(done, 1, 1.0), summarize(done, 4, 0.4)))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 1.5
        return self.now


def opts(remote: LocalRemote, second: int, keep: int = 5) -> GateOptions:
    stamp = f"2026-11-21T09:00:{second:02d}+00:00"
    return GateOptions("ops@ctl", stamp, "d" * 64, keep, health=health(remote), bench=bench, clock=Clock())
