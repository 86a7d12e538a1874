"""What a model's LoRA adapters and speculative draft add to its unit and its staging, pure: the engine args
(`enable_lora`, `lora_modules`, `speculative_config`) and the model_sync / model_download calls."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from vllmctl.inventory.model import AdapterSpec, ModelDeployment
from vllmctl.paths import ADAPTERS_DIR, adapter_dir
from vllmctl.planner.lora import speculative_config
from vllmctl.render.quoting import confined_path, path_component


def is_local(source: str) -> bool:
    return source.startswith("/")


def adapter_path(model: ModelDeployment, adapter: AdapterSpec) -> str:
    """Where the engine reads the adapter: a local source at its (mirrored) path, a hub one at its link."""
    if is_local(adapter.source):
        return adapter.source
    path = adapter_dir(path_component(model.name), path_component(adapter.name))
    return confined_path(ADAPTERS_DIR, path.removeprefix(ADAPTERS_DIR + "/"))


def serving_args(model: ModelDeployment) -> dict[str, Any]:
    """The engine args the adapters and the speculative settings imply; engine_args given explicitly win."""
    args: dict[str, Any] = {}
    if model.adapters:
        args["enable_lora"] = True
        args["lora_modules"] = [f"{a.name}={adapter_path(model, a)}" for a in model.adapters]
    if model.speculative is not None:
        args["speculative_config"] = speculative_config(model.speculative)
    return args


def served_extras(model: ModelDeployment) -> dict[str, Any]:
    """What a release manifest records beyond the model: its adapters and speculative config, when any."""
    extras: dict[str, Any] = {}
    if model.adapters:
        extras["adapters"] = [
            {"name": a.name, "source": a.source, "revision": a.revision, "path": adapter_path(model, a)}
            for a in model.adapters
        ]
    if model.speculative is not None:
        extras["speculative"] = speculative_config(model.speculative)
    return extras


def staged_sources(model: ModelDeployment) -> list[str]:
    """Every local folder the model's adapters and draft are synced from (the controller hashes them)."""
    sources = [a.source for a in model.adapters]
    if model.speculative is not None and model.speculative.model is not None:
        sources.append(model.speculative.model)
    return [s for s in sources if is_local(s)]


Files = Callable[[str], Any]


def stage_call(
    source: str, revision: str | None, key: str, files: Files, hub: Mapping[str, Any], link: str | None = None
) -> tuple[str, dict[str, Any]]:
    """A local folder mirrored at its path, or a hub repo downloaded into the hub cache (linked at `link`)."""
    if is_local(source):
        return "model_sync", {"dest": source, "files": files(source)}
    args = {**hub, "model": key, "repo": source, "revision": revision}
    return "model_download", args if link is None else {**args, "link": link}


def staging_calls(
    model: ModelDeployment, files: Files, hub: Mapping[str, Any]
) -> list[tuple[str, dict[str, Any]]]:
    """(operation, args) per adapter and draft, staged like model sources (`hub`: venv and env_file); an
    adapter from the hub is linked at `adapter_path`. "+" is in no name, so the cache keys never clash."""
    calls = [
        stage_call(a.source, a.revision, f"{model.name}+lora+{a.name}", files, hub, adapter_path(model, a))
        for a in model.adapters
    ]
    draft = model.speculative
    if draft is not None and draft.model is not None:
        calls.append(stage_call(draft.model, draft.revision, f"{model.name}+draft", files, hub))
    return calls
