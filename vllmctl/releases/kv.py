"""Plan vs measured KV cache per release, pure: the prediction a release manifest carries (the GPU planner's,
or vLLM-CPU's fixed KV space), what each engine logged at startup (its journal), and reading both back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from vllmctl.ops import Command, Step, Upload
from vllmctl.planner.cpu_kv import predict_cpu_kv
from vllmctl.planner.inventory_plan import InventoryPlan
from vllmctl.planner.vllm_memory import MemoryBreakdown
from vllmctl.releases.host import MANIFEST, Manifest, release_dir
from vllmctl.render.quoting import shell_word
from vllmctl.status.metrics import MeasuredKv, parse_startup_log
from vllmctl.tasks.desired import HostContext, unit_name

KV_KEY = "kv"  # manifest.plan[model]["kv"] = {"predicted": {...}, "measured": {unit: {...}}}
UNIT_MARK = "@@vllmctl-kv-unit"
# Only the lines parse_startup_log reads travel back: a long-running server's journal is mostly requests.
STARTUP_LINE_MARKERS = (
    "KV cache",
    "Maximum concurrency",
    "weights took",
    "Model loading took",
    "for weight",
    "weights take",
    "GPU blocks",
    "num_gpu_blocks",
)
JOURNAL_LINES = 200


def gpu_predictions(ctx: HostContext, plan: InventoryPlan) -> dict[str, dict[str, Any]]:
    """The planner's KV figures for this host's GPU deployments, where the plan is the one being served
    (same engine args as the units; a plan made from gathered GPU facts may differ and is left out)."""
    found: dict[str, dict[str, Any]] = {}
    for entry in plan.entries:
        if entry.host != ctx.host.name or entry.plan is None:
            continue
        model = ctx.inventory.models[entry.model]
        on_cpu = ctx.engine(model).distribution.endswith("-cpu")  # the planner sizes GPUs a CPU build ignores
        if on_cpu or dict(entry.plan.engine_args) != dict(ctx.plan(model).engine_args):
            continue
        memory = entry.plan.memory
        found[entry.model] = {
            "kv_tokens": int(memory.kv_cache_tokens),
            "max_concurrency": float(memory.max_concurrency),
            "source": "planner",
        }
        # V2: a restart loads its compiled graphs and keeps more KV (SGLang plans have no such figure)
        if isinstance(memory, MemoryBreakdown) and memory.restart_kv_cache_tokens > memory.kv_cache_tokens:
            found[entry.model]["restart_kv_tokens"] = memory.restart_kv_cache_tokens
    return found


def cpu_predictions(ctx: HostContext, archs: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    env = {str(k): str(v) for k, v in ctx.host.vars.get("env", {}).items()}
    found: dict[str, dict[str, Any]] = {}
    for model in ctx.models():
        arch = archs.get(model.source)
        if arch is None or not ctx.engine(model).distribution.endswith("-cpu"):
            continue
        predicted = predict_cpu_kv(arch, env, ctx.plan(model).engine_args, model.max_model_len)
        if predicted is not None:
            found[model.name] = predicted.to_json()
    return found


def _with_kv(manifest: Manifest, model: str, kv: Mapping[str, Any]) -> Manifest:
    plans = {name: dict(entry) for name, entry in manifest.plan.items()}
    plans.setdefault(model, {})[KV_KEY] = dict(kv)
    return replace(manifest, plan=plans)


def with_predictions(manifest: Manifest, predictions: Mapping[str, Mapping[str, Any]]) -> Manifest:
    for model, predicted in sorted(predictions.items()):
        if model in manifest.models:
            manifest = _with_kv(manifest, model, {"predicted": dict(predicted)})
    return manifest


def startup_lines_command(units: list[str]) -> Command:
    """Per unit, the KV lines its current run logged: journal entries of its systemd invocation only."""
    grep = " ".join(f"-e {shell_word(marker)}" for marker in STARTUP_LINE_MARKERS)
    loop = " ".join(shell_word(u) for u in sorted(units))
    return Command(
        shell=f"for u in {loop}; do printf '{UNIT_MARK} %s\\n' \"$u\"; "
        'id=$(systemctl show -p InvocationID --value -- "$u" 2>/dev/null); '
        '[ -n "$id" ] && journalctl "_SYSTEMD_INVOCATION_ID=$id" -o cat --no-pager 2>/dev/null '
        f"| grep -F {grep} | tail -n {JOURNAL_LINES}; done; true"
    )


def parse_startup_lines(output: str) -> dict[str, MeasuredKv]:
    """unit -> what its log says; units whose log holds no KV size are left out."""
    measured: dict[str, MeasuredKv] = {}
    for block in output.split(f"{UNIT_MARK} ")[1:]:
        unit, _, text = block.partition("\n")
        found = parse_startup_log(text)
        if found.kv_tokens is not None:
            measured[unit.strip()] = found
    return measured


def _deviation(measured: float | None, predicted: Any) -> float | None:
    if measured is None or not isinstance(predicted, int | float) or not predicted:
        return None
    return round((measured - predicted) / predicted, 4)


def with_measured(manifest: Manifest, measured: Mapping[str, MeasuredKv]) -> Manifest:
    """The manifest with each unit's measured figures beside its model's prediction, with the deviation."""
    for model, served in sorted(manifest.models.items()):
        units = [unit_name(model, index) for index in range(len(served.get("ports", [])))]
        found = {unit: measured[unit] for unit in units if unit in measured}
        if not found:
            continue
        kv = dict(manifest.plan.get(model, {}).get(KV_KEY, {}))
        predicted = kv.get("predicted", {})
        kv["measured"] = {
            unit: {
                "kv_tokens": m.kv_tokens,
                "max_concurrency": m.max_concurrency,
                "concurrency_context": m.concurrency_context,
                "available_kv_gib": m.available_kv_gib,
                "num_blocks": m.num_blocks,
                "kv_tokens_deviation": _deviation(m.kv_tokens, predicted.get("kv_tokens")),
                "max_concurrency_deviation": _deviation(m.max_concurrency, predicted.get("max_concurrency")),
            }
            for unit, m in sorted(found.items())
        }
        manifest = _with_kv(manifest, model, kv)
    return manifest


def _kv_entry(manifest: Mapping[str, Any] | None, model: str) -> Mapping[str, Any] | None:
    """The KV record a manifest (as JSON) keeps for one model, if any."""
    plan = (manifest or {}).get("plan")
    entry = plan.get(model) if isinstance(plan, Mapping) else None
    kv = entry.get(KV_KEY) if isinstance(entry, Mapping) else None
    return kv if isinstance(kv, Mapping) else None


def recorded_kv(
    manifest: Mapping[str, Any] | None, model: str, replica: int
) -> tuple[int | None, int | None]:
    """(predicted, measured) KV tokens a manifest (as JSON) records for one replica; None where absent."""
    kv = _kv_entry(manifest, model)
    if kv is None:
        return None, None
    predicted = (kv.get("predicted") or {}).get("kv_tokens")
    measured = ((kv.get("measured") or {}).get(unit_name(model, replica)) or {}).get("kv_tokens")
    return (
        int(predicted) if isinstance(predicted, int | float) else None,
        int(measured) if isinstance(measured, int | float) else None,
    )


def recorded_restart_kv(manifest: Mapping[str, Any] | None, model: str) -> int | None:
    """The KV tokens a restart with a warm torch.compile cache is predicted to get (V2), if recorded."""
    kv = _kv_entry(manifest, model)
    predicted = kv.get("predicted") if kv is not None else None
    restart = predicted.get("restart_kv_tokens") if isinstance(predicted, Mapping) else None
    return int(restart) if isinstance(restart, int | float) else None


def record_kv_step(manifest: Manifest) -> Step:
    """Rewrites the manifest with its KV figures; what it serves (units, venv: the id) is unchanged."""
    target = release_dir(manifest.id)
    return Step("release_kv", target, (Upload(f"{target}/{MANIFEST}", manifest.to_json()),))
