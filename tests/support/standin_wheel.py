"""Builds the lab's vLLM stand-in (`tests/multinode/standin/`) into a wheel with pip, into the lab wheelhouse
that the lab package server serves, once per content of its source (a manifest records the hash)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.utils import parse_wheel_filename

SOURCE = Path(__file__).parent / "standin"
PACKAGE = "vllm-ray-standin"
MANIFEST = "standin-wheel.json"


def source_files(source: Path = SOURCE) -> list[Path]:
    skipped = ("__pycache__", "build", ".egg-info")
    return sorted(
        p
        for p in source.rglob("*")
        if p.is_file() and not any(s in part for part in p.parts for s in skipped)
    )


def source_sha256(source: Path = SOURCE) -> str:
    digest = hashlib.sha256()
    for path in source_files(source):
        digest.update(str(path.relative_to(source)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def ensure_standin_wheel(dest: Path | None = None, source: Path = SOURCE) -> tuple[str, Path]:
    """(version, wheel path) of the stand-in in `dest` (default: the lab wheelhouse), built when missing or
    when its source changed; pip builds it in a copy of the source, so the tree stays clean."""
    if dest is None:
        from vllmctl.lab.wheelhouse import ensure_wheelhouse

        dest = ensure_wheelhouse()
    digest = source_sha256(source)
    try:
        manifest = json.loads((dest / MANIFEST).read_text())
    except (OSError, ValueError):
        manifest = {}
    wheel = dest / str(manifest.get("file", ""))
    if manifest.get("source_sha256") == digest and wheel.is_file():
        return str(parse_wheel_filename(wheel.name)[1]), wheel
    with tempfile.TemporaryDirectory() as scratch:
        copy, out = Path(scratch) / "standin", Path(scratch) / "out"
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
        argv = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(out), str(copy)]
        built = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        assert built.returncode == 0, f"building the stand-in wheel failed:\n{built.stderr[-3000:]}"
        [made] = out.glob("*.whl")
        for old in dest.glob("vllm_ray_standin-*.whl"):
            old.unlink()
        shutil.move(made, dest / made.name)
    (dest / MANIFEST).write_text(json.dumps({"source_sha256": digest, "file": made.name}, indent=2) + "\n")
    return str(parse_wheel_filename(made.name)[1]), dest / made.name
