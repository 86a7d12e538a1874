"""Finds a model's architecture: shipped catalog (case-insensitive, quantized variants), a local
directory or config.json, or the Hugging Face Hub (optional dependency, cached, honours HF_TOKEN).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import socket
from dataclasses import replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from vllmctl.catalog.arch import ModelArch, parse_config, parse_config_text
from vllmctl.catalog.quant import QuantConfig
from vllmctl.errors import InputError

# Suffixes of published variants that share the base model's architecture, with the quantization they imply.
_VARIANT_SUFFIXES: tuple[tuple[str, QuantConfig | None], ...] = (
    (r"-quantized\.w8a8$", QuantConfig("w8a8", 8, checkpoint_method="compressed-tensors")),
    (r"-quantized\.w4a16$", QuantConfig("gptq", 4, 128)),
    (r"-fp8(-dynamic)?$", QuantConfig("fp8", 8)),
    (r"-awq$", QuantConfig("awq", 4, 128)),
    (r"-gptq(-int4)?$", QuantConfig("gptq", 4, 128)),
    (r"-gptq-int8$", QuantConfig("gptq", 8, 128)),
    (r"-w8a8$", QuantConfig("w8a8", 8, checkpoint_method="compressed-tensors")),
    (r"-instruct(-\d{4})?$", None),
    (r"-chat$", None),
    (r"-it$", None),
    (r"-base$", None),
)


@cache
def catalog_entries() -> dict[str, dict[str, Any]]:
    """Lower-cased hub id (and alias) → the shipped entry {id, aliases, config}."""
    entries: dict[str, dict[str, Any]] = {}
    folder = resources.files("vllmctl.catalog") / "models"
    for item in folder.iterdir():
        if item.name.endswith(".json"):
            entry = json.loads(item.read_text())
            for key in (entry["id"], *entry.get("aliases", [])):
                entries[key.lower()] = entry
            # Published variants that differ only in a few fields (e.g. Instruct context length).
            for variant, overrides in entry.get("variants", {}).items():
                config = {**entry["config"], **overrides}
                entries[variant.lower()] = {"id": variant, "variant_of": entry["id"], "config": config}
    return entries


def catalog_ids() -> list[str]:
    return sorted({entry["id"] for entry in catalog_entries().values() if "variant_of" not in entry})


def _catalog_arch(key: str) -> ModelArch | None:
    entry = catalog_entries().get(key.lower())
    if entry is None:
        # Allow the model name without, or with another, organisation ("Qwen3-8B", "neuralmagic/...").
        wanted = key.lower().split("/")[-1]
        matches = [e for k, e in catalog_entries().items() if k.split("/")[-1] == wanted]
        entry = matches[0] if matches else None
    return _cached_parse(entry["id"]) if entry else None


@cache
def _cached_parse(hub_id: str) -> ModelArch:
    return parse_config(catalog_entries()[hub_id.lower()]["config"], hub_id)


def resolve_catalog(model: str) -> ModelArch | None:
    """A catalog architecture for a hub id, also for quantized/instruct variants of a catalog model."""
    name = model.strip().removeprefix("hf://")
    found = _catalog_arch(name)
    if found:
        return replace(found, name=model)
    quant: QuantConfig | None = None
    stem = name
    for _ in range(4):
        for pattern, implied in _VARIANT_SUFFIXES:
            new = re.sub(pattern, "", stem, flags=re.IGNORECASE)
            if new != stem:
                stem, quant = new, quant or implied
                break
        else:
            break
        candidates = [stem, stem.replace("/Meta-Llama-", "/Llama-")]
        for candidate in candidates:
            found = _catalog_arch(candidate)
            if found:
                return replace(found, name=model, quantization=quant or found.quantization)
    return None


def _close_ids(name: str, cutoff: float) -> list[str]:
    keys = difflib.get_close_matches(name.lower(), list(catalog_entries()), n=3, cutoff=cutoff)
    return [catalog_entries()[key]["id"] for key in keys]


def _read_local(path: Path) -> ModelArch:
    config_path = path / "config.json" if path.is_dir() else path
    if not config_path.is_file():
        raise InputError(
            f"no config.json at {path}", "pass a model directory containing config.json, or the file"
        )
    return parse_config_text(config_path.read_text(), str(path))


def _require_hub_reachable() -> None:
    """Fails fast when offline instead of letting the hub client retry for half a minute."""
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        raise ConnectionError("HF_HUB_OFFLINE is set")
    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"
    socket.getaddrinfo(host, 443)


def _fetch_from_hub(repo_id: str, revision: str | None) -> ModelArch:
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:
        raise InputError(
            f"model {repo_id!r} is not in the offline catalog and huggingface_hub is not installed",
            "pip install 'vllmctl[hub]', or pass a local model directory or config.json",
        ) from exc
    try:
        # hf_hub_download caches under HF_HOME and reads HF_TOKEN from the environment itself.
        local = hf_hub_download(repo_id, "config.json", revision=revision, local_files_only=True)
    except Exception:  # not cached yet
        local = None
    try:
        if local is None:
            _require_hub_reachable()
            local = hf_hub_download(repo_id, "config.json", revision=revision)
    except Exception as exc:  # the hub raises many types (offline, gated, 404); all mean "cannot read it"
        known = _close_ids(repo_id, 0.5)
        hint = f"did you mean {', '.join(known)}? " if known else ""
        why = (
            "hub unreachable: offline?"
            if isinstance(exc, socket.gaierror | ConnectionError)
            else type(exc).__name__
        )
        raise InputError(
            f"cannot fetch config.json for {repo_id!r} from the Hugging Face Hub ({why})",
            f"{hint}check the id, set HF_TOKEN for gated models, or pass a local directory; offline catalog: "
            + ", ".join(catalog_ids()),
        ) from exc
    return parse_config_text(Path(local).read_text(), repo_id)


def load_arch(model: str, revision: str | None = None, online: bool = True) -> ModelArch:
    """Architecture for a hub id, a local model directory, or a config.json path."""
    path = Path(model).expanduser()
    if model.startswith(("/", ".", "~")) or path.exists():
        return _read_local(path)
    found = resolve_catalog(model)
    if found:
        return found
    if "/" not in model or not online:
        known = _close_ids(model, 0.4)
        hint = f"did you mean {', '.join(known)}? " if known else ""
        raise InputError(
            f"unknown model {model!r}",
            f"{hint}give a hub id (org/name), a local directory or a config.json; offline catalog: "
            + ", ".join(catalog_ids()),
        )
    return _fetch_from_hub(model, revision)


def with_quantization(arch: ModelArch, method: str) -> ModelArch:
    """The common quantized variant of an unquantized model (auto/none keep what the config says)."""
    if method == "auto":
        return arch
    if method == "none":
        return replace(arch, quantization=None)
    if arch.quantization is not None:
        return arch  # a config with its own quantization_config is read as it is
    variants = {
        "fp8": QuantConfig("fp8", 8),
        "w8a8": QuantConfig("w8a8", 8),
        "awq": QuantConfig("awq", 4, 128),
        "gptq": QuantConfig("gptq", 4, 128),
    }
    if method not in variants:
        raise InputError(f"unknown quantization {method!r}", "choose auto, none, fp8, w8a8, awq or gptq")
    return replace(arch, quantization=variants[method])


def load_archs(sources: list[str], online: bool = True) -> dict[str, ModelArch]:
    """Architectures for several model sources (e.g. every model of an inventory), keyed by source."""
    return {source: load_arch(source, online=online) for source in dict.fromkeys(sources)}
