"""The gateway's gate: once a rollout has changed hosts behind a gateway, each model's endpoint on each
gateway host answers the smoke benchmark within the model's SLO, judged like a host's release gate. It runs
after every host's own gate, so it judges what clients of the fleet get; it rolls nothing back itself."""

from __future__ import annotations

from collections.abc import Mapping

from vllmctl.bench.endpoints import gateway_endpoints
from vllmctl.bench.readiness import HealthResult
from vllmctl.bench.smoke import SmokeBench
from vllmctl.inventory.model import Inventory
from vllmctl.releases.gate import EndpointCheck, Verdict, decide
from vllmctl.transport.tunnel import base_url

# The gateway answered the benchmark itself; there is no separate readiness to wait for.
ANSWERED = HealthResult(ok=True, elapsed_s=0.0, attempts=1, stage="ready")


def gateway_gate(inventory: Inventory, api_keys: Mapping[str, str], bench: SmokeBench) -> Verdict:
    """One smoke benchmark per gateway host and model, through the gateway, with the model's API key."""
    checks = []
    for endpoint in gateway_endpoints(inventory, url_of=base_url):
        report = bench(endpoint.base_url, endpoint.model, api_keys.get(endpoint.model))
        slo = inventory.models[endpoint.model].slo
        checks.append(EndpointCheck(f"{endpoint.host}:{endpoint.model}", ANSWERED, report, slo))
    return decide(checks)
