"""Plan vs measured KV in the release manifest: predictions (GPU planner, vLLM-CPU space), the journal
command run by a real bash against stand-in systemctl/journalctl, and the gate recording both on a temp-dir
host."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Inventory
from vllmctl.lab.tinymodel import tiny_config
from vllmctl.ops import Upload
from vllmctl.planner.inventory_plan import plan_inventory
from vllmctl.releases.host import Manifest
from vllmctl.releases.kv import (
    cpu_predictions,
    gpu_predictions,
    parse_startup_lines,
    record_kv_step,
    recorded_kv,
    recorded_restart_kv,
    startup_lines_command,
    with_measured,
    with_predictions,
)
from vllmctl.runner.fleet.hosts import host_contexts, load_model_archs, model_plans
from vllmctl.runner.fleet.kv import KvPredictor
from vllmctl.runner.releases.release import GateOptions, desired_manifest, gate_host, read_releases
from vllmctl.status.metrics import MeasuredKv
from vllmctl.tasks.desired import HostContext

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "vllm_cpu"
STARTUP_LOG = FIXTURES / "startup.log"
from local_remote import LocalRemote  # noqa: E402  (the releases tests' temp-dir host)

UNIT = "vllmctl-tiny-0.service"


def _inventory(tmp_path: Path, text: str) -> Inventory:
    path = tmp_path / "inv.yml"
    path.write_text(text)
    return load_inventory(str(path))


@pytest.fixture
def cpu_inventory(tmp_path: Path) -> Inventory:
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(tiny_config()))
    return _inventory(
        tmp_path,
        "vllmctl: 1\n"
        "defaults:\n  engine: {name: vllm, package: vllm-cpu, version: 0.32.0}\n"
        "hosts:\n"
        "  cpu1: {address: 10.0.0.1, vars: {env: {VLLM_CPU_KVCACHE_SPACE: '1'}}}\n"
        "  cpu2: {address: 10.0.0.2}\n"
        f"models:\n  tiny: {{source: {model}, hosts: [cpu1, cpu2], port: 8000}}\n",
    )


@pytest.fixture
def gpu_inventory(tmp_path: Path) -> Inventory:
    return _inventory(
        tmp_path,
        "vllmctl: 1\n"
        "hosts:\n  gpu1: {address: 10.0.0.1, gpus: {model: H100-80GB, count: 1}}\n"
        "models:\n  qwen: {source: Qwen/Qwen3-0.6B, hosts: [gpu1], max_model_len: 8192}\n",
    )


def _manifest(models: dict[str, int], plan: dict[str, Any] | None = None) -> Manifest:
    return Manifest(
        "r1", "h", "", "ops", "", "vllm", "0.32.0", "/opt/v", {},
        models={name: {"ports": list(range(8000, 8000 + n))} for name, n in models.items()},
        plan=plan or {name: {"engine_args": {}} for name in models},
    )  # fmt: skip


def test_cpu_engines_are_predicted_from_the_host_kv_space(cpu_inventory: Inventory) -> None:
    archs, _ = load_model_archs(cpu_inventory, online=False)
    contexts = host_contexts(cpu_inventory, ["cpu1", "cpu2"], {})
    (first,) = cpu_predictions(contexts["cpu1"], archs).values()
    assert (first["kv_tokens"], first["max_concurrency"]) == (1_048_576, 512.0)
    assert cpu_predictions(contexts["cpu2"], archs) == {}  # no fixed space: vLLM sizes it from free memory


def test_gpu_engines_take_the_planner_figures_only_for_the_plan_being_served(
    gpu_inventory: Inventory,
) -> None:
    plan = plan_inventory(gpu_inventory)
    (entry,) = plan.entries
    assert entry.plan is not None
    served = host_contexts(gpu_inventory, ["gpu1"], {}, model_plans(plan))["gpu1"]
    assert gpu_predictions(served, plan) == {
        "qwen": {
            "kv_tokens": entry.plan.memory.kv_cache_tokens,
            "max_concurrency": entry.plan.memory.max_concurrency,
            "source": "planner",
        }
    }
    # units rendered from other engine args (e.g. a plan from gathered GPU facts): no prediction claimed
    assert gpu_predictions(host_contexts(gpu_inventory, ["gpu1"], {})["gpu1"], plan) == {}


def test_a_cpu_build_on_a_host_with_gpus_gets_no_gpu_prediction(tmp_path: Path) -> None:
    inv = _inventory(
        tmp_path,
        "vllmctl: 1\n"
        "defaults:\n  engine: {name: vllm, package: vllm-cpu, version: 0.32.0}\n"
        "hosts:\n  gpu1: {address: 10.0.0.1, gpus: {model: H100-80GB, count: 1}}\n"
        "models:\n  qwen: {source: Qwen/Qwen3-0.6B, hosts: [gpu1], max_model_len: 8192}\n",
    )
    plan = plan_inventory(inv)
    assert plan.entries[0].plan is not None  # the planner would size the GPU the CPU build never uses
    assert gpu_predictions(host_contexts(inv, ["gpu1"], {}, model_plans(plan))["gpu1"], plan) == {}


def test_the_predictor_plans_once_per_inventory_and_survives_unknown_models(
    cpu_inventory: Inventory, gpu_inventory: Inventory
) -> None:
    predict = KvPredictor()
    cpu = host_contexts(cpu_inventory, ["cpu1"], {})["cpu1"]
    assert predict(cpu)["tiny"]["kv_tokens"] == 1_048_576
    gpu = host_contexts(gpu_inventory, ["gpu1"], {}, model_plans(plan_inventory(gpu_inventory)))["gpu1"]
    assert predict(gpu)["qwen"]["source"] == "planner"
    # units rendered from the inventory's engine args, not the plan's: no prediction is claimed
    assert predict(HostContext(gpu_inventory, gpu_inventory.hosts["gpu1"], {})) == {}


def test_predictions_sit_in_the_manifest_plan_of_their_model() -> None:
    manifest = with_predictions(_manifest({"tiny": 1}), {"tiny": {"kv_tokens": 10}, "gone": {"kv_tokens": 1}})
    assert manifest.plan == {"tiny": {"engine_args": {}, "kv": {"predicted": {"kv_tokens": 10}}}}


def test_measured_figures_go_beside_the_prediction_with_the_deviation() -> None:
    manifest = with_predictions(
        _manifest({"tiny": 2}), {"tiny": {"kv_tokens": 1_000_000, "max_concurrency": 500.0}}
    )
    measured = {
        "vllmctl-tiny-0.service": MeasuredKv(kv_tokens=1_048_576, max_concurrency=512.0),
        "vllmctl-tiny-1.service": MeasuredKv(kv_tokens=900_000, max_concurrency=450.0),
        "vllmctl-other-0.service": MeasuredKv(kv_tokens=5),
    }
    kv = with_measured(manifest, measured).plan["tiny"]["kv"]
    assert kv["predicted"] == {"kv_tokens": 1_000_000, "max_concurrency": 500.0}
    assert kv["measured"]["vllmctl-tiny-0.service"]["kv_tokens_deviation"] == 0.0486
    assert kv["measured"]["vllmctl-tiny-0.service"]["max_concurrency_deviation"] == 0.024
    assert kv["measured"]["vllmctl-tiny-1.service"]["kv_tokens_deviation"] == -0.1
    assert set(kv["measured"]) == {"vllmctl-tiny-0.service", "vllmctl-tiny-1.service"}


def test_measured_without_a_prediction_has_no_deviation() -> None:
    kv = with_measured(_manifest({"tiny": 1}), {UNIT: MeasuredKv(kv_tokens=7)}).plan["tiny"]["kv"]
    assert kv == {"measured": {UNIT: kv["measured"][UNIT]}}
    assert kv["measured"][UNIT]["kv_tokens_deviation"] is None


def test_recorded_kv_reads_one_replica_back() -> None:
    manifest = with_measured(
        with_predictions(_manifest({"tiny": 2}), {"tiny": {"kv_tokens": 100}}),
        {"vllmctl-tiny-1.service": MeasuredKv(kv_tokens=90)},
    )
    doc = json.loads(manifest.to_json())
    assert recorded_kv(doc, "tiny", 1) == (100, 90)
    assert recorded_kv(doc, "tiny", 0) == (100, None)
    assert recorded_kv(doc, "other", 0) == (None, None)
    assert recorded_kv(None, "tiny", 0) == (None, None)
    assert recorded_kv({"plan": {"tiny": {"kv": "garbage"}}}, "tiny", 0) == (None, None)


def test_the_kv_step_rewrites_only_the_manifest() -> None:
    step = record_kv_step(_manifest({"tiny": 1}))
    (upload,) = step.actions
    assert isinstance(upload, Upload) and upload.path == "/var/lib/vllmctl/releases/r1/manifest.json"


def _fake_tools(bin_dir: Path, invocation: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    tools = {
        # a unit with no InvocationID (never started) prints an empty value
        "systemctl": f'#!/bin/bash\n[ "${{@: -1}}" = "{UNIT}" ] && echo {invocation}; true\n',
        "journalctl": f'#!/bin/bash\n[ "$1" = "_SYSTEMD_INVOCATION_ID={invocation}" ] && cat {STARTUP_LOG}\n',
    }
    for name, text in tools.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)


def test_the_journal_command_reads_each_units_current_run(tmp_path: Path) -> None:
    _fake_tools(tmp_path / "bin", "inv-42")
    command = startup_lines_command([UNIT, "vllmctl-tiny-1.service"])
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", command.render()], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "Initializing a V1 LLM engine" not in done.stdout  # only the KV lines travel
    measured = parse_startup_lines(done.stdout)
    assert list(measured) == [UNIT]  # the unit that never ran logged nothing
    assert (measured[UNIT].kv_tokens, measured[UNIT].max_concurrency) == (1_048_576, 512.0)
    assert measured[UNIT].available_kv_gib == 1.0


def test_the_gate_records_prediction_and_measurement_in_the_release(
    tmp_path: Path, cpu_inventory: Inventory
) -> None:
    host = LocalRemote(tmp_path / "host", "cpu1")
    _fake_tools(host.root / "bin", "inv-7")
    python = host.local("/opt/vllmctl/venvs/vllm-0.32.0/bin/python")
    python.parent.mkdir(parents=True)
    python.touch(mode=0o755)
    ctx = host_contexts(cpu_inventory, ["cpu1"], {})["cpu1"]
    for name, content in desired_manifest(ctx, GateOptions()).units.items():
        host.local(f"/etc/systemd/system/{name}").write_text(content)
        (host.root / "active" / name).touch()

    def healthy(url: str, model: str, deadline_s: float, on_progress: Any, api_key: Any = None) -> Any:
        from vllmctl.bench.readiness import HealthResult

        return HealthResult(True, 1.0, 1, "ready", "")

    def bench(url: str, model: str, api_key: Any = None) -> Any:
        from vllmctl.bench.report import EndpointReport
        from vllmctl.bench.stats import RequestResult, summarize

        done = [RequestResult(ok=True, ttft=0.05, itl=(0.01,), latency=0.1, output_tokens=2)]
        return EndpointReport(url, model, (summarize(done, 1, 1.0),))

    opts = GateOptions("t", "2026-11-21T10:00:00+00:00", health=healthy, bench=bench)
    outcome = gate_host(ctx, host, lambda: None, opts)
    assert outcome.status == "passed", outcome.reasons
    release = read_releases(host, "cpu1", 10).get(outcome.release)
    assert release is not None and release.manifest is not None and release.status == "good"
    kv = release.manifest.plan["tiny"]["kv"]
    assert kv["predicted"]["kv_tokens"] == kv["measured"][UNIT]["kv_tokens"] == 1_048_576
    assert kv["measured"][UNIT]["kv_tokens_deviation"] == 0.0
    # the serving digest (units, venv) did not change: the next apply finds the host unchanged
    again = gate_host(ctx, host, lambda: None, opts)
    assert again.status == "unchanged"


def test_a_v2_prediction_records_what_a_warm_restart_gets() -> None:
    doc = {"plan": {"tiny": {"kv": {"predicted": {"kv_tokens": 100, "restart_kv_tokens": 120}}}}}
    assert recorded_restart_kv(doc, "tiny") == 120
    assert recorded_restart_kv({"plan": {"tiny": {"kv": {"predicted": {"kv_tokens": 100}}}}}, "tiny") is None
    assert recorded_restart_kv(None, "tiny") is None
