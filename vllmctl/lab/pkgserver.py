"""The lab's package server: a PEP 503 simple index over wheel folders and a flat Debian repo, over HTTP.

Run detached by `lab up` (`python -m vllmctl.lab.pkgserver ...`) on the bridge address; index pages are pure.
"""

from __future__ import annotations

import argparse
import html
import shutil
import sys
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)


def project_of(filename: str) -> str | None:
    """The normalised (PEP 503) project a distribution file belongs to, or None for other files."""
    try:
        if filename.endswith(".whl"):
            return str(canonicalize_name(parse_wheel_filename(filename)[0]))
        return str(canonicalize_name(parse_sdist_filename(filename)[0]))
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None


def distributions(folders: tuple[Path, ...] | list[Path]) -> dict[str, dict[str, Path]]:
    """project -> {filename -> path}; the first folder holding a filename wins."""
    found: dict[str, dict[str, Path]] = {}
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            project = project_of(path.name)
            if project is not None and path.is_file():
                found.setdefault(project, {}).setdefault(path.name, path)
    return found


def root_page(projects: list[str]) -> str:
    links = "\n".join(f'<a href="{quote(p)}/">{html.escape(p)}</a><br>' for p in sorted(projects))
    return f"<!DOCTYPE html>\n<html><head><title>Simple index</title></head><body>\n{links}\n</body></html>\n"


def project_page(project: str, filenames: list[str]) -> str:
    links = "\n".join(
        f'<a href="../../files/{quote(name)}">{html.escape(name)}</a><br>' for name in sorted(filenames)
    )
    title = html.escape(project)
    head = f"<!DOCTYPE html>\n<html><head><title>Links for {title}</title></head><body>\n"
    return f"{head}{links}\n</body></html>\n"


class PackageHandler(BaseHTTPRequestHandler):
    wheel_folders: tuple[Path, ...] = ()
    debian_root: Path = Path("/nonexistent")

    def do_HEAD(self) -> None:
        self._respond(send_body=False)

    def do_GET(self) -> None:
        self._respond(send_body=True)

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def _respond(self, send_body: bool) -> None:
        path = unquote(self.path.split("?", 1)[0])
        parts = [p for p in path.split("/") if p and p != "."]
        if ".." in parts:
            self.send_error(HTTPStatus.BAD_REQUEST)
            return
        dists = distributions(self.wheel_folders)
        if parts == ["simple"]:
            self._send_text(root_page(list(dists)), "text/html", send_body)
        elif len(parts) == 2 and parts[0] == "simple":
            files = dists.get(canonicalize_name(parts[1]))
            if files is None:
                self.send_error(HTTPStatus.NOT_FOUND)
            else:
                self._send_text(project_page(parts[1], list(files)), "text/html", send_body)
        elif len(parts) == 2 and parts[0] == "files":
            project = project_of(parts[1])
            found = dists.get(project or "", {}).get(parts[1])
            self._send_file(found, send_body)
        elif parts[:1] == ["debian"]:
            self._send_file(self.debian_root.joinpath(*parts[1:]), send_body)
        else:
            self.send_error(HTTPStatus.NOT_FOUND)

    def _send_text(self, text: str, content_type: str, send_body: bool) -> None:
        body = text.encode()
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", f"{content_type}; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _send_file(self, path: Path | None, send_body: bool) -> None:
        if path is None or not path.is_file():
            self.send_error(HTTPStatus.NOT_FOUND)
            return
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(path.stat().st_size))
        self.end_headers()
        if send_body:
            with path.open("rb") as handle:
                shutil.copyfileobj(handle, self.wfile, 1024 * 1024)


def serve(bind: str, port: int, wheel_folders: list[Path], debian_root: Path) -> None:
    class FleetPackageHandler(PackageHandler):
        pass

    FleetPackageHandler.wheel_folders = tuple(wheel_folders)
    FleetPackageHandler.debian_root = debian_root
    with ThreadingHTTPServer((bind, port), FleetPackageHandler) as server:
        server.daemon_threads = True
        server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="vllmctl.lab.pkgserver")
    parser.add_argument("--bind", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fleet", required=True, help="recorded so teardown knows its process")
    parser.add_argument("--wheels", action="append", type=Path, default=[])
    parser.add_argument("--debian", type=Path, required=True)
    args = parser.parse_args(argv)
    serve(args.bind, args.port, args.wheels, args.debian)


if __name__ == "__main__":
    main()
