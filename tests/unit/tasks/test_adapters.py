"""LoRA adapters and speculative decoding in a model's unit, staging and release manifest."""

from __future__ import annotations

import json

from executor_builders import inventory, model

from vllmctl.inventory.model import AdapterSpec, SpeculativeSpec
from vllmctl.tasks import expand
from vllmctl.tasks.adapters import served_extras, serving_args, speculative_config
from vllmctl.tasks.desired import HostContext, ModelPlan, Replica, exec_argv

ADAPTERS = (AdapterSpec("sql", "/srv/lora/sql"), AdapterSpec("chat", "acme/chat-lora", revision="v2"))
FILES = [
    {"name": "adapter_config.json", "source": "/srv/lora/sql/adapter_config.json", "sha256": "ab", "size": 3}
]


def _ctx(**kw: object) -> HostContext:
    inv = inventory(["gpu-1"], {"llama": model("llama", ("gpu-1",), **kw)})
    return HostContext(inv, inv.hosts["gpu-1"], {}, {}, {"/srv/lora/sql": FILES, "/srv/models/tiny": []})


def test_adapters_become_enable_lora_and_one_module_per_adapter() -> None:
    ctx = _ctx(adapters=ADAPTERS)
    deployment = ctx.models()[0]
    plan = ModelPlan({"max_loras": 2, "max_lora_rank": 16}, (Replica(0, 8000),))
    argv = exec_argv(deployment, ctx.engine(deployment), plan, plan.replicas[0])
    tail = argv[argv.index("--max-loras") :]
    assert tail == [
        "--max-loras", "2", "--max-lora-rank", "16", "--enable-lora",
        "--lora-modules", "sql=/srv/lora/sql", "chat=/var/lib/vllmctl/adapters/llama/chat",
    ]  # fmt: skip


def test_explicit_engine_args_win_over_what_adapters_imply() -> None:
    deployment = model("llama", ("gpu-1",), adapters=ADAPTERS, engine_args={"lora_modules": ["x=/y"]})
    assert serving_args(deployment)["lora_modules"] == [
        "sql=/srv/lora/sql",
        "chat=/var/lib/vllmctl/adapters/llama/chat",
    ]
    ctx = _ctx(adapters=ADAPTERS, engine_args={"lora_modules": ["x=/y"]})
    plan = ctx.plan(ctx.models()[0])
    argv = exec_argv(ctx.models()[0], ctx.engine(ctx.models()[0]), plan, plan.replicas[0])
    assert argv.count("--lora-modules") == 1 and argv[argv.index("--lora-modules") + 1] == "x=/y"


def test_local_adapter_is_synced_and_hub_adapter_downloaded_and_linked() -> None:
    calls = expand("model_staging", {}, _ctx(adapters=ADAPTERS))
    assert [c.op for c in calls] == ["model_sync", "model_sync", "model_download"]
    assert calls[1].args == {"dest": "/srv/lora/sql", "files": FILES}
    assert calls[2].args == {
        "venv": "/opt/vllmctl/venvs/vllm-0.11.0",
        "env_file": "/etc/vllmctl/llama.env",
        "model": "llama+lora+chat",
        "repo": "acme/chat-lora",
        "revision": "v2",
        "link": "/var/lib/vllmctl/adapters/llama/chat",
    }


def test_speculative_settings_render_to_vllms_json_and_stage_the_draft() -> None:
    draft = SpeculativeSpec(
        "eagle", 3, model="yuhuili/EAGLE-LLaMA3.1-Instruct-8B", draft_tensor_parallel_size=1
    )
    assert speculative_config(draft) == {
        "method": "eagle",
        "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
        "num_speculative_tokens": 3,
        "draft_tensor_parallel_size": 1,
    }
    ctx = _ctx(speculative=draft)
    plan = ctx.plan(ctx.models()[0])
    argv = exec_argv(ctx.models()[0], ctx.engine(ctx.models()[0]), plan, plan.replicas[0])
    assert json.loads(argv[argv.index("--speculative-config") + 1])["method"] == "eagle"
    staged = expand("model_staging", {}, ctx)
    assert staged[-1].op == "model_download" and staged[-1].args["model"] == "llama+draft"


def test_ngram_needs_no_draft_and_stages_nothing_more() -> None:
    ngram = SpeculativeSpec("ngram", 4, prompt_lookup_max=3)
    assert speculative_config(ngram) == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_max": 3,
    }
    assert [c.op for c in expand("model_staging", {}, _ctx(speculative=ngram))] == ["model_sync"]


def test_a_new_adapter_changes_the_unit_so_it_is_a_new_release() -> None:
    two = expand("model_units", {}, _ctx(adapters=ADAPTERS[:1]))[0].args["content"]
    three = expand("model_units", {}, _ctx(adapters=ADAPTERS))[0].args["content"]
    assert two != three
    extras = served_extras(model("llama", ("gpu-1",), adapters=ADAPTERS))
    assert [a["name"] for a in extras["adapters"]] == ["sql", "chat"]
    assert served_extras(model("llama", ("gpu-1",))) == {}
