"""The tune sweep on a simulated goodput surface (deterministic): it climbs to the best candidate, turns back
when a direction loses, stays within its budget, and never runs a candidate the planner refuses."""

from __future__ import annotations

from vllmctl.tune.search import Knob, Trial, knobs_for, sweep, winner

PLANNED = {"max_num_seqs": 64, "max_num_batched_tokens": 4096}


def surface(best_seqs: int, best_tokens: int) -> dict[str, int]:
    return {"max_num_seqs": best_seqs, "max_num_batched_tokens": best_tokens}


def evaluator(peak: dict[str, int], runs: list[dict[str, int]]):  # type: ignore[no-untyped-def]
    """Goodput falls with the distance (in ladder steps, log2) from `peak`."""
    import math

    def evaluate(changes: dict[str, int]) -> Trial:
        runs.append(dict(changes))
        args = {**PLANNED, **changes}
        distance = sum(abs(math.log2(args[k] / peak[k])) for k in peak)
        chunked_off = 5 if changes.get("enable_chunked_prefill") is False else 0
        return Trial(changes, goodput=100.0 - 10 * distance - chunked_off)

    return evaluate


def test_knobs_range_from_a_quarter_to_four_times_the_plan() -> None:
    seqs, tokens, chunked = knobs_for(PLANNED, max_model_len=2048)
    assert seqs == Knob("max_num_seqs", (16, 32, 64, 128, 256), 64)
    assert tokens.values == (1024, 2048, 4096, 8192, 16384) and tokens.planned == 4096
    assert chunked == Knob("enable_chunked_prefill", (False, True), True)


def test_tensor_parallelism_comes_first_where_the_model_fits_several_ways() -> None:
    tp, *rest = knobs_for({**PLANNED, "tensor_parallel_size": 2}, 2048, tp_options=(1, 2, 4))
    assert tp == Knob("tensor_parallel_size", (1, 2, 4), 2)
    assert [k.flag for k in rest] == ["max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill"]
    assert knobs_for(PLANNED, 2048, tp_options=(1,))[0].flag == "max_num_seqs"  # one way: no TP knob


def test_without_chunked_prefill_the_token_budget_stays_at_least_max_model_len() -> None:
    _, tokens, _ = knobs_for({**PLANNED, "enable_chunked_prefill": False}, max_model_len=2048)
    assert tokens.values == (2048, 4096, 8192, 16384)


def test_it_climbs_to_the_best_candidate_and_stops_where_a_direction_loses() -> None:
    runs: list[dict[str, int]] = []
    trials = sweep(knobs_for(PLANNED, 2048), evaluator(surface(256, 2048), runs), lambda c: "", budget=20)
    best = winner(trials)
    assert best is not None and best.changes == {"max_num_seqs": 256, "max_num_batched_tokens": 2048}
    # seqs: 128, 256 win; nothing past the top. tokens: 8192 loses, so down: 2048 wins, 1024 loses
    assert runs == [
        {},
        {"max_num_seqs": 128},
        {"max_num_seqs": 256},
        {"max_num_seqs": 256, "max_num_batched_tokens": 8192},
        {"max_num_seqs": 256, "max_num_batched_tokens": 2048},
        {"max_num_seqs": 256, "max_num_batched_tokens": 1024},
        {"max_num_seqs": 256, "max_num_batched_tokens": 2048, "enable_chunked_prefill": False},
    ]


def test_the_planned_settings_win_when_every_step_loses() -> None:
    runs: list[dict[str, int]] = []
    trials = sweep(knobs_for(PLANNED, 2048), evaluator(surface(64, 4096), runs), lambda c: "", budget=20)
    assert winner(trials) == trials[0] and trials[0].changes == {}
    assert len(runs) == 6  # each ladder: a step up, then down, each losing; chunked prefill off, losing


def test_the_budget_bounds_the_runs_and_refused_candidates_cost_nothing() -> None:
    runs: list[dict[str, int]] = []
    refuse = {"max_num_seqs": 128}

    def refusal(changes: dict[str, int]) -> str:
        return "does not fit" if changes.get("max_num_seqs", 0) >= refuse["max_num_seqs"] else ""

    trials = sweep(knobs_for(PLANNED, 2048), evaluator(surface(256, 4096), runs), refusal, budget=3)
    assert len(runs) == 3
    assert all(c.get("max_num_seqs", 64) < 128 for c in runs)  # never run
    refused = [t for t in trials if t.refused]
    assert refused and refused[0].changes == {"max_num_seqs": 128} and not refused[0].ran


def test_a_candidate_that_does_not_serve_never_wins() -> None:
    trials = [Trial({}, goodput=1.0), Trial({"max_num_seqs": 128}, goodput=None)]
    assert winner(trials) == trials[0]
    assert winner([Trial({"max_num_seqs": 128}, goodput=None)]) is None


def test_time_running_out_stops_before_the_next_run() -> None:
    runs: list[dict[str, int]] = []
    left = iter([True, False, False, False, False, False])
    sweep(knobs_for(PLANNED, 2048), evaluator(surface(256, 2048), runs), lambda c: "", 20, lambda: next(left))
    assert runs == [{}, {"max_num_seqs": 128}]
