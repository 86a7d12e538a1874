"""Recorded request shapes for `tune --workload`: JSONL parsed with the file and line of every problem and
bounds on lines and tokens; the benchmark sends request i with shape i mod n (prompt length and max_tokens);
a host's replicas are combined into one trial."""

from __future__ import annotations

import pytest

from vllmctl.bench.prompts import shaped_prompts
from vllmctl.bench.report import LoadSpec
from vllmctl.errors import InputError
from vllmctl.runner.tune.load import combine
from vllmctl.tune import workload
from vllmctl.tune.workload import parse_workload


def test_shapes_are_read_in_order_and_blank_lines_skipped() -> None:
    text = '{"input_tokens": 512, "output_tokens": 64}\n\n{"input_tokens": 16, "output_tokens": 200}\n'
    assert parse_workload(text, "w.jsonl") == ((512, 64), (16, 200))


@pytest.mark.parametrize(
    ("line", "found"),
    [
        ("not json", "w.jsonl:2: not JSON"),
        ('{"input_tokens": 0, "output_tokens": 8}', "w.jsonl:2: input_tokens must be an integer from 1"),
        ('{"input_tokens": 8, "output_tokens": true}', "w.jsonl:2: output_tokens must be an integer"),
        ('{"input_tokens": 8}', "w.jsonl:2: output_tokens must be an integer from 1 to 1,048,576, not None"),
        ("[1, 2]", "w.jsonl:2: input_tokens must be"),
    ],
)
def test_a_bad_line_is_named_by_file_and_line(line: str, found: str) -> None:
    with pytest.raises(InputError) as raised:
        parse_workload('{"input_tokens": 8, "output_tokens": 8}\n' + line, "w.jsonl")
    assert raised.value.message.startswith(found)


def test_the_file_is_bounded_and_not_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workload, "MAX_SHAPES", 2)
    with pytest.raises(InputError, match=r"w\.jsonl:3: more than 2 request shapes"):
        parse_workload('{"input_tokens": 8, "output_tokens": 8}\n' * 3, "w.jsonl")
    with pytest.raises(InputError, match=r"w\.jsonl: no request shapes"):
        parse_workload("\n", "w.jsonl")


def test_request_i_takes_shape_i_mod_n_for_its_prompt_and_output() -> None:
    shapes = ((4, 100), (9, 7))
    prompts = shaped_prompts(shapes)(5, 1)
    assert [len(p.split()) for p in prompts] == [4, 9, 4, 9, 4]
    spec = LoadSpec(output_tokens=64, shapes=shapes)
    assert [spec.output_for(i) for i in range(5)] == [100, 7, 100, 7, 100]
    assert LoadSpec(output_tokens=64).output_for(3) == 64


def load(goodput: float | None, ttft: float, kv: float | None, preempted: float) -> dict[str, object]:
    return {"goodput": goodput, "ttft_p99_ms": ttft, "itl_p99_ms": 5.0, "kv_usage_peak": kv,
            "preemptions": preempted, "levels": [], "error": None}  # fmt: skip


def test_a_hosts_replicas_add_up_and_one_that_did_not_serve_sinks_the_trial() -> None:
    trial = combine({"tensor_parallel_size": 2}, [load(3.0, 100, 0.5, 1), load(4.0, 300, 0.7, 2)])
    assert (
        trial.goodput == 7.0 and trial.detail["replicas"] == 2 and trial.detail["goodput_each"] == [3.0, 4.0]
    )
    assert trial.detail["ttft_p99_ms"] == 300 and trial.detail["kv_usage_peak"] == 0.7
    assert trial.detail["preemptions"] == 3
    assert combine({}, [load(3.0, 100, None, 0), load(None, 0, None, 0)]).goodput is None
