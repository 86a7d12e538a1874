"""The lab's vLLM stand-in without Ray: its command line, the starts it refuses (and in vLLM's words where
vLLM refuses them too), its answers, and its wheel, built with pip."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
from standin_wheel import SOURCE, ensure_standin_wheel

from vllmctl.bench.sse import SseParser, classify
from vllmctl.status.metrics import parse_metrics


def load_answers() -> ModuleType:
    """By file path: putting the stand-in's `src` on sys.path would make `vllm` importable in this process."""
    spec = importlib.util.spec_from_file_location(
        "standin_answers", SOURCE / "src" / "vllm_ray_standin" / "answers.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


answers = load_answers()
UNIT_ARGV = [
    "--model", "/var/tmp/m/tiny", "--served-model-name", "tiny", "--host", "0.0.0.0", "--port", "8000",
    "--max-model-len", "256", "--gpu-memory-utilization", "0.92", "--enable-prefix-caching",
    "--distributed-executor-backend", "ray", "--tensor-parallel-size", "8", "--pipeline-parallel-size", "2",
]  # fmt: skip


def test_it_reads_the_flags_it_knows_and_ignores_the_others() -> None:
    options = answers.parse(UNIT_ARGV)
    assert options == answers.Options(
        model="/var/tmp/m/tiny",
        served_names=("tiny",),
        host="0.0.0.0",
        port=8000,
        backend="ray",
        tp=8,
        pp=2,
        max_model_len=256,
    )
    assert answers.parse(["--model", "/m"]).served_names == ("/m",)  # vLLM serves the path by default


def test_it_refuses_any_backend_but_ray() -> None:
    for argv in (["--model", "/m"], ["--model", "/m", "--distributed-executor-backend", "mp"]):
        with pytest.raises(answers.Refused, match="serves only over Ray"):
            answers.check_start(answers.parse(argv), {"max_position_embeddings": 2048})


def test_it_refuses_a_max_model_len_above_the_models_positions_as_vllm_does() -> None:
    options = answers.parse([*UNIT_ARGV, "--max-model-len", "4096"])
    with pytest.raises(answers.Refused) as refused:
        answers.check_start(options, {"max_position_embeddings": 2048})
    assert str(refused.value) == (
        "ValueError: User-specified max_model_len (4096) is greater than the derived max_model_len "
        "(max_position_embeddings=2048 in model's config.json)."
    )
    answers.check_start(
        answers.parse([*UNIT_ARGV, "--max-model-len", "2048"]), {"max_position_embeddings": 2048}
    )


def test_a_completion_names_every_stage_host_and_counts_its_tokens() -> None:
    options = answers.parse(UNIT_ARGV)
    stages = [answers.Stage("node-a", True), answers.Stage("node-b", True)]
    body = answers.completion(options, stages, {"model": "tiny", "prompt": "one two three"}, 7, 100)
    [choice] = body["choices"]
    assert choice["text"] == (
        " vLLM stand-in (vllmctl lab) answering for tiny over Ray, PP 2 x TP 8, "
        "pipeline stages on node-a, node-b."
    )
    assert (body["id"], body["object"], body["model"]) == ("cmpl-standin-7", "text_completion", "tiny")
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 19, "total_tokens": 22}
    assert [m["id"] for m in answers.models_list(options, 100)["data"]] == ["tiny"]


def test_its_metrics_read_as_vllm_metrics() -> None:
    parsed = parse_metrics(answers.metrics_text(answers.parse(UNIT_ARGV), 2, 6, 34))
    tiny = parsed["tiny"]
    assert (tiny.engine, tiny.requests_running, tiny.kv_usage) == ("vllm", 0.0, 0.0)
    assert (tiny.requests_succeeded_total, tiny.prompt_tokens_total, tiny.generation_tokens_total) == (
        2,
        6,
        34,
    )


def test_the_entry_point_exits_non_zero_with_its_reason(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 2048}')
    env = {**os.environ, "PYTHONPATH": str(SOURCE / "src")}
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tmp_path)]
    for extra, reason in (
        ([], "serves only over Ray"),
        (
            ["--distributed-executor-backend", "ray", "--max-model-len", "4096"],
            "User-specified max_model_len",
        ),
    ):
        done = subprocess.run([*argv, *extra], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 1, done.stderr
        assert done.stderr.startswith("vLLM stand-in (vllmctl lab): ") and reason in done.stderr


@pytest.mark.slow
def test_its_wheel_is_built_by_pip_once_per_source(tmp_path: Path) -> None:
    version, wheel = ensure_standin_wheel(tmp_path)
    assert (version, wheel.name) == ("0.32.0.post1", "vllm_ray_standin-0.32.0.post1-py3-none-any.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "vllm/entrypoints/openai/api_server.py" in names and "vllm_ray_standin/serve.py" in names
    built_at = wheel.stat().st_mtime_ns
    assert ensure_standin_wheel(tmp_path) == (version, wheel) and wheel.stat().st_mtime_ns == built_at


def test_a_streamed_completion_reads_as_vllm_stream_to_the_smoke_benchmark() -> None:
    options = answers.parse(UNIT_ARGV)
    stages = [answers.Stage("node-a", True), answers.Stage("node-b", True)]
    request = {"model": "tiny", "prompt": "one two", "max_tokens": 32, "ignore_eos": True, "stream": True}
    request["stream_options"] = {"include_usage": True}
    body = answers.completion(options, stages, request, 1, 100)
    wire = b"".join(
        b"data: " + json.dumps(c).encode() + b"\n\n" for c in answers.stream_chunks(body, request)
    )
    parser = SseParser()
    messages = [classify(data) for data in [*parser.feed(wire + b"data: [DONE]\n\n"), *parser.close()]]
    kinds = [m.kind for m in messages]
    assert kinds == ["token"] * 32 + ["usage", "done"]
    assert messages[32].usage == {"prompt_tokens": 2, "completion_tokens": 32, "total_tokens": 34}
    short = answers.stream_chunks(body, {"model": "tiny"})  # EOS honoured, no usage asked for
    assert [c["choices"][0]["text"] for c in short] == [f" {w}" for w in body["choices"][0]["text"].split()]
