"""Desired state and playbooks: units per replica, env files with secrets, pinned GPUs, loud pending tasks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from executor_builders import inventory, model

from vllmctl.errors import InvalidInputError, VllmctlError
from vllmctl.inventory.model import EngineSpec, SecretRef
from vllmctl.paths import STATE_DIR
from vllmctl.runner.core.plan import plan_phase, playbook_requests
from vllmctl.tasks import expand
from vllmctl.tasks.desired import HostContext, ModelPlan, Replica, render_unit
from vllmctl.tasks.playbooks import load_playbook, parse_playbook


def _ctx(**plans: ModelPlan) -> HostContext:
    inv = inventory(["gpu-1"], {"llama": model("llama", ("gpu-1",), source="/srv/my models/llama $1")})
    inv = replace(inv, secrets={"HF_TOKEN": SecretRef("HF_TOKEN", env="HF_TOKEN")})  # reaches every model
    return HostContext(inv, inv.hosts["gpu-1"], plans, {"HF_TOKEN": "hf_secret"})


def test_one_unit_per_replica_with_pinned_gpus_and_quoted_model_path() -> None:
    plan = ModelPlan({"tensor_parallel_size": 1}, (Replica(0, 8000, (0,)), Replica(1, 8001, (1,))))
    calls = expand("model_units", {}, _ctx(llama=plan))
    assert [c.args["name"] for c in calls] == ["vllmctl-llama-0.service", "vllmctl-llama-1.service"]
    unit = calls[1].args["content"]
    assert "Environment=CUDA_VISIBLE_DEVICES=1\n" in unit
    assert '--model "/srv/my models/llama $$1"' in unit
    assert "--port 8001 --tensor-parallel-size 1" in unit
    assert "User=vllm\n" in unit and "Restart=on-failure\n" in unit and "LimitNOFILE=65536\n" in unit
    assert "LimitMEMLOCK=infinity\n" in unit  # NCCL and RDMA pin memory; systemd ignores limits.conf
    assert "EnvironmentFile=-/etc/vllmctl/llama.env\n" in unit


def test_unpinned_replica_has_no_cuda_visible_devices() -> None:
    ctx = _ctx()
    unit = render_unit(ctx, ctx.models()[0], Replica(0, 8000))
    assert "CUDA_VISIBLE_DEVICES" not in unit


def test_env_file_carries_secrets_and_is_an_env_file_op() -> None:
    (call,) = expand("model_env_files", {}, _ctx())
    assert call.op == "env_file" and call.args["path"] == "/etc/vllmctl/llama.env"
    assert 'HF_TOKEN="hf_secret"\n' in call.args["content"]


def test_service_applied_hash_follows_unit_and_env() -> None:
    first = expand("model_services", {"start": True}, _ctx())[0].args["applied"]
    other = _ctx()
    changed = HostContext(other.inventory, other.host, {}, {"HF_TOKEN": "rotated"})
    assert expand("model_services", {"start": True}, changed)[0].args["applied"] != first
    assert expand("model_services", {"start": True}, _ctx())[0].args["applied"] == first


def test_units_playbook_plans_everything_on_a_fresh_host_from_one_fact_request() -> None:
    playbook = load_playbook("units")
    assert [p.name for p in playbook.phases] == ["base", "models", "services"]
    ctx = _ctx()
    requests = playbook_requests(playbook, ctx)
    assert set(requests) == {"paths", "users", "units", "applied"}
    assert "/etc/systemd/system/vllmctl-llama-0.service" in requests["paths"]
    fresh = {"paths": {}, "users": {}, "units": {}, "applied": {}}
    steps = [s for phase in playbook.phases for s in plan_phase(phase, ctx, fresh)]
    changed = [s.op for s in steps if s.changed]
    assert changed == ["directory"] * 7 + ["service_user", "directory", "env_file", "systemd_unit"]
    service = steps[-1]
    assert service.op == "service" and not service.changed and "start: false" in (service.noop or "")


def test_rollback_is_a_command_not_a_playbook() -> None:
    with pytest.raises(InvalidInputError) as caught:
        load_playbook("rollback")
    assert caught.value.render().startswith("rollback: no playbook named rollback; use `vllmctl rollback`")


def test_playbook_errors_quote_file_and_line(tmp_path: Path) -> None:
    text = "name: x\nphases:\n  - name: base\n    tasks:\n      - task: base_layout\n      - task: nope\n"
    with pytest.raises(InvalidInputError) as caught:
        parse_playbook(text, "pb.yml")
    assert caught.value.render().startswith("pb.yml:6:15: phases.0.tasks.1.task: unknown task nope")


def test_playbook_unknown_keys_are_reported() -> None:
    with pytest.raises(InvalidInputError, match="problem"):
        parse_playbook("phases: []\nwhen: x\n", "pb.yml")


def test_a_secret_api_key_goes_to_the_env_file_never_into_the_world_readable_unit() -> None:
    plan = ModelPlan({"api_key": {"secret": "api"}}, (Replica(0, 8000),))
    base = _ctx(llama=plan)
    ctx = HostContext(base.inventory, base.host, base.plans, {"api": "sk-topsecret"})
    (unit,) = expand("model_units", {}, ctx)
    assert "sk-topsecret" not in unit.args["content"] and "--api-key" not in unit.args["content"]
    (env,) = expand("model_env_files", {}, ctx)
    assert 'VLLM_API_KEY="sk-topsecret"\n' in env.args["content"]


def test_a_secret_engine_arg_sglang_cannot_read_from_the_environment_is_refused() -> None:
    inv = inventory(["gpu-1"], {"llama": model("llama", ("gpu-1",), engine=EngineSpec("sglang", "0.5.4"))})
    plan = ModelPlan({"api_key": {"secret": "api"}}, (Replica(0, 8000),))
    with pytest.raises(VllmctlError, match="secrets in engine flags are not built yet"):
        expand("model_units", {}, HostContext(inv, inv.hosts["gpu-1"], {"llama": plan}, {}))


def test_only_root_reads_the_applied_hashes_which_digest_the_env_file() -> None:
    modes = {call.args["path"]: call.args["mode"] for call in expand("base_layout", {}, _ctx())}
    assert modes[STATE_DIR] == "0700"
    assert {mode for path, mode in modes.items() if path != STATE_DIR} == {"0755"}
