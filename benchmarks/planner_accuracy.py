"""Replays logged vLLM startups through the planner (memory model and startup rules) and reports its error per
figure against issue #16's targets, beside a rule-of-thumb peer computed in the same run (checkpoint bytes
split by TP; KV = utilization x total - weights), the calculator most sizing guides use.

Usage: python benchmarks/planner_accuracy.py [-v] [records.jsonl ...]   (or PLANNER_OBSERVATIONS=a:b)
Default: ../shared/planner-data/vllm_startup_dev.jsonl (or /work/shared/...) and
benchmarks/data/vllm_startup_public.jsonl. A configs/ folder beside a file supplies architectures.
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from startup_records import Case, load_cases, raw_config

from vllmctl.catalog.gpus import GIB
from vllmctl.planner.hybrid_kv import hybrid_layout, is_hybrid
from vllmctl.planner.margin import margin
from vllmctl.planner.rules import refusals
from vllmctl.planner.vllm_memory import MemoryBreakdown, vllm_memory
from vllmctl.planner.weights import checkpoint_gib

REPO = Path(__file__).resolve().parent.parent
# vLLM's own spread between identical starts: TheBuccaneer/vllm-offload-profiles logged 0.49 and 0.41 GiB of
# KV for the same Qwen2.5-7B command on the same RTX 3090 two minutes apart. Over-prediction counts beyond it.
RUN_TO_RUN_GIB = 0.08


def default_paths() -> list[Path]:
    found = []
    for candidate in (REPO.parent / "shared", Path("/work/shared")):
        path = candidate / "planner-data" / "vllm_startup_dev.jsonl"
        if path.exists():
            found.append(path)
            break
    public = REPO / "benchmarks" / "data" / "vllm_startup_public.jsonl"
    return [*found, public] if public.exists() else found


@dataclass
class Figure:
    name: str
    target: str
    errors: list[float] = field(default_factory=list)
    peer: list[float] = field(default_factory=list)  # the rule-of-thumb's errors on the same cases
    cases: list[str] = field(default_factory=list)

    def add(self, error: float, case: str, peer: float | None = None) -> None:
        self.errors.append(error)
        self.cases.append(f"{case}: {error:+.2%}")
        if peer is not None:
            self.peer.append(peer)

    def median(self) -> float:
        return statistics.median(abs(e) for e in self.errors) if self.errors else 0.0

    def line(self) -> str:
        if not self.errors:
            return f"{self.name:<30} usable  0"
        worst = max(abs(e) for e in self.errors)
        text = (
            f"{self.name:<30} usable {len(self.errors):>3}  median {self.median():7.2%}  worst {worst:8.2%}"
        )
        if self.peer:
            peer = statistics.median(abs(e) for e in self.peer)
            ratio = self.median() / peer if peer else 0.0
            text += f"  rule-of-thumb median {peer:7.2%}  (planner/peer {ratio:.2f})"
        return text


def _naive_weights_gib(case: Case) -> float:
    return checkpoint_gib(case.arch) / case.settings.tp


def _with_kv(case: Case, kv_gib: float) -> MemoryBreakdown:
    return vllm_memory(case.arch, case.gpu, replace(case.settings, kv_cache_memory_bytes=int(kv_gib * GIB)))


def replay(cases: list[Case]) -> tuple[list[Figure], list[str]]:
    weights = Figure("weights_gib", "median <= 1%, worst <= 3%")
    available = Figure("available_kv_gib", "median <= 2%, none over-predicted by > 5% and > 0.08 GiB")
    tokens = Figure("kv_tokens given logged KV", "worst <= 2% (0 = exact within log rounding)")
    end_to_end = Figure("kv_tokens end-to-end", "median <= 2%")
    feasible = Figure("feasibility (0 = right)", "right on every record")
    over: list[str] = []
    for case in cases:
        record, s = case.record, case.settings
        memory = vllm_memory(case.arch, case.gpu, s)
        aside = record.get("set_aside") or {}
        if record.get("weights_gib") and "weights_gib" not in aside:
            logged = float(record["weights_gib"])
            weights.add(memory.weights_gib / logged - 1, case.label, _naive_weights_gib(case) / logged - 1)
        # V0 logs print one worker's KV and the blocks of the smallest: KV figures are scored from V1 only
        kv_scored = case.v1 and "available_kv_cache_gib" not in aside
        logged_kv = record.get("available_kv_cache_gib") if kv_scored else None
        tokens_scored = case.v1 and "gpu_kv_cache_tokens" not in aside
        logged_tokens = record.get("gpu_kv_cache_tokens") if tokens_scored else None
        # the layout needs the logged KV only, not the settings that sized it: a KV figure set aside for an
        # unknown utilization still checks the tokens it holds
        held_kv = record.get("available_kv_cache_gib") if case.v1 else None
        if held_kv and logged_tokens and float(held_kv) > 0:
            # the tokens a logged KV figure holds need the layout only, not the card's total: scored on every
            # V1 record that logs both, its GPU named or not (issue #49: TP 8 notes that name no GPU)
            bounds = [_with_kv(case, float(held_kv) + d).kv_cache_tokens for d in (-0.005, 0.0, 0.005)]
            inside = bounds[0] <= int(logged_tokens) <= bounds[2]
            tokens.add(0.0 if inside else bounds[1] / int(logged_tokens) - 1, case.label)
        if not case.known_gpu or not (case.v1 or case.version_known):
            continue
        if logged_kv:
            error = memory.available_kv_cache_gib / float(logged_kv) - 1
            naive = memory.requested_gib - _naive_weights_gib(case)
            available.add(
                error,
                f"{case.label} {memory.available_kv_cache_gib:.2f} vs {logged_kv}",
                naive / float(logged_kv) - 1,
            )
            if error > 0.05 and memory.available_kv_cache_gib - float(logged_kv) > RUN_TO_RUN_GIB:
                over.append(
                    f"{case.label}: predicted {memory.available_kv_cache_gib:.2f} GiB, logged {logged_kv}"
                )
        if logged_tokens and "kv_tokens_end_to_end" not in aside:
            end_to_end.add(memory.kv_cache_tokens / int(logged_tokens) - 1, case.label)
        if case.refused or case.started:
            engine_gpus = max(s.tp * max(s.dp, 1), 1)
            found = refusals(case.arch, case.gpu, engine_gpus, s, memory_breakdown=memory, nodes=s.pp)
            predicted_refused = bool(found) or not memory.fits
            # Inside the error band `plan` promises nothing (it refuses without tight_fit): no wrong call
            tight = not predicted_refused and not margin(memory).safe
            # A refusal for want of KV by less than vLLM's own run-to-run spread is a call at the line, which
            # identical starts decide both ways (the RTX 3090 pair of TheBuccaneer's logs); plan refuses it.
            short = memory.needed_kv_gib - memory.available_kv_cache_gib
            at_line = {r.rule for r in found} == {"kv-cache-holds-one-request"} and short <= RUN_TO_RUN_GIB
            right = tight or at_line or predicted_refused == case.refused
            rules = ",".join(r.rule for r in found) or ("does not fit" if not memory.fits else "starts")
            rules += " but inside the error band (plan: tight fit)" if tight else ""
            line = f" by {short:.2f} GiB, inside vLLM's run-to-run spread (a call at the line)"
            rules += line if at_line else ""
            feasible.add(0.0 if right else 1.0, f"{case.label} predicted {rules}, logged "
                         f"{'refused' if case.refused else 'started'}")  # fmt: skip
    return [weights, available, tokens, end_to_end, feasible], over


# Issue #49's thin families, each replayed as its own row with its own targets (available KV median <= 2 %,
# none over-predicted by > 5 %, every go/no-go right). A record names its family in `family`; others are
# classified from the replayed architecture and settings. A record belongs to the first family that matches.
HYBRID_TYPES = ("qwen3_next", "jamba", "granitemoehybrid", "nemotron_h", "qwen3_5", "falcon_h1", "lfm2")


def _fp8_weights(case: Case) -> bool:
    quant = case.arch.quantization
    return (quant is not None and quant.method == "fp8") or case.settings.quantization == "fp8"


FAMILIES: tuple[tuple[str, Callable[[Case], bool]], ...] = (
    ("hybrid attention/Mamba", lambda c: c.arch.model_type.startswith(HYBRID_TYPES)),
    ("Llama 4 (MoE + vision)", lambda c: c.arch.model_type.startswith("llama4")),
    ("vision-language MoE", lambda c: c.arch.vision is not None and c.arch.is_moe),
    (
        "MoE at TP 8, FP8",
        lambda c: (
            c.arch.is_moe
            and c.settings.tp * max(c.settings.dp, 1) >= 8
            and (_fp8_weights(c) or c.settings.kv_cache_dtype.startswith("fp8"))
        ),
    ),
    (
        "dense at TP 8, FP8 KV",
        lambda c: not c.arch.is_moe and c.settings.tp >= 8 and c.settings.kv_cache_dtype.startswith("fp8"),
    ),
    ("FP8 on Ampere (Marlin)", lambda c: _fp8_weights(c) and c.gpu.compute_capability < (8, 9)),
    (
        "Gemma 3 27B on V1",
        lambda c: c.arch.model_type.startswith("gemma3") and c.arch.num_layers == 62 and c.v1,
    ),
    (
        "MoE coder at long context",
        lambda c: "coder" in c.arch.name.lower() and c.arch.is_moe and c.settings.max_model_len >= 65536,
    ),
)


def family_of(case: Case) -> str | None:
    named = case.record.get("family")
    if named:
        return str(named)
    return next((name for name, belongs in FAMILIES if belongs(case)), None)


def replay_families(cases: list[Case]) -> dict[str, tuple[list[Figure], list[str]]]:
    """Each family's own replay (families with no replayable record are absent)."""
    grouped: dict[str, list[Case]] = {}
    for case in cases:
        family = family_of(case)
        if family is not None:
            grouped.setdefault(family, []).append(case)
    return {family: replay(members) for family, members in grouped.items()}


def family_verdicts(figures: list[Figure], over: list[str]) -> list[str]:
    """The issue #49 targets for one family: available KV median, no over-prediction, every go/no-go."""
    _, available, _, _, feasible = figures
    checks = [
        (f"available KV median <= 2% ({len(available.errors)} scored)", available.median() <= 0.02),
        ("no available KV over-predicted by > 5% (and > 0.08 GiB)", not over),
        (f"feasibility right on every record ({len(feasible.errors)} scored)", not any(feasible.errors)),
    ]
    scored = (len(available.errors), len(available.errors), len(feasible.errors))
    # a target no record of the family is scored on is not met, only untested: NONE, never PASS
    return [
        f"{'NONE' if not n else 'PASS' if ok else 'MISS'}  {name}"
        for (name, ok), n in zip(checks, scored, strict=True)
    ]


def hybrid_tokens(records: list[dict[str, Any]], configs: Path) -> Figure:
    """The hybrid KV layout (vllmctl/planner/hybrid_kv.py) against V1 starts of hybrid attention / linear-
    attention models whose config is stored: the tokens the logged KV GiB holds (within the log's rounding)
    and, where logged, the attention block vLLM aligned to the state page. 0 = exact."""
    figure = Figure("hybrid KV tokens given logged KV", "exact (0) within log rounding, and the logged block")
    for record in records:
        config = raw_config(record, configs)
        if config is None or not is_hybrid(config) or not str(record.get("engine") or "").startswith("V1"):
            continue
        tp = int(record.get("tensor_parallel_size") or 1)
        kv_dtype = str(record.get("kv_cache_dtype") or "auto")
        layout = hybrid_layout(config, tp, kv_dtype)
        name = record.get("config") or record.get("model")
        label = f"{name} TP {tp} {kv_dtype} [{str(record['source'])[:60]}]"
        block = (record.get("other_figures") or {}).get("attention_block_size")
        if block:
            figure.add(layout.block_size / int(block) - 1, f"{label} block {layout.block_size} vs {block}")
        logged_kv, logged_tokens = record.get("available_kv_cache_gib"), record.get("gpu_kv_cache_tokens")
        if logged_kv and logged_tokens:
            bounds = [
                layout.tokens(layout.num_blocks(int((float(logged_kv) + d) * GIB)))
                for d in (-0.005, 0.0, 0.005)
            ]
            inside = bounds[0] <= int(logged_tokens) <= bounds[2]
            figure.add(0.0 if inside else bounds[1] / int(logged_tokens) - 1, f"{label} tokens {bounds[1]:,}")
    return figure


def family_count(family: str, records: list[dict[str, Any]], cases: list[Case]) -> str:
    """One family's record count: the records replayed in it (named for it, or classified by architecture)
    and those that name it but are not replayed (no architecture the planner holds), so the parts add up."""
    replayed = [case for case in cases if family_of(case) == family]
    named = sum(1 for case in replayed if case.record.get("family") == family)
    held = {id(case.record) for case in cases}
    cited = [r for r in records if r.get("family") == family and not r.get("excluded") and id(r) not in held]
    total = len(replayed) + len(cited)
    return (
        f"{total} record(s): {len(replayed)} replayed ({named} named for the family, "
        f"{len(replayed) - named} classified by architecture), {len(cited)} cited but not replayed "
        "(no architecture the planner holds)"
    )


def verdicts(figures: list[Figure], over: list[str]) -> list[str]:
    weights, available, tokens, end_to_end, feasible = figures
    worst_weight = max((abs(e) for e in weights.errors), default=0.0)
    checks = [
        ("weights median <= 1%", weights.median() <= 0.01),
        ("weights worst <= 3%", worst_weight <= 0.03),
        ("available KV median <= 2%", available.median() <= 0.02),
        ("KV tokens given logged KV worst <= 2%", all(abs(e) <= 0.02 for e in tokens.errors)),
        ("KV tokens end-to-end median <= 2%", end_to_end.median() <= 0.02),
        ("no available KV over-predicted by > 5% (and > 0.08 GiB)", not over),
        ("feasibility right on every record", all(e == 0.0 for e in feasible.errors)),
    ]
    return [f"{'PASS' if ok else 'MISS'}  {name}" for name, ok in checks]


def main(argv: list[str]) -> int:
    given = [Path(arg) for arg in argv[1:] if not arg.startswith("-")]
    env = os.environ.get("PLANNER_OBSERVATIONS")
    paths = given or ([Path(p) for p in env.split(":")] if env else default_paths())
    records, cases, raw = 0, [], []
    hybrid = Figure("hybrid KV tokens given logged KV", "exact (0) within log rounding, and the logged block")
    for path in paths:
        found, usable = load_cases(path)
        records += len(found)
        cases += usable
        raw += found
        configs = path.parent / "configs"
        found_hybrid = hybrid_tokens(found, configs) if configs.is_dir() else None
        if found_hybrid is not None:
            hybrid.errors += found_hybrid.errors
            hybrid.cases += found_hybrid.cases
        print(f"observations: {len(found)} from {path} ({len(usable)} with a known architecture)")
        for record in found:
            if record.get("excluded"):
                where = str(record.get("source"))[-60:]
                print(f"  excluded: {record.get('model')} [{where}]: {record['excluded']}")
            for figure, why in (record.get("set_aside") or {}).items():
                where = str(record.get("source"))[-60:]
                print(f"  {figure} set aside: {record.get('model')} [{where}]: {why}")
    figures, over = replay(cases)
    for figure in figures:
        print(figure.line())
    for line in verdicts(figures, over):
        print(line)
    replayed = replay_families(cases)
    for family in [name for name, _ in FAMILIES]:
        print(f"\nfamily: {family} (issue #49): {family_count(family, raw, cases)}")
        if family in replayed:
            rows, family_over = replayed[family]
            for figure in rows:
                print(f"  {figure.line()}")
            for line in family_verdicts(rows, family_over):
                print(f"  {line}")
        if family == FAMILIES[0][0] and hybrid.errors:
            verdict = "PASS" if all(e == 0.0 for e in hybrid.errors) else "MISS"
            print(f"  {hybrid.line()}")
            print(f"  {verdict}  hybrid KV layout exact on every start with a stored config")
    if "-v" in argv or os.environ.get("VERBOSE"):
        for figure in [*figures, hybrid]:
            print(f"\n{figure.name} ({figure.target})")
            for case in figure.cases:
                print(f"  {case}")
        for line in over:
            print(f"over-predicted: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
