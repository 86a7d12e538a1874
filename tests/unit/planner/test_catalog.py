"""Model lookup (catalog, variants, local files, offline errors) and GPU name matching."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllmctl.catalog.gpus import lookup_gpu, smi_mib_to_cuda_gib
from vllmctl.catalog.loader import load_arch, resolve_catalog, with_quantization
from vllmctl.catalog.params import total_params
from vllmctl.errors import InputError


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("H100-80GB", "H100-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-80GB"),
        ("A100-80GB", "A100-80GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("L40S", "L40S"),
        ("NVIDIA L40S", "L40S"),
        ("L4", "L4"),
        ("RTX 3090", "RTX 3090"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("Tesla T4", "T4"),
        ("h200", "H200"),
    ],
)
def test_gpu_names_match_leniently(name: str, expected: str) -> None:
    assert lookup_gpu(name).name == expected


def test_gpu_memory_as_cuda_reports_it() -> None:
    assert lookup_gpu("H100-80GB").cuda_gib == 79.19
    assert lookup_gpu("L40S").cuda_gib == 44.42
    assert lookup_gpu("RTX 4090").cuda_gib == 23.64  # Linux; Windows/WSL2 reports 23.99
    assert lookup_gpu("RTX 3090").cuda_gib == 23.54
    assert lookup_gpu("H100-80GB").smi_mib == 81559


def test_smi_mib_to_cuda_total() -> None:
    assert smi_mib_to_cuda_gib(81559) == 79.19
    assert smi_mib_to_cuda_gib(46068, "NVIDIA L40S") == 44.42
    assert smi_mib_to_cuda_gib(24564, "NVIDIA GeForce RTX 4090") == 23.64
    assert smi_mib_to_cuda_gib(50000) == pytest.approx(50000 / 1024 * 0.99426, abs=0.01)


def test_the_h200_nvl_is_its_own_card_not_the_sxm_one() -> None:
    assert smi_mib_to_cuda_gib(143771, "NVIDIA H200 NVL") == 139.72
    assert smi_mib_to_cuda_gib(143771, "NVIDIA H200") == 139.81
    assert smi_mib_to_cuda_gib(143771) == 139.81  # an unnamed card of that size: the SXM one, listed first


def test_a_known_card_with_ecc_on_keeps_its_own_reserve() -> None:
    # an RTX 6000 Ada with ECC: nvidia-smi 46068 MiB, CUDA 44.43 GiB (the generic datacenter ratio says 44.73)
    assert smi_mib_to_cuda_gib(46068, "NVIDIA RTX 6000 Ada Generation") == pytest.approx(44.43, abs=0.03)


def test_unknown_gpu_suggests_close_names() -> None:
    with pytest.raises(InputError) as caught:
        lookup_gpu("H101")
    assert "did you mean H100-80GB" in caught.value.hint


def test_catalog_lookup_is_case_insensitive_and_knows_variants() -> None:
    assert resolve_catalog("qwen/QWEN3-8b") is not None
    awq = resolve_catalog("Qwen/Qwen3-14B-AWQ")
    assert awq is not None and awq.quantization is not None and awq.quantization.method == "awq"
    w8a8 = resolve_catalog("neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8")
    assert w8a8 is not None and w8a8.num_layers == 80 and w8a8.quantization is not None
    assert resolve_catalog("Qwen/Qwen9-1T") is None


def test_parsed_families() -> None:
    oss = load_arch("openai/gpt-oss-20b", online=False)
    assert oss.attention_kinds[:4] == ("sliding", "full", "sliding", "full")
    assert oss.sliding_window == 128 and oss.num_experts == 32 and oss.experts_per_token == 4
    assert oss.quantization is not None and oss.quantization.method == "mxfp4"
    assert oss.max_position_embeddings == 131072  # yarn: 4096 x 32
    r1 = load_arch("deepseek-ai/DeepSeek-R1", online=False)
    assert r1.is_mla and r1.kv_lora_rank == 512 and r1.qk_rope_head_dim == 64
    assert r1.first_k_dense == 3 and not r1.is_moe_layer(2) and r1.is_moe_layer(3)
    assert total_params(r1) == pytest.approx(671e9, rel=0.01)
    assert total_params(load_arch("Qwen/Qwen3-30B-A3B", online=False)) == pytest.approx(30.5e9, rel=0.01)
    assert total_params(load_arch("meta-llama/Llama-3.1-8B", online=False)) == 8_030_261_248


def test_local_directory_and_config_path(tmp_path: Path) -> None:
    config = {"hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 1000}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert load_arch(str(tmp_path)).hidden_size == 256
    assert load_arch(str(tmp_path / "config.json")).num_kv_heads == 4


def test_bad_local_config_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        load_arch(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(InputError, match="lacks"):
        load_arch(str(tmp_path))


def test_unknown_model_offline_is_an_input_error_with_hint() -> None:
    with pytest.raises(InputError) as caught:
        load_arch("someorg/not-a-model", online=False)
    assert "offline catalog" in caught.value.hint
    with pytest.raises(InputError, match="unknown model 'Qwen3-8"):
        load_arch("Qwen3-8", online=False)


def test_hub_fetch_failure_is_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InputError, match=r"cannot fetch config\.json"):
        load_arch("someorg/surely-not-cached-model")


def test_quantization_flag_only_applies_to_unquantized_configs() -> None:
    llama = load_arch("meta-llama/Llama-3.1-8B", online=False)
    quant = with_quantization(llama, "awq").quantization
    assert quant is not None and (quant.method, quant.bits, quant.group_size) == ("awq", 4, 128)
    oss = load_arch("openai/gpt-oss-20b", online=False)
    own = with_quantization(oss, "fp8").quantization
    assert own is not None and own.method == "mxfp4"
    assert with_quantization(oss, "none").quantization is None


def test_published_variants_override_context_and_quantization() -> None:
    assert load_arch("Qwen/Qwen2.5-7B-Instruct", online=False).max_position_embeddings == 32768
    assert load_arch("Qwen/Qwen2.5-7B", online=False).max_position_embeddings == 131072
    coder = load_arch("Qwen/Qwen3-Coder-30B-A3B-Instruct", online=False)
    assert coder.max_position_embeddings == 262144 and coder.num_experts == 128
    assert load_arch("meta-llama/Meta-Llama-3-8B-Instruct", online=False).max_position_embeddings == 8192
    fp8 = load_arch("meta-llama/Llama-3.1-405B-Instruct-FP8", online=False).quantization
    assert fp8 is not None and not fp8.attention_quantized and fp8.unquantized_mlp_layers == (0, 125)


def test_hub_config_is_read_from_the_local_cache_when_offline(tmp_path: Path) -> None:
    import subprocess
    import sys

    repo = tmp_path / "hub" / "models--someorg--cached-model"
    snapshot = repo / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a" * 40)
    config = {"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 1000}
    config["max_position_embeddings"] = 2048  # no known class: a guessed length could be refused (#49)
    (snapshot / "config.json").write_text(json.dumps(config))
    env = {"HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "NO_COLOR": "1"}
    argv = [
        sys.executable,
        "-m",
        "vllmctl",
        "estimate",
        "--model",
        "someorg/cached-model",
        "--gpu",
        "T4",
        "--json",
    ]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["param_count"] > 0


def test_only_a_listed_mlp_or_its_projections_count_as_an_unquantized_mlp_layer() -> None:
    from vllmctl.catalog.quant import parse_quantization

    raw = {
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
        "modules_to_not_convert": [
            "model.layers.0.mlp",  # a dense first layer kept in bf16
            "model.layers.1.mlp.down_proj",
            "model.layers.2.mlp.gate",  # an MoE router: always full precision, says nothing of the experts
            "model.layers.3.mlp.shared_expert_gate",
            "lm_head",
        ],
    }
    quant = parse_quantization(raw)
    assert quant is not None and quant.unquantized_mlp_layers == (0, 1)
