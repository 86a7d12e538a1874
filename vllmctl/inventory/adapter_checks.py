"""Checks on a model's `adapters:` and `speculative:` the schema cannot express: unique adapter names, safe
local sources (a model source's rules), what each speculative method needs, and no second way to set them."""

from __future__ import annotations

from typing import Any

from vllmctl.inventory.resolve import Checker, mapping
from vllmctl.inventory.values import host_path_problem

NEEDS_DRAFT = frozenset({"draft_model", "eagle", "eagle3", "medusa", "mlp_speculator"})
# engine_args that the adapters or the speculative settings render themselves
LORA_FLAGS = ("enable_lora", "lora_modules")
SPECULATIVE_FLAGS = ("speculative_config",)


def check_adapters(checker: Checker, name: str, body: dict[str, Any]) -> None:
    adapters = body.get("adapters")
    engine_args = mapping(body.get("engine_args"))
    for key in ("adapters", "speculative"):
        if body.get(key) and "sglang" in checker.engines_for(name, body):
            checker.add(
                ("models", name, key),
                f"`{key}:` is built for vLLM only; this model runs on SGLang on some of its hosts",
                "serve it with vLLM, or pass SGLang's own flags through engine_args",
                True,
            )
    if isinstance(adapters, list) and adapters:
        _adapter_entries(checker, name, adapters)
        _not_twice(checker, name, engine_args, LORA_FLAGS, "adapters")
    speculative = body.get("speculative")
    if isinstance(speculative, dict):
        _speculative(checker, name, speculative)
        _not_twice(checker, name, engine_args, SPECULATIVE_FLAGS, "speculative")


def _adapter_entries(checker: Checker, model: str, adapters: list[Any]) -> None:
    seen: dict[str, int] = {}
    for index, raw in enumerate(adapters):
        adapter = mapping(raw)
        where = ("models", model, "adapters", index)
        adapter_name = adapter.get("name")
        if isinstance(adapter_name, str):
            if adapter_name == model:
                checker.add(
                    (*where, "name"),
                    f"adapter '{adapter_name}' has the name the base model is served under",
                    "requests name the adapter by its own name: give it a different one",
                )
            elif adapter_name in seen:
                checker.add(
                    (*where, "name"),
                    f"adapter '{adapter_name}' is declared twice (also at adapters[{seen[adapter_name]}])",
                    "each adapter is addressed by its name: rename or remove one",
                )
            seen.setdefault(adapter_name, index)
        source = adapter.get("source")
        if isinstance(source, str) and source.startswith("/") and (found := host_path_problem(source)):
            checker.add((*where, "source"), found.message, found.hint)
        elif isinstance(source, str) and source.startswith("/") and ("=" in source or "," in source):
            # vllm/entrypoints/openai/cli_args.py (LoRAParserAction): NAME=PATH splits on '=', ',' means JSON
            checker.add(
                (*where, "source"),
                f"adapter folder {source} holds '=' or ',': vLLM's --lora-modules NAME=PATH cannot carry it",
                "rename the folder without '=' and ','",
            )


def _speculative(checker: Checker, model: str, spec: dict[str, Any]) -> None:
    where = ("models", model, "speculative")
    method, draft = spec.get("method"), spec.get("model")
    if method in NEEDS_DRAFT and draft is None:
        checker.add(
            (*where, "method"),
            f"speculative method {method} needs a draft: `model` is missing",
            "set speculative.model to the draft (or draft head) as a hub id or a local folder",
        )
    if method in ("ngram", "mtp") and draft is not None:
        why = "ngram proposes from the prompt" if method == "ngram" else "mtp uses the model's own layers"
        checker.add(
            (*where, "model"), f"speculative method {method} takes no draft model: {why}", "remove model"
        )
    lookup = [key for key in ("prompt_lookup_min", "prompt_lookup_max") if key in spec]
    if method != "ngram" and lookup:
        checker.add((*where, lookup[0]), f"{lookup[0]} is an ngram setting, not one of {method}", "remove it")
    low, high = spec.get("prompt_lookup_min"), spec.get("prompt_lookup_max")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        checker.add(
            (*where, "prompt_lookup_min"),
            f"prompt_lookup_min={low} must be <= prompt_lookup_max={high}",  # vLLM's own words
            "lower prompt_lookup_min or raise prompt_lookup_max",
        )
    if isinstance(draft, str) and draft.startswith("/") and (found := host_path_problem(draft)):
        checker.add((*where, "model"), found.message, found.hint)


def _not_twice(
    checker: Checker, model: str, engine_args: dict[str, Any], flags: tuple[str, ...], key: str
) -> None:
    for flag in flags:
        if flag in engine_args:
            checker.add(
                ("models", model, "engine_args", flag),
                f"engine_args.{flag} and `{key}:` both set what the engine serves",
                f"declare it once, under `{key}:` (vllmctl renders {flag} from it and stages the files)",
            )
