"""The tiny Llama: the config vLLM needs, weights that match it, a working tokenizer, stable bytes."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from vllmctl.errors import VllmctlError
from vllmctl.lab import tinymodel


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tinymodel.ensure_tiny_model(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Tokenizer:
    return Tokenizer.from_file(str(model_dir / "tokenizer.json"))


def test_config_is_a_llama_that_vllm_cpu_accepts(model_dir: Path) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["head_dim"] == 64  # head_dim 16 fails: "Unsupported CPU attention configuration"
    assert config["num_attention_heads"] * config["head_dim"] == config["hidden_size"] == 256
    assert config["num_attention_heads"] % config["num_key_value_heads"] == 0
    assert (config["num_hidden_layers"], config["vocab_size"]) == (2, 512)
    assert config["max_position_embeddings"] == 2048
    assert config["tie_word_embeddings"] is False
    assert config["torch_dtype"] == "float32"


def test_weights_match_the_config_in_shape_and_dtype(model_dir: Path) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    weights = load_file(str(model_dir / "model.safetensors"))
    assert {name: array.shape for name, array in weights.items()} == tinymodel.weight_shapes(config)
    assert weights["model.layers.1.self_attn.k_proj.weight"].shape == (2 * 64, 256)
    assert weights["lm_head.weight"].shape == (512, 256)
    assert all(array.dtype == np.float32 and np.isfinite(array).all() for array in weights.values())
    assert np.all(weights["model.norm.weight"] == 1.0)
    assert 0.015 < float(weights["model.embed_tokens.weight"].std()) < 0.025


def test_tokenizer_has_the_full_vocabulary_and_the_config_special_ids(
    model_dir: Path, tokenizer: Tokenizer
) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    assert tokenizer.get_vocab_size() == config["vocab_size"]
    assert tokenizer.token_to_id("<s>") == config["bos_token_id"]
    assert tokenizer.token_to_id("</s>") == config["eos_token_id"]
    assert tokenizer.encode("hello").ids[0] == config["bos_token_id"]


def test_tokenizer_merges_common_words_from_its_corpus(tokenizer: Tokenizer) -> None:
    text = "The planner estimates the KV cache"
    assert len(tokenizer.encode(text).ids) < len(text.encode()) / 2


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=80).filter(lambda text: not any(s in text for s in tinymodel.SPECIAL_TOKENS)))
def test_tokenizer_round_trips_any_text_without_special_tokens(tokenizer: Tokenizer, text: str) -> None:
    assert tokenizer.decode(tokenizer.encode(text).ids) == text


def test_special_token_text_is_read_as_the_special_token(tokenizer: Tokenizer) -> None:
    assert tokenizer.encode("a</s>", add_special_tokens=False).ids[-1] == tokenizer.token_to_id("</s>")


def test_chat_template_renders_roles_and_generation_prompt(model_dir: Path) -> None:
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    template = jinja2.Environment().from_string(config["chat_template"])
    rendered = template.render(
        messages=[{"role": "user", "content": "Hi"}], add_generation_prompt=True, bos_token="<s>"
    )
    assert rendered == "<s>user: Hi\nassistant:"
    assert config["bos_token"] == "<s>" and config["eos_token"] == "</s>"


def test_build_is_cached_and_leaves_no_staging_dirs(tmp_path: Path) -> None:
    first = tinymodel.ensure_tiny_model(tmp_path)
    weights = first / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert tinymodel.ensure_tiny_model(tmp_path) == first
    assert weights.stat().st_mtime_ns == before
    assert [p.name for p in tmp_path.iterdir()] == [first.name]
    assert first.name == f"tiny-llama-{tinymodel.content_key()}"


def test_two_builds_give_the_same_digest(tmp_path: Path, model_dir: Path) -> None:
    other = tinymodel.ensure_tiny_model(tmp_path)
    assert tinymodel.tiny_model_digest(other) == tinymodel.tiny_model_digest(model_dir)
    (other / "config.json").write_text("{}")
    assert tinymodel.tiny_model_digest(other) != tinymodel.tiny_model_digest(model_dir)


def test_an_incomplete_cache_entry_is_rebuilt(tmp_path: Path, model_dir: Path) -> None:
    built = tinymodel.ensure_tiny_model(tmp_path)
    (built / "tokenizer.json").unlink()
    (built / "config.json").write_text("{}")
    rebuilt = tinymodel.ensure_tiny_model(tmp_path)
    assert tinymodel.tiny_model_digest(rebuilt) == tinymodel.tiny_model_digest(model_dir)


def test_cache_root_follows_vllmctl_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VLLMCTL_CACHE", str(tmp_path))
    assert tinymodel.default_models_dir() == tmp_path / "lab" / "models"
    assert tinymodel.ensure_tiny_model().parent == tmp_path / "lab" / "models"
    monkeypatch.delenv("VLLMCTL_CACHE")
    assert tinymodel.default_models_dir() == Path("/var/cache/vllmctl/lab/models")


def test_an_unusable_cache_dir_is_a_user_error_with_a_hint(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(VllmctlError) as caught:
        tinymodel.ensure_tiny_model(blocker / "models")
    assert "VLLMCTL_CACHE" in caught.value.hint
