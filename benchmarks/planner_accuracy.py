"""Replays logged vLLM startups through the planner's memory model and reports its error per figure.

Usage: python benchmarks/planner_accuracy.py [observations.jsonl]   (or PLANNER_OBSERVATIONS=...)
Default: ../shared/planner-data/vllm_startup_dev.jsonl beside the checkout, then /work/shared/....
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllmctl.catalog.arch import ModelArch
from vllmctl.catalog.gpus import GIB, GpuModel, custom_gpu, find_gpu, smi_mib_to_cuda_gib
from vllmctl.catalog.loader import load_arch
from vllmctl.errors import VllmctlError
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.versions import default_batch_limits, default_gpu_memory_utilization, parse_version
from vllmctl.planner.vllm_memory import vllm_memory
from vllmctl.planner.weights import weight_gib

FALLBACK_VERSION = "0.11.0"
REPO = Path(__file__).resolve().parent.parent


def default_path() -> Path:
    for candidate in (REPO.parent / "shared", Path("/work/shared")):
        path = candidate / "planner-data" / "vllm_startup_dev.jsonl"
        if path.exists():
            return path
    return REPO.parent / "shared" / "planner-data" / "vllm_startup_dev.jsonl"


def find_gpu_in(record: dict[str, Any]) -> GpuModel | None:
    text = str(record.get("gpu") or "")
    figures = record.get("other_figures") or {}
    total = figures.get("total_gib") or figures.get("total_gpu_memory_gib")
    reported = re.search(r"(\d+(?:\.\d+)?) GiB total", text)
    mib = re.search(r"\((\d{4,6}) MiB\)", text)
    named = None
    for chunk in re.split(r"[(),]", text):
        words = chunk.split()
        # Longest leading run of words that names a catalog GPU ("NVIDIA L4 24GB" → "NVIDIA L4").
        for end in range(len(words), 0, -1):
            named = named or find_gpu(" ".join(words[:end]))
    if total or reported:
        cuda = float(total or reported[1])  # type: ignore[index]
        if named is None or abs(named.cuda_gib - cuda) > 0.5:
            return custom_gpu(cuda)
        return named
    if named is not None and mib:
        return (
            custom_gpu(smi_mib_to_cuda_gib(int(mib[1]), named.smi_name))
            if named.smi_mib != int(mib[1])
            else named
        )
    return named


@dataclass
class Figure:
    name: str
    errors: list[float] = field(default_factory=list)
    exact: int = 0
    cases: list[str] = field(default_factory=list)

    def line(self, total: int) -> str:
        if not self.errors:
            return f"{self.name:<28} usable 0/{total}"
        med = statistics.median(abs(e) for e in self.errors) * 100
        worst = max(abs(e) for e in self.errors) * 100
        return (
            f"{self.name:<28} usable {len(self.errors):>2}/{total}  median {med:6.2f}%  worst {worst:6.2f}%"
            f"  within-target {self.exact}/{len(self.errors)}"
        )


def settings_for(record: dict[str, Any], arch: ModelArch, gpu: GpuModel) -> VllmSettings:
    try:
        version = parse_version(str(record.get("vllm_version") or FALLBACK_VERSION))
    except VllmctlError:
        version = parse_version(FALLBACK_VERSION)
    if version[0] != 0:  # container tags such as "NGC 25.11" are not vLLM versions
        version = parse_version(FALLBACK_VERSION)
    offline = bool(re.search(r"LLM[- ]class|offline", str(record.get("notes") or "")))
    mnbt, seqs = default_batch_limits(version, gpu, offline)
    return VllmSettings(
        version=version,
        tp=int(record.get("tensor_parallel_size") or 1),
        pp=int(record.get("pipeline_parallel_size") or 1),
        gpu_memory_utilization=float(
            record.get("gpu_memory_utilization") or default_gpu_memory_utilization(version)
        ),
        max_model_len=int(record.get("max_model_len") or arch.max_position_embeddings),
        max_num_seqs=int(record.get("max_num_seqs") or seqs),
        max_num_batched_tokens=int(record.get("max_num_batched_tokens") or mnbt),
        kv_cache_dtype="fp8" if str(record.get("kv_cache_dtype") or "").startswith("fp8") else "auto",
        enforce_eager=bool(record.get("enforce_eager")),
    )


def replay(records: list[dict[str, Any]]) -> list[Figure]:
    end_to_end = Figure("kv_tokens end-to-end (5%)")
    weights, available, tokens, feasible = (
        Figure("weights_gib (2%)"),
        Figure("available_kv_gib (5%)"),
        Figure("kv_tokens given avail (exact)"),
        Figure("feasibility (right)"),
    )
    for record in records:
        label = f"{record.get('model')} @ {record.get('gpu')}"
        model = re.match(r"[\w./-]+", str(record.get("model") or ""))
        try:
            arch = load_arch(model[0] if model else "", online=False)
        except VllmctlError:
            continue
        gpu = find_gpu_in(record) or custom_gpu(80.0)
        settings = settings_for(record, arch, gpu)
        if record.get("weights_gib"):
            error = weight_gib(arch, settings.tp, settings.pp) / float(record["weights_gib"]) - 1
            weights.errors.append(error)
            weights.exact += abs(error) <= 0.02
            weights.cases.append(f"{label}: {error:+.2%}")
        if not str(record.get("engine") or "").startswith("V1"):
            continue
        logged_avail = record.get("available_kv_cache_gib")
        known_gpu = find_gpu_in(record) is not None
        predicted = vllm_memory(arch, gpu, settings)
        if logged_avail and known_gpu:
            error = predicted.available_kv_cache_gib / float(logged_avail) - 1
            available.errors.append(error)
            available.exact += abs(error) <= 0.05
            available.cases.append(
                f"{label}: {predicted.available_kv_cache_gib:.2f} vs {logged_avail} {error:+.2%}"
            )
        if record.get("gpu_kv_cache_tokens") and known_gpu:
            error = predicted.kv_cache_tokens / int(record["gpu_kv_cache_tokens"]) - 1
            end_to_end.errors.append(error)
            end_to_end.exact += abs(error) <= 0.05
            end_to_end.cases.append(
                f"{label}: {predicted.kv_cache_tokens:,} vs {record['gpu_kv_cache_tokens']:,}"
            )
        failed = "FAILED" in str(record.get("notes") or "")
        started = bool(logged_avail or record.get("gpu_kv_cache_tokens"))
        if known_gpu and (failed or started):
            right = predicted.fits != failed
            feasible.errors.append(0.0 if right else 1.0)
            feasible.exact += right
            feasible.cases.append(f"{label}: predicted fits={predicted.fits}, logged startup failed={failed}")
        if logged_avail and record.get("gpu_kv_cache_tokens"):
            logged = int(record["gpu_kv_cache_tokens"])
            # The log rounds available GiB to 2 decimals: any value in that interval is vLLM's own figure.
            bounds = [
                vllm_memory(arch, gpu, _with_kv(settings, (float(logged_avail) + d) * GIB)).kv_cache_tokens
                for d in (-0.005, 0.0, 0.005)
            ]
            error = bounds[1] / logged - 1
            tokens.errors.append(error)
            tokens.exact += bounds[0] <= logged <= bounds[2]
            tokens.cases.append(f"{label}: {bounds[1]:,} ({bounds[0]:,}..{bounds[2]:,}) vs {logged:,}")
    return [weights, available, tokens, feasible, end_to_end]


def _with_kv(settings: VllmSettings, kv_bytes: float) -> VllmSettings:
    from dataclasses import replace

    return replace(settings, kv_cache_memory_bytes=int(kv_bytes))


def main(argv: list[str]) -> int:
    paths = [arg for arg in argv[1:] if not arg.startswith("-")]
    path = Path(paths[0] if paths else os.environ.get("PLANNER_OBSERVATIONS") or default_path())
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    figures = replay(records)
    print(f"observations: {len(records)} from {path}")
    for figure in figures:
        print(figure.line(len(records)))
    if "-v" in argv or os.environ.get("VERBOSE"):
        for figure in figures:
            print(f"\n{figure.name}")
            for case in figure.cases:
                print(f"  {case}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
