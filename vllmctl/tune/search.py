"""The sweep's order (pure): from the planned settings, one knob at a time, a step further in one direction
while goodput grows, the other direction when the first step loses, never a setting the planner or vLLM's
rules refuse, and no more trials than the budget allows."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Args = Mapping[str, Any]
VLLM_DEFAULT_MAX_NUM_SEQS = 256  # vllm/config/scheduler.py: the default the engine starts with
VLLM_DEFAULT_BATCHED_TOKENS = 8192  # V1's default for the OpenAI server on GPUs (vllm/engine/arg_utils.py)
MAX_NUM_SEQS_CAP = 1024


@dataclass(frozen=True)
class Knob:
    """One engine flag and its ladder of values, ascending; the planned value is one of them."""

    flag: str
    values: tuple[int, ...]
    planned: int


@dataclass(frozen=True)
class Trial:
    changes: dict[str, int]  # flag -> value, against the planned settings
    goodput: float | None = None  # requests/s at the highest load that met the SLO; None: it did not serve
    refused: str = ""  # why the planner or vLLM's rules refuse it (never run)
    detail: dict[str, Any] = field(default_factory=dict)  # what the runner measured

    @property
    def ran(self) -> bool:
        return not self.refused

    @property
    def score(self) -> float:
        return -1.0 if self.goodput is None else self.goodput


def _ladder(planned: int, low: int, high: int) -> tuple[int, ...]:
    values = {planned}
    for factor in (0.25, 0.5, 2, 4):
        values.add(max(low, min(high, int(planned * factor))))
    return tuple(sorted(values))


def knobs_for(planned: Args, max_model_len: int, tp_options: Sequence[int] = ()) -> list[Knob]:
    """Tensor parallelism first where the model fits several ways on the host (`tp_options`, as the planner
    accepts them: each changes how many replicas the host runs), then max_num_seqs (batch width) and
    max_num_batched_tokens (tokens per scheduler step), from a quarter to four times what is planned (never
    below max_model_len without chunked prefill, which vLLM refuses), then chunked prefill off or on.
    Combinations vLLM refuses (more sequences than tokens) are left to the rules."""
    seqs = int(planned.get("max_num_seqs") or VLLM_DEFAULT_MAX_NUM_SEQS)
    tokens = int(planned.get("max_num_batched_tokens") or max(VLLM_DEFAULT_BATCHED_TOKENS, max_model_len))
    chunked = planned.get("enable_chunked_prefill") is not False
    floor = 16 if chunked else max_model_len
    knobs = []
    if len(set(tp_options)) > 1:
        tp = int(planned.get("tensor_parallel_size") or 1)
        knobs.append(Knob("tensor_parallel_size", tuple(sorted({tp, *tp_options})), tp))
    return [
        *knobs,
        Knob("max_num_seqs", _ladder(seqs, 1, MAX_NUM_SEQS_CAP), seqs),
        Knob("max_num_batched_tokens", _ladder(tokens, min(floor, tokens), 4 * tokens), tokens),
        Knob("enable_chunked_prefill", (False, True), chunked),
    ]


def sweep(
    knobs: Sequence[Knob],
    evaluate: Callable[[dict[str, int]], Trial],
    refusal: Callable[[dict[str, int]], str],
    budget: int,
    more: Callable[[], bool] = lambda: True,
) -> list[Trial]:
    """Coordinate ascent: the planned settings first, then per knob a step up; while it wins, further up;
    if the first step up loses, steps down instead. `budget` counts runs (a refused candidate is not
    run and costs nothing); `more()` False (time is up) stops before the next run."""
    trials: list[Trial] = []
    current: dict[str, int] = {}
    best = evaluate(dict(current))
    trials.append(best)

    def runs() -> int:
        return sum(1 for t in trials if t.ran)

    for knob in knobs:
        start = knob.values.index(current.get(knob.flag, knob.planned))
        for direction in (1, -1):
            index, improved = start + direction, False
            while 0 <= index < len(knob.values) and runs() < budget and more():
                changes = {**current, knob.flag: knob.values[index]}
                if changes.get(knob.flag) == knob.planned:
                    changes.pop(knob.flag)
                why = refusal(changes)
                if why:
                    trials.append(Trial(changes, refused=why))
                    break  # further out in this direction is refused too
                trial = evaluate(changes)
                trials.append(trial)
                if trial.score <= best.score:
                    break  # this direction only gets worse
                best, current, improved = trial, changes, True
                index += direction
            if improved:
                break  # up won: no need to look down
    return trials


def winner(trials: Sequence[Trial]) -> Trial | None:
    """The trial with the most goodput; the planned settings win a tie (no change for nothing)."""
    ran = [t for t in trials if t.ran and t.goodput is not None]
    if not ran:
        return None
    return max(ran, key=lambda t: (t.score, not t.changes))
