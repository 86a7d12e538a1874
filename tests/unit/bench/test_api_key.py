"""A model served with `api_key` (vLLM's --api-key): the health poller, the smoke benchmark, the release
gate and `vllmctl bench INV` send `Authorization: Bearer <key>` to a real local server that refuses /v1
requests without it, and never print the key."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from local_remote import LocalRemote

from vllmctl.bench.health import wait_healthy
from vllmctl.bench.report import LoadSpec
from vllmctl.bench.smoke import benchmark_endpoint
from vllmctl.cli import main
from vllmctl.inventory.model import DriverSpec, EngineSpec, Host, Inventory, ModelDeployment, SshSettings
from vllmctl.runner.releases.release import GateOptions, desired_manifest, gate_host, read_releases
from vllmctl.tasks.desired import HostContext

KEY = "sk-gate-7f3a$x"
SPEC = LoadSpec(concurrency=(1, 2), output_tokens=4, requests=3, warmup=True)


@pytest.fixture
def keyed(fake_server: Any) -> Any:
    fake_server.script.api_key = KEY
    return fake_server


def test_health_sends_the_key_to_v1_models(keyed: Any, make_clock: Any) -> None:
    clock = make_clock()
    assert wait_healthy(keyed.base_url, "tiny", 5.0, clock, clock.sleep, api_key=KEY).ok
    refused = wait_healthy(keyed.base_url, "tiny", 1.0, clock, clock.sleep)
    assert (refused.ok, refused.stage, refused.last_error) == (False, "models", "GET /v1/models answered 401")


def test_the_smoke_benchmark_sends_the_key_on_every_request(keyed: Any) -> None:
    report = benchmark_endpoint(keyed.base_url, "tiny", SPEC, 8, api_key=KEY)
    assert report.error == "" and [level.completed for level in report.levels] == [3, 3]
    assert keyed.script.refused == 0
    without = benchmark_endpoint(keyed.base_url, "tiny", SPEC, 8)
    assert "HTTP 401" in without.error and keyed.script.refused == 1


def _context(port: int) -> HostContext:
    host = Host("gpu1", "127.0.0.1", SshSettings(), None, DriverSpec(), EngineSpec())
    args = {"api_key": {"secret": "api_key"}}
    model = ModelDeployment("tiny", "/srv/models/tiny", ("gpu1",), port=port, engine_args=args)
    return HostContext(
        Inventory("inv.yml", {"gpu1": host}, {}, {"tiny": model}), host, secrets={"api_key": KEY}
    )


def _gate(remote: LocalRemote, context: HostContext, keys: dict[str, str]) -> Any:
    for name, content in desired_manifest(context, GateOptions()).units.items():
        remote.local(f"/etc/systemd/system/{name}").write_text(content)
        (remote.root / "active" / name).touch()
    venv = remote.local("/opt/vllmctl/venvs/vllm-0.11.0/bin/python")
    venv.parent.mkdir(parents=True, exist_ok=True)
    venv.touch()
    stamp = time.strftime("2026-11-21T09:00:%S+00:00")
    opts = GateOptions(
        "ops@ctl", stamp, "d" * 64, health_timeout_s=2.0, api_keys=keys, predict_kv=lambda c: {}
    )
    return gate_host(context, remote, lambda: None, opts)


def test_a_model_served_with_an_api_key_passes_its_own_gate(keyed: Any, tmp_path: Path) -> None:
    # the real health poller and smoke benchmark, as apply runs them, against a server that wants the key
    remote = LocalRemote(tmp_path)
    context = _context(int(keyed.base_url.rsplit(":", 1)[1]))
    outcome = _gate(remote, context, {"tiny": KEY})
    assert outcome.status == "passed", outcome.reasons
    assert outcome.figures["tiny"]["c4"]["error_rate"] == 0
    assert KEY not in json.dumps(outcome.to_json()) + json.dumps(
        read_releases(remote, "gpu1", 10).releases[0].verdict
    )


def test_without_the_key_the_same_gate_fails(keyed: Any, tmp_path: Path) -> None:
    remote = LocalRemote(tmp_path)
    outcome = _gate(remote, _context(int(keyed.base_url.rsplit(":", 1)[1])), {})
    assert outcome.status == "failed" and "answered 401" in outcome.reasons[0]


INVENTORY = """\
vllmctl: 1
hosts:
  box-1: {{address: 127.0.0.1, gpus: {{model: H100-80GB, count: 1}}}}
models:
  tiny:
    source: org/tiny
    hosts: [box-1]
    port: {port}
    engine_args: {{api_key: {{secret: api_key}}}}
secrets:
  api_key: {{env: VLLMCTL_TEST_API_KEY}}
"""


def test_vllmctl_bench_reads_the_models_key_and_never_prints_it(
    keyed: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = tmp_path / "fleet.yml"
    inventory.write_text(INVENTORY.format(port=int(keyed.base_url.rsplit(":", 1)[1])))
    monkeypatch.setenv("VLLMCTL_TEST_API_KEY", KEY)
    argv = [
        "bench",
        str(inventory),
        "--concurrency",
        "1",
        "--requests",
        "2",
        "--output-tokens",
        "3",
        "--json",
    ]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["ok"] is True and keyed.script.refused == 0
    assert KEY not in out + err
    monkeypatch.setenv("KEY_FOR_URL", KEY)
    url_mode = ["bench", "--url", keyed.base_url, "--model-id", "tiny", "--api-key-env", "KEY_FOR_URL"]
    assert main([*url_mode, "--concurrency", "1", "--requests", "2", "--output-tokens", "3"]) == 0
