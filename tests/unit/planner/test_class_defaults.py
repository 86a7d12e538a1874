"""Configs read as transformers reads them (class defaults, issue #39), and Gemma 3's memory traits."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from vllmctl.catalog.arch import parse_config
from vllmctl.catalog.class_defaults import defaults_table, with_class_defaults
from vllmctl.catalog.gpus import lookup_gpu
from vllmctl.catalog.loader import catalog_entries, load_arch
from vllmctl.cli import main
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.vllm_memory import vllm_memory

REPO = Path(__file__).resolve().parents[3]
GEMMA3 = ("1b", "4b", "12b", "27b")


def published(size: str) -> dict[str, Any]:
    """The published config.json of google/gemma-3-<size>-it, as the catalog keeps it (with its source)."""
    config: dict[str, Any] = copy.deepcopy(catalog_entries()[f"google/gemma-3-{size}-it"]["config"])
    return config


def test_the_table_is_what_transformers_classes_say() -> None:
    """Regenerates config_defaults.json from the installed transformers and fails when they differ."""
    pytest.importorskip(
        "transformers", reason="transformers is not installed: the table cannot be regenerated"
    )
    spec = importlib.util.spec_from_file_location("gen", REPO / "scripts" / "gen_config_defaults.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    fresh = gen.generate()
    stored = defaults_table()
    assert fresh["model_types"] == stored["model_types"], (
        f"config_defaults.json (transformers {stored['transformers_version']}) drifted from transformers "
        f"{fresh['transformers_version']}: run python scripts/gen_config_defaults.py"
    )


def test_a_left_out_field_takes_the_class_default_not_a_guess() -> None:
    config = published("1b")
    del config["head_dim"], config["vocab_size"]
    arch = parse_config(config, "gemma-3-1b without head_dim")
    assert arch.head_dim == 256  # Gemma3TextConfig's default, not hidden 1152 / 4 heads = 288
    assert arch.vocab_size == 262208  # the class default (the published file says 262144)


def test_the_sparse_published_text_config_reads_as_transformers_reads_it() -> None:
    arch = parse_config(published("4b"), "gemma-3-4b-it")
    assert (arch.num_heads, arch.num_kv_heads, arch.head_dim, arch.vocab_size) == (8, 4, 256, 262208)
    assert arch.tie_embeddings and arch.max_position_embeddings == 131072
    assert arch.model_type == "gemma3_text" and arch.architecture == "Gemma3ForConditionalGeneration"


def test_a_key_the_config_sets_to_null_keeps_its_null() -> None:
    mistral = catalog_entries()["mistralai/mistral-7b-instruct-v0.2"]["config"]
    assert mistral["sliding_window"] is None
    assert parse_config(mistral).sliding_window == 0
    without = {k: v for k, v in mistral.items() if k != "sliding_window"}
    assert parse_config(without).sliding_window == 4096  # MistralConfig's default


def test_nested_configs_take_their_parents_sub_config_class() -> None:
    filled = with_class_defaults(
        {"model_type": "gemma3", "text_config": {}, "vision_config": {"image_size": 896}}
    )
    assert filled["text_config"]["model_type"] == "gemma3_text"
    assert filled["text_config"]["num_attention_heads"] == 8
    assert filled["vision_config"]["model_type"] == "siglip_vision_model"
    assert filled["vision_config"]["image_size"] == 896  # the file's value wins
    assert with_class_defaults({"model_type": "no-such-model", "x": 1}) == {
        "model_type": "no-such-model",
        "x": 1,
    }


def test_the_top_levels_tie_word_embeddings_governs_the_text_model() -> None:
    arch = load_arch("Qwen/Qwen3-VL-30B-A3B-Instruct")
    assert arch.tie_embeddings is False  # the file says false at the top; the text class defaults to true


@pytest.mark.parametrize(
    ("size", "layers", "full"), [("1b", 26, 4), ("4b", 34, 5), ("12b", 48, 8), ("27b", 62, 10)]
)
def test_gemma3_interleaves_five_local_layers_with_one_global(size: str, layers: int, full: int) -> None:
    arch = parse_config(published(size))
    kinds = arch.attention_kinds
    assert len(kinds) == layers and kinds.count("full") == full
    assert kinds[:6] == ("sliding",) * 5 + ("full",)
    assert arch.sliding_window == (512 if size == "1b" else 1024)


def test_gemma3_vision_tower_and_ropes() -> None:
    arch = parse_config(published("27b"))
    vision = arch.vision
    assert vision is not None and vision.depth == 27 and vision.hidden_size == 1152
    assert vision.max_patches == 4096 and vision.max_patches // vision.spatial_merge_size**2 == 256
    assert vision.linear_projector and vision.out_hidden_size == 5376
    assert arch.rope_positions == (131072, 131072 * 8)  # local rope, and the global one x its linear factor
    assert parse_config(published("1b")).vision is None


@pytest.mark.parametrize(
    ("size", "version", "logged"),
    [
        ("1b", (0, 8, 2), 1.9134),  # vllm#14696 (a fine-tune of gemma-3-1b-pt: the same shapes)
        ("4b", (0, 10, 0), 8.58),  # vllm PR #21489
    ],
)
def test_weights_within_one_percent_of_public_starts(
    size: str, version: tuple[int, int, int], logged: float
) -> None:
    settings = VllmSettings(version, 1, 1, 0.9, 8192, 256, 8192)
    memory = vllm_memory(parse_config(published(size)), lookup_gpu("H100-80GB"), settings)
    assert abs(memory.weights_gib / logged - 1) < 0.01


@pytest.mark.parametrize("size", GEMMA3)
def test_estimate_accepts_each_published_config_json(
    size: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(published(size)))
    gpus = ["--gpu", "H100-80GB"] + (["--tp", "2"] if size == "27b" else [])
    assert main(["estimate", "--model", str(path), *gpus, "--max-model-len", "32768", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fits"] is True and data["kv_cache_tokens"] > 32768


def test_plan_accepts_the_published_configs_in_an_inventory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    models = []
    for size in GEMMA3:
        folder = tmp_path / f"gemma-3-{size}-it"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(published(size)))
        models.append(f"  gemma-{size}:\n    source: {folder}\n    hosts: h100-0{GEMMA3.index(size)}\n")
    hosts = "".join(
        f"  h100-0{i}: {{address: 10.0.0.{i + 1}, gpus: {{model: H100-80GB, count: 2}}}}\n" for i in range(4)
    )
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(f"vllmctl: 1\nhosts:\n{hosts}models:\n{''.join(models)}")
    assert main(["plan", str(inventory), "--json", "--offline"]) == 0
    entries = json.loads(capsys.readouterr().out)["entries"]
    assert sorted(e["model"] for e in entries) == [f"gemma-{size}" for size in sorted(GEMMA3)]
    assert all(e["plan"]["memory"]["fits"] for e in entries)
