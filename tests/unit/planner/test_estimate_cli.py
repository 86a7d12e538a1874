"""`vllmctl estimate` driven through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllmctl.cli import main

GIB = 1 << 30
FIELDS = (
    "weights_gib",
    "activation_peak_gib",
    "non_torch_gib",
    "cudagraph_gib",
    "available_kv_cache_gib",
    "kv_cache_tokens",
    "max_concurrency",
    "fits",
)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> dict[str, object]:
    assert main(["estimate", *argv, "--json"]) == code
    data: dict[str, object] = json.loads(capsys.readouterr().out)
    return data


def test_json_has_every_figure(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "--model", "meta-llama/Llama-3.1-8B", "--gpu", "NVIDIA H100 80GB HBM3")
    for field in FIELDS:
        assert field in data
    assert data["fits"] is True
    assert data["total_gib"] == 79.19
    assert data["kv_bytes_per_token"] == 131072.0
    assert isinstance(data["reasons"], list) and data["reasons"]


def test_not_fitting_reports_largest_length_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "--model", "Qwen/Qwen3-8B", "--gpu", "L4", code=1)
    assert data["fits"] is False
    assert [r["rule"] for r in data["refusals"]] == ["kv-cache-holds-one-request"]  # type: ignore[attr-defined]
    assert isinstance(data["max_model_len_that_fits"], int) and 0 < data["max_model_len_that_fits"] < 40960


def test_kv_cache_memory_and_gpu_memory_flags(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(
        capsys, "--model", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--gpu-memory", "15.99GiB",
        "--kv-cache-memory", "7911991092", "--max-model-len", "32768",
    )  # fmt: skip
    assert data["available_kv_cache_gib"] == round(7911991092 / GIB, 4)
    assert data["kv_cache_tokens"] == 7911991092 // (16 * 57344) * 16
    assert data["total_gib"] == 15.99


def test_quantization_and_tp_flags(capsys: pytest.CaptureFixture[str]) -> None:
    bf16 = run_json(capsys, "--model", "meta-llama/Llama-3.3-70B-Instruct", "--gpu", "H100-80GB", "--tp", "4")
    awq_id = "meta-llama/Llama-3.3-70B-Instruct-AWQ"
    awq = run_json(capsys, "--model", awq_id, "--gpu", "H100-80GB", "--tp", "4")
    online = run_json(
        capsys, "--model", "meta-llama/Llama-3.3-70B-Instruct", "--gpu", "H100-80GB", "--tp", "4",
        "--quantization", "fp8",
    )  # fmt: skip
    assert float(str(awq["weights_gib"])) < float(str(bf16["weights_gib"])) / 3
    assert float(str(online["weights_gib"])) < float(str(bf16["weights_gib"])) * 0.55
    assert (awq["quantization"], online["quantization"]) == ("awq", "fp8")
    assert bf16["tensor_parallel_size"] == 4


def test_version_changes_default_util_and_graph_accounting(capsys: pytest.CaptureFixture[str]) -> None:
    old = run_json(capsys, "--model", "Qwen/Qwen3-8B", "--gpu", "H100", "--engine-version", "0.19.1")
    new = run_json(capsys, "--model", "Qwen/Qwen3-8B", "--gpu", "H100", "--engine-version", "0.21.0")
    assert (old["gpu_memory_utilization"], new["gpu_memory_utilization"]) == (0.9, 0.92)
    assert (old["cudagraph_in_budget"], new["cudagraph_in_budget"]) == (False, True)


def test_sglang_engine(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--engine", "sglang")
    assert data["mem_fraction_static"] == 0.835
    assert data["engine"] == "sglang" and data["activation_peak_gib"] is None


def test_human_output_is_a_table_and_reasons(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    assert main(["estimate", "--model", "Qwen/Qwen3-8B", "--gpu", "L4"]) == 1
    captured = capsys.readouterr()
    assert "available_kv_cache_gib" in captured.out and "max_model_len_that_fits" in captured.out
    assert "- requested = 22.03 GiB x 0.9" in captured.out
    assert "To serve at least one request with the models's max seq len (40960)" in captured.err
    assert "max_model_len at most" in captured.err


def test_local_config_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = {"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 1000,
              "max_position_embeddings": 2048}  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    data = run_json(capsys, "--model", str(path), "--gpu", "T4")
    assert data["max_model_len"] == 2048 and data["fits"] is True


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "nope/nope-7b", "--gpu", "H100"], "cannot fetch config.json for 'nope/nope-7b'"),
        (["--model", "nope-7b", "--gpu", "H100"], "unknown model 'nope-7b'"),
        (["--model", "Qwen/Qwen3-8B", "--gpu", "H101"], "did you mean H100-80GB"),
        (
            ["--model", "Qwen/Qwen3-8B", "--gpu", "H100", "--gpu-memory-utilization", "1.5"],
            "GPU memory utilization must be less than 1.0. Got 1.5.",
        ),
        (
            ["--model", "Qwen/Qwen3-8B", "--gpu", "H100", "--tp", "3"],
            "must be divisible by tensor parallel size (3)",
        ),
        (
            ["--model", "meta-llama/Llama-3.3-70B-Instruct", "--gpu", "H100", "--quantization", "awq"],
            "Cannot find the config file for awq",
        ),
        (["--model", "Qwen/Qwen3-8B", "--gpu", "H100", "--tp", "0"], "at least 1"),
        (
            ["--model", "Qwen/Qwen3-8B", "--gpu", "H100", "--max-model-len", "65536"],
            "greater than the derived max_model_len (max_position_embeddings=40960",
        ),
        (["--model", "Qwen/Qwen3-8B", "--gpu-memory", "lots"], "cannot read 'lots'"),
        (
            ["--model", "Qwen/Qwen3-8B", "--gpu", "H100", "--engine-version", "latest"],
            "cannot read engine version",
        ),
    ],
)
def test_bad_input_exits_2_with_a_hint(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["estimate", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "hint:" in err


def test_a_gpu_given_by_memory_takes_its_compute_capability(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--model", "openai/gpt-oss-20b", "--gpu-memory", "22GiB"]
    hopper = run_json(capsys, *argv)
    assert hopper["refusals"] == []
    turing = run_json(capsys, *argv, "--compute-capability", "7.5", code=1)
    rules = [r["rule"] for r in turing["refusals"]]  # type: ignore[union-attr]
    assert "quantization-min-capability" in rules


def test_the_v2_runner_flags_show_a_cold_first_start_and_a_warm_restart(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = (
        "--model",
        "Qwen/Qwen3-8B",
        "--gpu",
        "RTX 4090",
        "--engine-version",
        "0.27.1",
        "--max-model-len",
        "4096",
    )
    cold = run_json(capsys, *base)
    warm = run_json(capsys, *base, "--compile-cache", "warm")
    v1 = run_json(capsys, *base, "--model-runner", "v1")
    assert float(warm["available_kv_cache_gib"]) - float(cold["available_kv_cache_gib"]) == pytest.approx(0.9)  # type: ignore[arg-type]
    assert any("model runner: V2" in line for line in cold["reasons"])  # type: ignore[union-attr]
    # the V1 runner compiles cold too from 0.18
    assert any(line.startswith("model runner: V1; a cold torch.compile") for line in v1["reasons"])  # type: ignore[union-attr]
    assert v1["cudagraph_in_budget"] is True and cold["cudagraph_in_budget"] is False


def test_a_model_newer_than_the_engine_release_is_refused_as_the_users_choice(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["estimate", "--model", "Qwen/Qwen3-8B", "--gpu", "H100", "--engine-version", "0.8.3"]) == 2
    err = capsys.readouterr().err
    assert "Model architectures ['Qwen3ForCausalLM'] are not supported for now." in err
    assert "engine version 0.8.4 or later" in err
    assert main(["estimate", "--model", "Qwen/Qwen3-8B", "--gpu", "H100", "--engine-version", "0.8.4"]) == 0


def test_weights_say_how_much_is_the_allocators_block_rounding(capsys: pytest.CaptureFixture[str]) -> None:
    qwen = run_json(capsys, "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "A10G")
    llama = run_json(capsys, "--model", "meta-llama/Llama-3.1-8B", "--gpu", "A10G", "--max-model-len", "8192")
    # Qwen2.5-7B's 259 and 129.5 MiB MLP tensors keep 1 and 0.5 MiB of their segments; Llama's are whole
    assert qwen["allocator_blocks_gib"] == pytest.approx(0.0557, abs=0.0005)
    assert "0.06 GiB of it the CUDA caching allocator's block rounding" in str(qwen["reasons"])
    assert llama["allocator_blocks_gib"] == 0.0
    assert "allocator" not in str(llama["reasons"])


def test_v0_default_step_budget_holds_a_whole_prompt(capsys: pytest.CaptureFixture[str]) -> None:
    # vllm#10517's command: 0.6.4 (V0, no chunked prefill below 32K) defaults to max(max_model_len, 2048)
    data = run_json(
        capsys, "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "RTX 3090",
        "--engine-version", "0.6.4", "--max-model-len", "20000",
    )  # fmt: skip
    assert data["fits"] is True
    assert data["max_num_batched_tokens"] == 20000


def test_swap_space_without_host_memory_is_named_as_unchecked(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100-80GB", "--tp", "8")
    argv += ("--swap-space", "400")
    data = run_json(capsys, *argv)
    [warning] = data["warnings"]  # type: ignore[misc]
    assert warning.startswith("swap-space-within-host-memory could not be checked: host memory unknown")
    assert run_json(capsys, *argv, "--host-memory", "8192GiB")["warnings"] == []
    assert main(["estimate", *argv, "--host-memory", "1024GiB"]) == 2
    assert "Too large swap space" in capsys.readouterr().err
    assert run_json(capsys, *argv[:-2])["warnings"] == []  # the default 4 GiB per GPU is the planner's own


def test_the_mxfp4_backend_flag_says_which_kernels_the_venv_runs(capsys: pytest.CaptureFixture[str]) -> None:
    # gpt-oss-120b on one H100 at 0.11.0: 64.38 GiB logged from the vllm-openai image (triton_kernels, llm-d),
    # 65.97 from a pip install (Marlin, vllm#23278)
    argv = ("--model", "openai/gpt-oss-120b", "--gpu", "H100-80GB", "--max-model-len", "16000")
    marlin = run_json(capsys, *argv, code=1)["weights_gib"]
    triton = run_json(capsys, *argv, "--mxfp4-backend", "triton", code=1)["weights_gib"]
    assert marlin == pytest.approx(65.96, abs=0.01) and triton == pytest.approx(64.61, abs=0.01)
    assert abs(triton - 64.38) / 64.38 < 0.005
    said = run_json(capsys, *argv, "--mxfp4-backend", "triton", code=1)["reasons"]
    assert any("padded to (64, 256) for the Triton" in r for r in said)  # type: ignore[union-attr]
    assert run_json(capsys, *argv, "--mxfp4-backend", "marlin", code=1)["weights_gib"] == marlin


def test_a_video_model_under_vllms_default_limits_is_refused_with_the_fix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the cited 0.11.0 start (search-index id 42514581982): no --limit-mm-per-prompt, so vLLM profiled one
    # video and logged 2.31 GiB of KV; an image profile would promise 4.77 (+106 %)
    argv = ["estimate", "--model", "Qwen/Qwen3-VL-30B-A3B-Instruct", "--gpu", "RTX 3090", "--tp", "4"]
    argv += ["--max-model-len", "65536", "--gpu-memory-utilization", "0.9", "--engine-version", "0.11.0"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "vLLM's default limit_mm_per_prompt" in err and "video" in err
    assert "--images-per-prompt N --videos-per-prompt 0" in err and "--limit-mm-per-prompt" in err
    given = run_json(capsys, *argv[1:], "--images-per-prompt", "1")  # limits given: today's path
    assert given["available_kv_cache_gib"] == pytest.approx(4.77, abs=0.01)
    assert main(["estimate", "--model", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "H100-80GB"]) == 2
    capsys.readouterr()
    image_only = run_json(capsys, "--model", "google/gemma-3-4b-it", "--gpu", "H100-80GB")
    assert image_only["fits"] is True  # no video modality: vLLM profiles images, as modelled
