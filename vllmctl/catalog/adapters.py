"""LoRA adapter configs (PEFT's adapter_config.json): the rank max_lora_rank is chosen from, and the
targeted modules, read from a local adapter folder or the hub's cache (fetched when online)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from vllmctl.errors import InputError
from vllmctl.inventory.model import ModelDeployment

CONFIG_FILE = "adapter_config.json"


@dataclass(frozen=True)
class AdapterConfig:
    rank: int
    target_modules: tuple[str, ...]


def parse_adapter_config(text: str, where: str) -> AdapterConfig:
    """`r` and `target_modules` (a list, or PEFT's one regex string kept as one entry)."""
    try:
        raw = json.loads(text)
        rank = raw["r"]
        targets = raw.get("target_modules") or ()
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"{where}: not a LoRA adapter_config.json with an integer `r` ({type(exc).__name__})",
            "point the adapter's source at a PEFT LoRA adapter folder",
        ) from exc
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise InputError(
            f"{where}: LoRA rank r={rank!r} is not a positive integer", "fix adapter_config.json"
        )
    modules = (targets,) if isinstance(targets, str) else tuple(str(t) for t in targets)
    return AdapterConfig(rank, modules)


def _hub_file(repo_id: str, revision: str | None, online: bool) -> Path:
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:
        raise InputError(
            f"adapter {repo_id!r}: huggingface_hub is not installed", "pip install 'vllmctl[hub]'"
        ) from exc
    try:
        return Path(hf_hub_download(repo_id, CONFIG_FILE, revision=revision, local_files_only=not online))
    except Exception as exc:  # the hub raises many types (offline, gated, 404); all mean "cannot read it"
        raise InputError(
            f"cannot read {CONFIG_FILE} of adapter {repo_id!r} ({type(exc).__name__})",
            "check the id and revision, set HF_TOKEN for gated adapters, or set max_lora_rank in engine_args",
        ) from exc


AdapterConfigs = Mapping[str, AdapterConfig]


def load_adapter_configs(models: Iterable[ModelDeployment], online: bool) -> dict[str, AdapterConfig]:
    """Every declared adapter's config by source, where it can be read here (the others are left out: the
    planner then assumes vLLM's default rank)."""
    found: dict[str, AdapterConfig] = {}
    for adapter in (a for m in models for a in m.adapters):
        if adapter.source not in found:
            try:
                found[adapter.source] = load_adapter_config(adapter.source, adapter.revision, online)
            except InputError:
                continue
    return found


def load_adapter_config(source: str, revision: str | None = None, online: bool = True) -> AdapterConfig:
    """The adapter's config from its local folder, or from the hub (the local cache first)."""
    if source.startswith("/"):
        path = Path(source) / CONFIG_FILE
        if not path.is_file():
            raise InputError(f"no {CONFIG_FILE} in adapter folder {source}", "point source at a LoRA adapter")
        return parse_adapter_config(path.read_text(), str(path))
    return parse_adapter_config(_hub_file(source, revision, online).read_text(), f"{source}/{CONFIG_FILE}")
