"""`adapters:` and `speculative:` in an inventory: the typed result, and each problem at its file:line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import AdapterSpec, SpeculativeSpec

Problems = Callable[..., list[str]]

HEAD = """\
vllmctl: 1
hosts:
  gpu-01: {address: 10.0.0.1}
models:
  llama:
    source: meta-llama/Llama-3.1-8B-Instruct
    hosts: gpu-01
"""


def test_adapters_and_speculative_load_typed(workdir: Path) -> None:
    text = HEAD + (
        "    adapters:\n"
        "      - {name: sql, source: /srv/lora/sql}\n"
        "      - {name: chat, source: acme/chat-lora, revision: v2}\n"
        "    speculative: {method: ngram, num_speculative_tokens: 4, prompt_lookup_max: 3}\n"
    )
    (workdir / "inv.yml").write_text(text)
    model = load_inventory("inv.yml").models["llama"]
    assert model.adapters == (
        AdapterSpec("sql", "/srv/lora/sql"),
        AdapterSpec("chat", "acme/chat-lora", "v2"),
    )
    assert model.speculative == SpeculativeSpec("ngram", 4, prompt_lookup_max=3)


def test_adapter_names_and_sources(problems: Problems) -> None:
    found = problems(
        HEAD + "    adapters:\n"
        "      - {name: llama, source: /srv/lora/a}\n"
        "      - {name: sql, source: /srv/lora/../etc}\n"
        "      - {name: sql, source: org/sql}\n"
    )
    assert found[0].startswith("inv.yml:9:16: models.llama.adapters[0].name: adapter 'llama' has the name")
    assert found[1].startswith("inv.yml:10:29: models.llama.adapters[1].source: '/srv/lora/../etc' has a")
    assert found[2].startswith(
        "inv.yml:11:16: models.llama.adapters[2].name: adapter 'sql' is declared twice"
    )
    assert len(found) == 3


def test_speculative_methods_need_what_they_need(problems: Problems) -> None:
    found = problems(HEAD + "    speculative: {method: eagle, num_speculative_tokens: 3}\n")
    assert found == [
        "inv.yml:8:27: models.llama.speculative.method: speculative method eagle needs a draft: `model` is "
        "missing\n  hint: set speculative.model to the draft (or draft head) as a hub id or a local folder"
    ]
    found = problems(
        HEAD + "    speculative: {method: ngram, num_speculative_tokens: 3, prompt_lookup_min: 5, "
        "prompt_lookup_max: 2, model: org/draft}\n"
    )
    assert [line.split("\n")[0] for line in found] == [
        "inv.yml:8:80: models.llama.speculative.prompt_lookup_min: prompt_lookup_min=5 must be <= "
        "prompt_lookup_max=2",
        "inv.yml:8:112: models.llama.speculative.model: speculative method ngram takes no draft model: ngram "
        "proposes from the prompt",
    ]


def test_engine_args_and_adapters_do_not_both_set_lora_modules(problems: Problems) -> None:
    found = problems(
        HEAD + "    adapters: [{name: sql, source: org/sql}]\n    engine_args: {lora_modules: [x=/y]}\n"
    )
    assert len(found) == 1 and "engine_args.lora_modules and `adapters:` both set" in found[0]


def test_sglang_deployments_get_no_vllm_adapter_flags(problems: Problems) -> None:
    found = problems(
        HEAD.replace("    hosts: gpu-01\n", "    hosts: gpu-01\n    engine: {name: sglang, version: 0.5.2}\n")
        + "    adapters: [{name: sql, source: org/sql}]\n"
    )
    assert len(found) == 1 and "`adapters:` is built for vLLM only" in found[0], found


def test_a_local_adapter_path_vllm_cannot_parse_is_refused(problems: Problems) -> None:
    found = problems(HEAD + "    adapters: [{name: sql, source: /srv/lora/a=b}]\n")
    assert len(found) == 1 and "vLLM's --lora-modules NAME=PATH cannot carry it" in found[0]
