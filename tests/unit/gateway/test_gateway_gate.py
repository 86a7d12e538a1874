"""The gateway's gate (#20): after a rollout, each model's endpoint on each gateway host is benchmarked
through the gateway with the model's API key and judged against its SLO; a miss fails the apply's outcome."""

from __future__ import annotations

from dataclasses import replace

from executor_builders import inventory, model

from vllmctl.bench.report import EndpointReport
from vllmctl.bench.stats import RequestResult, summarize
from vllmctl.inventory.model import GatewaySpec, Inventory
from vllmctl.runner.apply import ApplyOutcome
from vllmctl.runner.core.results import RunResult
from vllmctl.runner.gateway.gate import gateway_gate


def report(url: str, ttft_s: float = 0.05, failed: int = 0) -> EndpointReport:
    done = [RequestResult(ok=True, ttft=ttft_s, itl=(0.01,) * 7, latency=ttft_s + 0.07, output_tokens=8)] * 4
    bad = [RequestResult(ok=False, error="HTTP 503")] * failed
    return EndpointReport(url, "tiny", (summarize(done + bad, 1, 1.0), summarize(done, 4, 0.5)))


def fleet(slo: dict[str, float] | None = None) -> Inventory:
    inv = inventory(["gw", "a", "b"], {"tiny": model("tiny", ("a", "b"), slo=slo or {})})
    return replace(inv, gateway=GatewaySpec(("gw",), {"tiny": 9100}))


def test_each_model_is_benchmarked_through_each_gateway_host_with_its_key() -> None:
    called: list[tuple[str, str, str | None]] = []

    def bench(base_url: str, model: str, api_key: str | None = None) -> EndpointReport:
        called.append((base_url, model, api_key))
        return report(base_url)

    verdict = gateway_gate(fleet(), {"tiny": "k-1"}, bench)
    assert called == [("http://10.0.0.1:9100", "tiny", "k-1")]
    assert verdict.passed and "gw:tiny" in verdict.figures


def test_failed_requests_or_an_slo_miss_through_the_gateway_fail_the_gate() -> None:
    failing = gateway_gate(fleet(), {}, lambda url, model, api_key=None: report(url, failed=2))
    assert not failing.passed
    assert failing.reasons[0].startswith("gw:tiny: 2 of 6 requests failed")
    slow = gateway_gate(fleet({"ttft_p99_ms": 100}), {}, lambda url, model, api_key=None: report(url, 0.5))
    assert not slow.passed and all("SLO miss" in reason for reason in slow.reasons)


def test_a_failed_gateway_gate_fails_the_apply_and_shows_in_its_json() -> None:
    run = RunResult(playbook="site", check=False, hosts={})
    passed = ApplyOutcome(run, [], {"passed": True, "reasons": [], "figures": {}})
    failed = ApplyOutcome(run, [], {"passed": False, "reasons": ["gw:tiny: SLO miss"], "figures": {}})
    assert not passed.failed and failed.failed
    assert failed.to_json()["gateway_gate"]["reasons"] == ["gw:tiny: SLO miss"]
    assert ApplyOutcome(run, []).to_json()["gateway_gate"] is None
