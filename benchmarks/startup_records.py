"""Turns one logged vLLM startup (a JSON record of vllm_startup_*.jsonl) into what the planner is asked: the
architecture (catalog, or configs/ beside the records), the GPU, and the engine settings the log ran with.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from vllmctl.catalog.arch import ModelArch, parse_config
from vllmctl.catalog.gpus import GpuModel, custom_gpu, find_gpu, smi_mib_to_cuda_gib
from vllmctl.catalog.loader import load_arch
from vllmctl.errors import VllmctlError
from vllmctl.planner.settings import VllmSettings
from vllmctl.planner.versions import default_batch_limits, default_gpu_memory_utilization, parse_version

FALLBACK_VERSION = "0.11.0"


@dataclass(frozen=True)
class Case:
    label: str
    arch: ModelArch
    gpu: GpuModel
    known_gpu: bool
    settings: VllmSettings
    record: dict[str, Any]

    @property
    def v1(self) -> bool:
        return str(self.record.get("engine") or "").startswith("V1")

    @property
    def version_known(self) -> bool:
        """A V0 record replays only with its release known: defaults and accounting changed within V0."""
        return str(self.record.get("vllm_version") or "")[:1].isdigit()

    @property
    def refused(self) -> bool:
        return bool(self.record.get("refusal")) or "FAILED" in str(self.record.get("notes") or "")

    @property
    def started(self) -> bool:
        figures = self.record.get("available_kv_cache_gib") or self.record.get("gpu_kv_cache_tokens")
        # a source that says it served (e.g. 'reached RUNNING') without quoting the KV lines: `started: true`
        return bool(figures or self.record.get("started"))


def _model_id(record: dict[str, Any]) -> str:
    match = re.match(r"[\w./-]+", str(record.get("model") or ""))
    return match[0] if match else ""


def raw_config(record: dict[str, Any], configs: Path | None) -> dict[str, Any] | None:
    """The config.json copy in `configs/<org>__<name>.json` for the record's model, or for the architecture
    its `config` field names (a checkpoint the log shows to share a published model's shape)."""
    if configs is None:
        return None
    model = str(record.get("config") or _model_id(record))
    path = configs / f"{model.replace('/', '__')}.json"
    if not path.exists():
        return None
    entry = json.loads(path.read_text())
    return dict(entry.get("config", entry))


def load_model(record: dict[str, Any], configs: Path | None) -> ModelArch | None:
    """The catalog's architecture, else a config.json copy in `configs/<org>__<name>.json` (hybrid attention /
    linear-attention configs included: catalog/hybrid_arch.py)."""
    model = _model_id(record)
    config = raw_config(record, configs)
    if config is not None:
        return parse_config(config, model)
    try:
        return load_arch(model, online=False)
    except VllmctlError:
        return None


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
        # the total the log reports is the card's on that driver and platform (WSL2 shows more than Linux)
        cuda = float(total or reported[1])  # type: ignore[index]
        if named is None:
            return custom_gpu(cuda)
        return named if abs(named.cuda_gib - cuda) <= 0.05 else replace(named, cuda_gib=cuda)
    if named is not None and mib:
        return (
            custom_gpu(smi_mib_to_cuda_gib(int(mib[1]), named.smi_name))
            if named.smi_mib != int(mib[1])
            else named
        )
    return named


def _version(record: dict[str, Any]) -> tuple[int, int, int]:
    try:
        version = parse_version(str(record.get("vllm_version") or FALLBACK_VERSION))
    except VllmctlError:
        version = parse_version(FALLBACK_VERSION)
    if version[0] != 0:  # container tags such as "NGC 25.11" are not vLLM versions
        version = parse_version(FALLBACK_VERSION)
    if str(record.get("engine") or "") == "V0" and version >= (0, 8, 0):
        version = (0, 7, 3)  # a V0 engine forced on a V1-era release profiles as V0 did
    return version


def _sampler(record: dict[str, Any]) -> str:
    quote = str(record.get("quote") or "")
    if "Using FlashInfer for top-p & top-k sampling" in quote:
        return "flashinfer"
    if "PyTorch-native implementation of top-p & top-k" in quote:
        return "sort"
    return "auto"


def _mxfp4_backend(record: dict[str, Any]) -> str:
    """The vllm/vllm-openai images ship triton_kernels before vLLM bundles it (0.12): Triton there."""
    said = f"{record.get('vllm_version') or ''} {record.get('quote') or ''}"
    return "triton" if re.search(r"vllm/vllm-openai:|vllm-openai image", said) else "auto"


def _model_runner(record: dict[str, Any]) -> str:
    """The runner the log names ("Using V2 Model Runner" or a fallback to V1), else the environment's."""
    quote = str(record.get("quote") or "")
    if "Using V2 Model Runner" in quote:
        return "v2"
    if "using the V1 model runner instead" in quote:
        return "v1"
    env = ((record.get("other_figures") or {}).get("env") or {}).get("VLLM_USE_V2_MODEL_RUNNER")
    return "auto" if env is None else ("v2" if int(env) else "v1")


def _compile_cache(record: dict[str, Any]) -> str:
    """'warm' where the log or the record says torch.compile loaded cached graphs; else the planner's cold."""
    figures = record.get("other_figures") or {}
    if "compile" in figures:
        return str(figures["compile"])
    return "warm" if "Directly load the compiled graph" in str(record.get("quote") or "") else "cold"


def _media_items(record: dict[str, Any]) -> int:
    """Images + videos per prompt from the command's --limit-mm-per-prompt (vision models); without one, the
    images vLLM logs it profiled the encoder with under its default limits ('profiled with 1 image items of
    the maximum feature size'); 0 otherwise (a video profile is set aside: the planner does not model it)."""
    quote = str(record.get("quote") or "")
    found = re.search(r"limit[-_]mm[-_]per[-_]prompt\W*\{([^}]*)\}", quote)
    if found:
        return sum(int(n) for n in re.findall(r":\s*(\d+)", found[1]))
    logged = re.search(r"profiled with (\d+) image items", quote)
    return int(logged[1]) if logged else 0


def settings_for(record: dict[str, Any], arch: ModelArch, gpu: GpuModel) -> VllmSettings:
    version = _version(record)
    offline = bool(re.search(r"LLM[- ]class|offline", str(record.get("notes") or "")))
    figures = record.get("other_figures") or {}
    max_len = int(record.get("max_model_len") or arch.max_position_embeddings)
    chunked = figures.get("enable_chunked_prefill")
    mnbt, seqs = default_batch_limits(version, gpu, offline, max_len, chunked)
    if record.get("max_num_batched_tokens") and not record.get("max_num_seqs"):
        seqs = min(seqs, int(record["max_num_batched_tokens"]))
    kv = str(record.get("kv_cache_dtype") or "auto")
    quant = str(record.get("quantization") or "")
    return VllmSettings(
        version=version,
        tp=int(record.get("tensor_parallel_size") or 1),
        pp=int(record.get("pipeline_parallel_size") or 1),
        gpu_memory_utilization=float(
            record.get("gpu_memory_utilization") or default_gpu_memory_utilization(version)
        ),
        max_model_len=max_len,
        max_num_seqs=int(record.get("max_num_seqs") or seqs),
        max_num_batched_tokens=int(record.get("max_num_batched_tokens") or mnbt),
        kv_cache_dtype=kv if kv.startswith("fp8") else "auto",
        enforce_eager=bool(record.get("enforce_eager")),
        expert_parallel=bool(figures.get("enable_expert_parallel") or record.get("enable_expert_parallel")),
        dp=int(record.get("data_parallel_size") or figures.get("data_parallel_size") or 1),
        dtype=str(record.get("dtype") or "auto") if str(record.get("dtype") or "") in _DTYPES else "auto",
        quantization=quant if quant in ("fp8", "bitsandbytes") and arch.quantization is None else None,
        enable_chunked_prefill=chunked,
        sampler=_sampler(record),
        mxfp4_backend=_mxfp4_backend(record),
        model_runner=_model_runner(record),
        compile_cache=_compile_cache(record),
        mm_items=_media_items(record),
    )


_DTYPES = ("float16", "bfloat16", "half", "float32")


CORRECTIONS = Path(__file__).parent / "data" / "record_corrections.json"


def corrected(record: dict[str, Any]) -> dict[str, Any]:
    """A record with the settings its own log shows but its fields miss (record_corrections.json: matched by
    source and model, and by the fields in `match` when given, each with the log evidence in `why`); the
    correction is noted on the record."""
    if not CORRECTIONS.exists():
        return record
    for fix in json.loads(CORRECTIONS.read_text()):
        # `match` narrows a fix to one of several records of a source and model (e.g. one utilization).
        narrowed = all(record.get(key) == value for key, value in fix.get("match", {}).items())
        if fix["source"] == record.get("source") and fix["model"] == record.get("model") and narrowed:
            figures = {**(record.get("other_figures") or {}), **fix.get("other_figures", {})}
            if "exclude" in fix:  # reported, never scored: what no config-only planner can know
                return {**record, "excluded": fix["exclude"]}
            if "set_aside" in fix:  # one figure is the build's, not upstream vLLM's: the others still count
                return {**record, "set_aside": fix["set_aside"]}
            notes = f"{record.get('notes') or ''} [corrected: {fix['why']}]".strip()
            return {**record, **fix.get("fields", {}), "other_figures": figures, "notes": notes}
    return record


def load_cases(path: Path) -> tuple[list[dict[str, Any]], list[Case]]:
    """Every record of a JSONL file, and the ones the planner can replay (known model; any GPU)."""
    lines = path.read_text().splitlines()
    records = [corrected(json.loads(line)) for line in lines if line.strip()]
    configs = path.parent / "configs"
    cases = []
    for record in records:
        if record.get("excluded"):
            continue
        arch = load_model(record, configs if configs.is_dir() else None)
        if arch is None:
            continue
        found = find_gpu_in(record)
        gpu = found or custom_gpu(80.0)
        where = str(record.get("gpu") or "GPU?").split("(")[0].strip()[:28]
        label = f"{_model_id(record)} @ {where} [{str(record.get('source'))[:60]}]"
        cases.append(Case(label, arch, gpu, found is not None, settings_for(record, arch, gpu), record))
    return records, cases
