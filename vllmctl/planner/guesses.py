"""Guessed config fields (catalog/guessed.py) in a plan: each named in the reasons and the JSON, and the plan
refused when another value the field plausibly takes moves a memory figure by more than the error band.
"""

from __future__ import annotations

from dataclasses import replace

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.class_defaults import defaults_table
from vllmctl.catalog.gpus import GpuModel
from vllmctl.catalog.guessed import HOW
from vllmctl.errors import InputError
from vllmctl.planner.margin import margin
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.vllm_memory import MemoryBreakdown, vllm_memory

FIGURES = {
    "weights_gib": "the weights",
    "activation_peak_gib": "the activation peak",
    "available_kv_cache_gib": "the available KV cache",
    "needed_kv_gib": "the KV cache one full-length request needs",
}
# A context length most current releases publish (Qwen2.5, Qwen3: 32768; Llama 3.1: 131072 is larger still).
OTHER_CONTEXT = 32768


def alternatives(arch: ModelArch, field: str, value: int) -> tuple[int, ...]:
    """Other values the field takes in published checkpoints, at the far side of the guess: one KV head (so
    every count between lies between the two), the 8/3 to 5.5 x hidden of dense MLPs, a quarter to 3.5 x
    hidden of MoE experts, a long context."""
    hidden = arch.hidden_size
    found = {
        "num_key_value_heads": (1,),
        "intermediate_size": (8 * hidden // 3, 11 * hidden // 2),
        "moe_intermediate_size": (hidden // 4, 7 * hidden // 2),
        "max_position_embeddings": (OTHER_CONTEXT,),
    }.get(field, ())
    return tuple(v for v in found if v > 0 and v != value)


def _unknown(arch: ModelArch) -> str:
    version = defaults_table()["transformers_version"]
    return (
        f"model_type {arch.model_type!r} has no config class in vllmctl's table (transformers {version}) "
        "nor in an installed transformers"
    )


def guess_reasons(arch: ModelArch) -> list[str]:
    """One line per guessed field: what was used and how it was made."""
    return [
        f"guessed {field} = {value} ({HOW.get(field, 'a default')}): {arch.name} does not give it and "
        + _unknown(arch)
        for field, value in arch.guessed
    ]


def _with(
    arch: ModelArch, settings: VllmSettings, field: str, value: int, length_given: bool
) -> tuple[ModelArch, VllmSettings]:
    if field == "num_key_value_heads":
        return replace(arch, num_kv_heads=value), settings
    if field == "intermediate_size":
        return replace(arch, intermediate_size=value), settings
    if field == "moe_intermediate_size":
        return replace(arch, moe_intermediate_size=value), settings
    if field == "max_position_embeddings" and not length_given:
        return replace(arch, max_position_embeddings=value), replace(settings, max_model_len=value)
    return arch, settings


def _moved(base: MemoryBreakdown, other: MemoryBreakdown) -> tuple[str, float]:
    key = max(FIGURES, key=lambda k: abs(float(getattr(other, k)) - float(getattr(base, k))))
    return key, abs(float(getattr(other, key)) - float(getattr(base, key)))


def check_guesses(arch: ModelArch, gpu: GpuModel, settings: VllmSettings, length_given: bool) -> None:
    """Raises InputError naming the first guessed field whose other values move a figure beyond the band
    (a context guess moves nothing when max_model_len is given)."""
    if not arch.guessed:
        return
    base = vllm_memory(arch, gpu, settings)
    band = margin(base).band_gib
    for field, value in arch.guessed:
        for other in alternatives(arch, field, value):
            changed, changed_settings = _with(arch, settings, field, value=other, length_given=length_given)
            if changed == arch and changed_settings == settings:
                continue
            key, moved = _moved(base, vllm_memory(changed, gpu, changed_settings))
            if moved <= band:
                continue
            also = " or set max_model_len" if field == "max_position_embeddings" else ""
            how = HOW.get(field, "a default")
            raise InputError(
                f"{arch.name}: config.json does not give {field} and {_unknown(arch)}, so the planner "
                f"guessed {value} ({how}); "
                f"at {other} instead, {FIGURES[key]} would move by {moved:.2f} GiB, more than the "
                f"prediction's error band ({band:.2f} GiB)",
                f"add {field} to the config.json of {arch.name} (the value the model's code uses){also}, or "
                "install a transformers release that has this model type's config class",
            )
