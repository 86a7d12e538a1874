"""Parsing real vLLM /metrics text, SGLang's names, rates between snapshots, and vLLM startup KV lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllmctl.status.metrics import (
    EngineMetrics,
    HistogramSummary,
    MeasuredKv,
    MetricsParseError,
    parse_metrics,
    parse_startup_log,
    rates,
)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "vllm_cpu"
HERE = Path(__file__).parent / "data"
TINY = "/var/cache/vllmctl/lab/models/tiny-llama-a43ca6ab63cc548e"
STARTUP_DEV = Path("/work/shared/planner-data/vllm_startup_dev.jsonl")


def _only(text: str) -> EngineMetrics:
    parsed = parse_metrics(text)
    assert len(parsed) == 1
    return next(iter(parsed.values()))


def test_idle_cpu_server_after_five_requests() -> None:
    m = _only((FIXTURES / "metrics.txt").read_text())
    assert m.engine == "vllm"
    assert m.model == TINY
    assert (m.requests_running, m.requests_waiting, m.kv_usage) == (0.0, 0.0, 0.0)
    assert m.preemptions_total == 0.0
    assert (m.prompt_tokens_total, m.generation_tokens_total) == (35.0, 120.0)
    assert m.requests_succeeded_total == 5.0
    # kv_cache_size_tokens from vllm:cache_config_info, which carries no model label
    assert m.kv_capacity_tokens == 1048576.0
    assert m.ttft == HistogramSummary(0.0360264778137207, 5.0)
    assert m.itl is not None and m.itl.count == 115.0
    assert m.ttft.mean == pytest.approx(0.0072052955627)


def test_queueing_capture_shows_the_waiting_requests() -> None:
    m = _only((FIXTURES / "metrics_queueing.txt").read_text())
    assert m.requests_running == 2.0  # --max-num-seqs 2
    assert m.requests_waiting == 6.0
    assert m.kv_usage == pytest.approx(0.34782608695652173)
    assert m.kv_capacity_tokens == 768.0  # 24 blocks of 32 tokens


def test_preempting_capture_counts_preemptions() -> None:
    m = _only((FIXTURES / "metrics_preempting.txt").read_text())
    assert (m.preemptions_total, m.requests_running, m.requests_waiting) == (1.0, 2.0, 4.0)
    assert m.kv_usage == pytest.approx(0.9565217391304348)


def _vllm(name: str, value: float, engine: str = "0", **labels: str) -> str:
    extra = "".join(f',{k}="{v}"' for k, v in labels.items())
    return f'{name}{{engine="{engine}",model_name="m"{extra}}} {value}\n'


def test_data_parallel_engines_are_summed_and_kv_takes_the_fullest() -> None:
    text = (
        "# TYPE vllm:num_requests_running gauge\n"
        + _vllm("vllm:num_requests_running", 3, "0")
        + _vllm("vllm:num_requests_running", 4, "1")
        + "# TYPE vllm:kv_cache_usage_perc gauge\n"
        + _vllm("vllm:kv_cache_usage_perc", 0.2, "0")
        + _vllm("vllm:kv_cache_usage_perc", 0.9, "1")
        + "# TYPE vllm:num_preemptions counter\n"
        + _vllm("vllm:num_preemptions_total", 5, "0")
        + _vllm("vllm:num_preemptions_total", 7, "1")
    )
    m = _only(text)
    assert (m.requests_running, m.kv_usage, m.preemptions_total) == (7.0, 0.9, 12.0)


def test_aborted_and_failed_requests_are_not_successes() -> None:
    text = "# TYPE vllm:request_success counter\n" + "".join(
        _vllm("vllm:request_success_total", n, finished_reason=reason)
        for reason, n in (("stop", 3), ("length", 4), ("abort", 50), ("error", 9))
    )
    assert _only(text).requests_succeeded_total == 7.0


def test_older_vllm_names_are_read() -> None:
    text = (
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        'vllm:gpu_cache_usage_perc{model_name="old"} 0.75\n'
        "# TYPE vllm:time_per_output_token_seconds histogram\n"
        'vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="old"} 10\n'
        'vllm:time_per_output_token_seconds_count{model_name="old"} 10\n'
        'vllm:time_per_output_token_seconds_sum{model_name="old"} 0.5\n'
    )
    m = parse_metrics(text)["old"]
    assert m.kv_usage == 0.75
    assert m.itl == HistogramSummary(0.5, 10.0)


SGLANG = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 162.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2826.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.28
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="meta-llama/Llama-3.1-8B-Instruct"} 86.5
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{model_name="meta-llama/Llama-3.1-8B-Instruct"} 161721.0
# TYPE sglang:num_retracted_requests counter
sglang:num_retracted_requests_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
# TYPE sglang:prompt_tokens counter
sglang:prompt_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 8.128902e+06
# TYPE sglang:generation_tokens counter
sglang:generation_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.557572e+06
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.35e+06
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 11008.0
sglang:time_to_first_token_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 11008.0
"""


def test_sglang_names() -> None:
    m = parse_metrics(SGLANG)["meta-llama/Llama-3.1-8B-Instruct"]
    assert m.engine == "sglang"
    assert (m.requests_running, m.requests_waiting, m.kv_usage) == (162.0, 2826.0, 0.28)
    assert (m.gen_throughput, m.kv_capacity_tokens, m.preemptions_total) == (86.5, 161721.0, 12.0)
    assert (m.prompt_tokens_total, m.generation_tokens_total) == (8128902.0, 7557572.0)
    assert m.ttft == HistogramSummary(2.35e6, 11008.0)


def test_old_sglang_labels_the_model_name() -> None:
    text = '# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{name="gemma"} 4\n'
    assert parse_metrics(text)["gemma"].requests_running == 4.0


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("this is {not prometheus\n", "not Prometheus text"),
        ("# TYPE process_open_fds gauge\nprocess_open_fds 34.0\n", "no vllm: or sglang: metrics"),
        ("", "no vllm: or sglang: metrics"),
    ],
)
def test_unreadable_answers_raise_with_a_hint(text: str, says: str) -> None:
    with pytest.raises(MetricsParseError) as caught:
        parse_metrics(text)
    assert says in caught.value.message
    assert caught.value.hint


def _snapshot(**values: Any) -> EngineMetrics:
    return EngineMetrics(engine="vllm", model="m", **values)


def test_rates_between_two_snapshots() -> None:
    prev = _snapshot(preemptions_total=10.0, prompt_tokens_total=1000.0, generation_tokens_total=500.0)
    cur = _snapshot(preemptions_total=40.0, prompt_tokens_total=5000.0, generation_tokens_total=2500.0)
    r = rates(prev, cur, 10.0)
    assert (r.preemptions_per_s, r.prompt_tokens_per_s, r.generation_tokens_per_s) == (3.0, 400.0, 200.0)
    assert r.requests_per_s is None  # neither snapshot had the counter


def test_a_restarted_server_counts_from_zero() -> None:
    r = rates(_snapshot(preemptions_total=900.0), _snapshot(preemptions_total=6.0), 2.0)
    assert r.preemptions_per_s == 3.0


def test_rates_need_time_between_snapshots() -> None:
    with pytest.raises(ValueError, match="apart in time"):
        rates(_snapshot(), _snapshot(), 0.0)


def test_rates_between_two_real_captures_6_08_s_apart() -> None:
    before = _only((FIXTURES / "metrics_preempting.txt").read_text())
    after = _only((HERE / "metrics_preempting_later.txt").read_text())
    r = rates(before, after, 6.08)
    assert r.preemptions_per_s == pytest.approx(2 / 6.08)  # 1 -> 3
    assert r.requests_per_s == pytest.approx(10 / 6.08)  # 2 -> 12 finished
    assert r.generation_tokens_per_s == pytest.approx((5927 - 1508) / 6.08)
    assert r.prompt_tokens_per_s == pytest.approx((380 - 106) / 6.08)


def test_startup_log_of_the_lab_cpu_server() -> None:
    kv = parse_startup_log((FIXTURES / "startup.log").read_text())
    # "CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 2,048 tokens per request: 512.00x"
    assert kv == MeasuredKv(
        kv_tokens=1048576, max_concurrency=512.0, concurrency_context=2048, available_kv_gib=1.0
    )


def test_startup_log_with_a_tiny_block_override() -> None:
    kv = parse_startup_log((HERE / "startup_small_kv.log").read_text())
    assert (kv.kv_tokens, kv.max_concurrency, kv.concurrency_context) == (768, 1.5, 512)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[kv_cache_utils.py:864] GPU KV cache size: 42,656 tokens", MeasuredKv(kv_tokens=42656)),
        ("GPU KV cache size:         1,037,152 tokens", MeasuredKv(kv_tokens=1037152)),
        (
            "Maximum concurrency for 32,768 tokens per request: 1.30x",
            MeasuredKv(max_concurrency=1.3, concurrency_context=32768),
        ),
        (
            "GPU KV cache size: 313,650 tokens, Maximum concurrency for 262,144 tokens per request: 1.20x",
            MeasuredKv(kv_tokens=313650, max_concurrency=1.2, concurrency_context=262144),
        ),
        ("Available KV cache memory: 6.51 GiB", MeasuredKv(available_kv_gib=6.51)),
        ("Loading model weights took 67.7229 GB", MeasuredKv(weights_gib=67.7229)),
        ("Model loading took 14.0786 GiB and 10.247948 seconds", MeasuredKv(weights_gib=14.0786)),
        ("Model loading took 48.5 GiB memory and 10.090812 seconds", MeasuredKv(weights_gib=48.5)),
        ("Loading weights took 0.01 seconds", MeasuredKv()),
        ("# GPU blocks: 1381", MeasuredKv(num_blocks=1381)),
    ],
)
def test_each_startup_line_form(line: str, expected: MeasuredKv) -> None:
    assert parse_startup_log(f"(EngineCore_DP0 pid=1) INFO 10-03 16:22:17 {line}\n") == expected


def test_the_precise_loader_figure_wins_over_the_rounded_profile() -> None:
    text = (
        "Model loading took 14.0786 GiB and 10.2 seconds\n"
        "Actual usage is 14.08 GiB for weight, 1.97 GiB for peak activation\n"
    )
    assert parse_startup_log(text).weights_gib == 14.0786


FIELDS = {
    "kv_tokens": "gpu_kv_cache_tokens",
    "max_concurrency": "max_concurrency",
    "available_kv_gib": "available_kv_cache_gib",
    "weights_gib": "weights_gib",
    "num_blocks": "num_gpu_blocks",
}


@pytest.mark.skipif(not STARTUP_DEV.exists(), reason="planner reference data not on this machine")
def test_quotes_from_public_startup_logs() -> None:
    found = 0
    for line in STARTUP_DEV.read_text().splitlines():
        record = json.loads(line)
        parsed = parse_startup_log(record["quote"])
        for ours, theirs in FIELDS.items():
            value = getattr(parsed, ours)
            if value is not None:
                assert value == pytest.approx(record[theirs]), (record["source"], ours)
                found += 1
    # Most figures are read; the rest sit in prose or tables (Korean summary, markdown lists), not log lines.
    assert found >= 50
