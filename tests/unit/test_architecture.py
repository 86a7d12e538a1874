"""Architecture boundaries, read from the source: only transport/ touches SSH libraries, and the pure
modules import nothing that reaches the network, processes or the clock, and print nothing."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from source_imports import imports_of

PACKAGE = Path(__file__).resolve().parents[2] / "vllmctl"
PURE = [
    "catalog",
    "inventory",
    "planner",
    "facts",
    "ops",
    "render",
    "tasks",
    "status",
    "observe",
    "releases",
    "multinode",
    "runner/core/plan.py",
]
SSH_LIBS = {"fabric", "paramiko", "invoke"}
BANNED_IN_PURE = {"vllmctl.transport", "subprocess", "socket", "time", "paramiko", "fabric", "threading"}


def _modules(entry: str) -> list[Path]:
    path = PACKAGE / entry
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


def _root_names(names: set[str]) -> set[str]:
    return {name.split(".")[0] for name in names} | names


def test_only_transport_imports_ssh_libraries() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(SSH_LIBS & _root_names(imports_of(path)))
        for path in PACKAGE.rglob("*.py")
        if path.parent != PACKAGE / "transport"
    }
    assert {k: v for k, v in offenders.items() if v} == {}


# catalog/loader.py is the catalog's edge: it reads a local config.json or the hub (docs/planner.md).
EDGES = {PACKAGE / "catalog" / "loader.py"}
PURE_FILES = [p for entry in PURE if (PACKAGE / entry).exists() for p in _modules(entry) if p not in EDGES]


@pytest.mark.parametrize("path", PURE_FILES, ids=[str(p.relative_to(PACKAGE)) for p in PURE_FILES])
def test_pure_modules_import_no_effects_and_do_not_print(path: Path) -> None:
    names = _root_names(imports_of(path))
    assert sorted(BANNED_IN_PURE & names) == []
    tree = ast.parse(path.read_text())
    library = [node for node in tree.body if not _is_main_guard(node)]  # a `python -m` entry may print
    calls = [
        node.lineno
        for top in library
        for node in ast.walk(top)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
    ]
    assert calls == []


def _is_main_guard(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)


# the lab builds its own throwaway test hosts; facts/system.py only parses /etc/os-release with shlex.split;
# inventory/ssh_args.py only splits ansible_ssh_common_args with shlex.split, as Ansible's ssh plugin does
QUOTING_EXEMPT = {"render/quoting.py", "facts/system.py", "inventory/ssh_args.py"}


def test_only_quoting_py_quotes_for_a_target() -> None:
    """One quoting function per target: every shell word goes through quoting.shell_word/shell_join, every
    systemd and env-file value through its filter; no module hand-rolls `%`/`$` escapes or calls shlex."""
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative in QUOTING_EXEMPT or relative.startswith("lab/"):
            continue
        text = path.read_text()
        found = [
            what
            for what in ("import shlex", 'replace("%"', "replace('%'", 'replace("$"', "Environment=")
            if what in text
        ]
        if found:
            offenders[relative] = found
    assert offenders == {}


# Imported for real, each in a fresh process: what a core module pulls in through every import it makes.
NETWORK_LIBS = ("paramiko", "fabric", "invoke", "httpx", "aiohttp", "requests", "urllib3", "huggingface_hub")
EDGE_MODULES = (
    "vllmctl.transport",
    "vllmctl.console",
    "vllmctl.runner.core.remote",
    "vllmctl.runner.core.execute",
    "vllmctl.runner.core.playbook_run",
)
# Loaded once before the forks: third-party libraries the core may use, none of them banned (were one to
# load a banned library, every module would be reported). Saves each fork ~0.1 s of the same imports.
PRELOADED = ("yaml", "jsonschema", "jinja2")
PROBE = """
import importlib, os, sys
banned = sys.argv[1].split(",")
for lib in sys.argv[2].split(","):
    importlib.import_module(lib)
for name in sys.argv[3:]:
    pid = os.fork()
    if pid == 0:
        importlib.import_module(name)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in banned or m in banned)
        print(name, *loaded) if loaded else None
        sys.stdout.flush()
        os._exit(0)
    os.waitpid(pid, 0)
"""


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_pure_modules_load_no_network_ssh_or_console_module_transitively() -> None:
    """`import` of any core module, in a process that has imported nothing else of vllmctl, loads no SSH or
    HTTP library, no transport and no console: the pure core stays pure through what it imports."""
    names = [_module_name(path) for path in PURE_FILES]
    banned = ",".join((*NETWORK_LIBS, *EDGE_MODULES))
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, banned, ",".join(PRELOADED), *names],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert probe.stdout.splitlines() == [], probe.stdout


def _import_graph() -> dict[str, set[str]]:
    modules = {_module_name(path) for path in PACKAGE.rglob("*.py")}
    # a package importing its own submodules is not a cycle
    return {
        _module_name(path): (imports_of(path) & modules) - {_module_name(path)}
        for path in PACKAGE.rglob("*.py")
    }


def test_no_import_cycles_between_modules() -> None:
    graph = _import_graph()
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the current path, 2 finished

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for imported in sorted(graph[module]):
            if state.get(imported) == 1:
                cycles.append([*path[path.index(imported) :], imported])
            elif imported not in state:
                visit(imported, [*path, imported])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_at_most_eight_loose_top_level_modules() -> None:
    loose = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(loose) <= 8, loose
