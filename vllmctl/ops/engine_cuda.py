"""The CUDA an engine release needs, pure: read from its wheel's METADATA (the torch it pins and that torch's
CUDA runtime), never below the release table, which is also the fallback when the index cannot be read."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.parser import HeaderParser
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from vllmctl.ops.base import OpError

# The CUDA each release's own compiled kernels are built with, a floor under what METADATA says (torch on PyPI
# can be older: vLLM 0.9-0.10.1 pin torch 2.7, cu126 on PyPI, while vLLM's v0.9.0 release notes say its wheel
# moved to CUDA 12.8) and the whole answer when the index cannot be read. On PyPI (docs/provisioning.md):
# vLLM 0.10.2-0.17.0 pin torch 2.8.0-2.10.0, all nvidia-cuda-runtime-cu12==12.8.90; vLLM 0.20.0 pins torch
# 2.11.0, which names cuda-toolkit[cudart]==13.0.2.
ENGINE_CUDA: dict[str, tuple[tuple[str, str], ...]] = {
    "vllm": (("0.20", "13.0"), ("0.9", "12.8"), ("0.8", "12.4"), ("0.0", "12.1")),
    "sglang": (("0.5", "12.8"), ("0.4", "12.4"), ("0.0", "12.1")),
}
# Minimum Linux driver branch per CUDA version (NVIDIA CUDA Toolkit release notes, "CUDA Toolkit and
# Corresponding Driver Versions"): a driver runs CUDA up to the version it shipped with.
CUDA_MIN_DRIVER: dict[str, int] = {
    "13.0": 580, "12.9": 575, "12.8": 570, "12.6": 560, "12.5": 555, "12.4": 550,
    "12.3": 545, "12.2": 535, "12.1": 530, "12.0": 525,
}  # fmt: skip
# the hosts vllmctl provisions: a requirement whose marker excludes both is not installed there
LINUX = tuple(
    {
        "platform_system": "Linux",
        "sys_platform": "linux",
        "os_name": "posix",
        "platform_machine": m,
        "extra": "",
    }
    for m in ("x86_64", "aarch64")
)
RUNTIME = re.compile(r"^nvidia-cuda-runtime(?:-cu\d+)?$")
CU_SUFFIX = re.compile(r"-cu(\d+)$")
CU_EXTRA = re.compile(r"^cu(\d+)$")
PINS = ("==", "===", "~=", ">=")
LOCAL_CUDA = re.compile(r"^cu(\d+)(\d)$")  # a local version label such as +cu129 (vLLM's own index)


def needs_cuda(package: str) -> bool:
    return not package.endswith("-cpu")


def requirements(metadata: str) -> list[Requirement]:
    """The `Requires-Dist` entries installed on a Linux host without extras; unparsable ones are skipped."""
    found = []
    for line in HeaderParser().parsestr(metadata).get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or any(req.marker.evaluate({**env, "extra": ""}) for env in LINUX):
            found.append(req)
    return found


def pinned_torch(metadata: str) -> Requirement | None:
    return next((r for r in requirements(metadata) if canonicalize_name(r.name) == "torch"), None)


def _major_minor(text: str) -> str | None:
    try:
        release = Version(text.rstrip(".*")).release
    except InvalidVersion:
        return None
    return f"{release[0]}.{release[1] if len(release) > 1 else 0}"


def runtime_cuda(metadata: str) -> str | None:
    """The newest CUDA a wheel's own requirements name: `nvidia-cuda-runtime-cu12==12.8.90` is 12.8, so is
    `cuda-toolkit[cudart]==12.8.x` (torch 2.11 on); an unpinned `-cu13` package or `[cu13]` extra is 13.0."""
    found: list[str] = []
    for req in requirements(metadata):
        name = canonicalize_name(req.name)
        if RUNTIME.match(name) or (name == "cuda-toolkit" and "cudart" in req.extras):
            found += [_major_minor(s.version) or "" for s in req.specifier if s.operator in PINS]
        if name.startswith("nvidia-"):
            suffix = CU_SUFFIX.search(name)
            found += [f"{int(suffix[1])}.0"] if suffix else []
            found += [f"{int(m[1])}.0" for m in (CU_EXTRA.match(e) for e in req.extras) if m]
    return newest(*found)


def local_cuda(version: str | None) -> str | None:
    """`0.11.1+cu129` -> 12.9: the CUDA a wheel on vLLM's or PyTorch's own index says it is built for."""
    try:
        local = Version(version).local if version else None
    except InvalidVersion:
        return None
    match = LOCAL_CUDA.match(local or "")
    return f"{int(match[1])}.{match[2]}" if match else None


def newest(*cudas: str | None) -> str | None:
    known = [c for c in cudas if c]
    return max(known, key=Version) if known else None


def table_cuda(engine: str, version: str) -> str | None:
    try:
        wanted = Version(version)
    except InvalidVersion:
        return None
    for since, cuda in ENGINE_CUDA.get(engine, ()):
        if wanted >= Version(since):
            return cuda
    return None


@dataclass(frozen=True)
class EngineCuda:
    """The CUDA one engine release needs and where that was read: `metadata` (its wheel and its torch's),
    `table` (ENGINE_CUDA, no index read) or `cpu` (a CPU build: no CUDA at all)."""

    engine: str
    package: str
    version: str
    cuda: str | None
    source: str = "table"
    torch: str | None = None  # the requirement the engine pins, e.g. torch==2.9.0
    torch_cuda: str | None = None  # what that torch's own METADATA names

    def to_args(self) -> dict[str, Any]:
        return {"cuda": self.cuda, "source": self.source, "torch": self.torch, "torch_cuda": self.torch_cuda}

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> EngineCuda:
        """From an engine_venv op's args: the edge's reading under `cuda`, else the table."""
        engine, package, version = str(args["engine"]), str(args["package"]), str(args["version"])
        read = args.get("cuda")
        if isinstance(read, Mapping):
            fields = {
                k: (None if read.get(k) is None else str(read[k])) for k in ("cuda", "torch", "torch_cuda")
            }
            return cls(engine, package, version, source=str(read.get("source") or "metadata"), **fields)
        return table_reading(engine, package, version)


def table_reading(engine: str, package: str, version: str) -> EngineCuda:
    if not needs_cuda(package):
        return EngineCuda(engine, package, version, None, "cpu")
    return EngineCuda(engine, package, version, table_cuda(engine, version), "table")


def from_metadata(
    engine: str, package: str, version: str, engine_metadata: str, torch_metadata: str | None, wheel: str
) -> EngineCuda:
    """`wheel` is the version of the wheel read (it may carry +cu129). No CUDA named anywhere is a CPU build;
    else the newest of what the wheels name and the release table (the engine's own kernels)."""
    torch = pinned_torch(engine_metadata)
    torch_cuda = runtime_cuda(torch_metadata) if torch_metadata is not None else None
    named = newest(runtime_cuda(engine_metadata), torch_cuda, local_cuda(wheel))
    if named is None:
        return EngineCuda(engine, package, version, None, "cpu", str(torch) if torch else None)
    cuda = newest(named, table_cuda(engine, version))
    return EngineCuda(engine, package, version, cuda, "metadata", str(torch) if torch else None, torch_cuda)


def _chain(need: EngineCuda) -> str:
    head = f"{need.package} {need.version}"
    if need.source == "table":
        return f"{head} is built for CUDA {need.cuda} (vllmctl's table: its wheel's METADATA was not read)"
    if need.torch and need.torch_cuda:
        built = f"pins {need.torch}, built for CUDA {need.torch_cuda}"
        return f"{head} {built}" + (
            f" (its own kernels: CUDA {need.cuda})" if need.cuda != need.torch_cuda else ""
        )
    return f"{head} is built for CUDA {need.cuda}"


def check_driver(need: EngineCuda, driver_branch: str | None) -> None:
    """Raise before installing an engine whose CUDA build the (pinned or running) driver cannot run."""
    if need.cuda is None or not needs_cuda(need.package):
        return
    minimum = CUDA_MIN_DRIVER.get(need.cuda) or min(
        (b for c, b in CUDA_MIN_DRIVER.items() if Version(c) >= Version(need.cuda)), default=None
    )
    if minimum is None:
        raise OpError(
            f"{_chain(need)}, a CUDA vllmctl knows no minimum driver for",
            "pin an engine version (engine.version) built for CUDA 13.0 or older",
        )
    if driver_branch is None:
        raise OpError(
            f"{_chain(need)}, which needs driver >= {minimum}, and the host has no NVIDIA driver",
            f"pin one with driver.branch: '{minimum}' (or newer), or use a CPU variant (engine.package)",
        )
    if int(driver_branch.split(".")[0]) < minimum:
        raise OpError(
            f"{_chain(need)}, which needs driver >= {minimum}; the host's is {driver_branch}",
            f"raise driver.branch to '{minimum}' or newer, or pin an older engine version (engine.version) "
            "built for an older CUDA",
        )
