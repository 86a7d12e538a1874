"""The engine's CUDA read from its package index without installing it (PEP 691/503 listing, PEP 658 metadata,
else the wheel's METADATA over HTTP ranges), cached on the controller; the release table when unreachable."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

import httpx
from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from vllmctl.ops.engine_cuda import EngineCuda, from_metadata, pinned_torch

PYPI = "https://pypi.org/simple"
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
TAIL = 1 << 16  # one range request usually holds a wheel's whole central directory
Warn = Callable[[str], None]


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str  # an http(s) URL, or a path in a controller wheelhouse
    metadata: bool = False  # PEP 658/714: `<url>.metadata` is served


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "a" and found.get("href"):
            self.found.append((str(found["href"]), found))


def _advertised(value: object) -> bool:
    return bool(value) and value not in ("false", "False")


def list_files(client: httpx.Client, index: str, name: str) -> list[IndexFile]:
    """A project's files on a simple index, JSON (PEP 691) when it answers so, else the HTML page."""
    if not index.startswith(("http://", "https://")):
        return [IndexFile(p.name, str(p)) for p in sorted(Path(index).glob("*.whl"))]
    response = client.get(f"{index.rstrip('/')}/{canonicalize_name(name)}/", headers={"Accept": ACCEPT})
    response.raise_for_status()
    base = str(response.url)
    if response.headers.get("content-type", "").startswith("application/vnd.pypi.simple.v1+json"):
        return [
            IndexFile(
                str(f["filename"]),
                urljoin(base, str(f["url"])),
                _advertised(f.get("core-metadata") or f.get("dist-info-metadata")),
            )
            for f in response.json().get("files", [])
        ]
    parser = _Anchors()
    parser.feed(response.text)
    files = []
    for href, attrs in parser.found:
        url = urldefrag(urljoin(base, href)).url
        meta = attrs.get("data-core-metadata") or attrs.get("data-dist-info-metadata")
        files.append(IndexFile(unquote(urlsplit(url).path.rsplit("/", 1)[-1]), url, _advertised(meta)))
    return files


def _platform_rank(filename: str) -> int:
    _, _, _, tags = parse_wheel_filename(filename)
    platforms = {t.platform for t in tags}
    if any("x86_64" in p and "linux" in p for p in platforms):
        return 0
    if any("aarch64" in p and "linux" in p for p in platforms):
        return 1
    return 2 if "any" in platforms else 3


def pick_wheel(files: list[IndexFile], name: str, spec: SpecifierSet) -> tuple[IndexFile, Version] | None:
    """The wheel pip would take for `name<spec>` on a Linux host: the newest matching version (a local
    label such as +cu129 sorts above the plain one), a Linux x86_64 build first."""
    wanted = canonicalize_name(name)
    found: list[tuple[IndexFile, Version]] = []
    for file in files:
        try:
            project, version, _, _ = parse_wheel_filename(file.filename)
        except InvalidWheelFilename:
            continue
        if (
            project == wanted
            and spec.contains(version, prereleases=True)
            and _platform_rank(file.filename) < 3
        ):
            found.append((file, version))
    if not found:
        return None
    newest = max(v for _, v in found)
    return min(((f, v) for f, v in found if v == newest), key=lambda fv: _platform_rank(fv[0].filename))


class _Ranges(io.RawIOBase):
    """A remote wheel read through `Range` requests, so zipfile reads its directory and METADATA only."""

    def __init__(self, client: httpx.Client, url: str) -> None:
        self.client, self.url, self.pos = client, url, 0
        first = client.get(url, headers={"Range": f"bytes=-{TAIL}"})
        first.raise_for_status()
        if first.status_code != 206:
            raise _NoRanges(first.content)
        self.size = int(first.headers["content-range"].rsplit("/", 1)[1])
        self.tail = first.content

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.pos = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence] + offset
        return self.pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        end = min(self.pos + len(buffer), self.size)
        if end <= self.pos:
            return 0
        tail_start = self.size - len(self.tail)
        if self.pos >= tail_start:
            data = self.tail[self.pos - tail_start : end - tail_start]
        else:
            response = self.client.get(self.url, headers={"Range": f"bytes={self.pos}-{end - 1}"})
            response.raise_for_status()
            data = response.content[: end - self.pos]
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


class _NoRanges(Exception):
    def __init__(self, body: bytes) -> None:
        super().__init__("no range support")
        self.body = body


def _from_zip(source: io.BufferedReader | io.BytesIO | str) -> str:
    with zipfile.ZipFile(source) as wheel:
        name = next(n for n in wheel.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        return wheel.read(name).decode("utf-8")


def wheel_metadata(client: httpx.Client, file: IndexFile) -> str:
    """PEP 658's `.metadata` when advertised, else METADATA out of the wheel: by ranges, whole if need be."""
    if not file.url.startswith(("http://", "https://")):
        return _from_zip(file.url)
    if file.metadata:
        response = client.get(file.url + ".metadata")
        if response.status_code == 200:
            return response.text
    try:
        return _from_zip(io.BufferedReader(_Ranges(client, file.url), TAIL))
    except _NoRanges as whole:  # a server without ranges sent the whole wheel
        return _from_zip(io.BytesIO(whole.body))


def read_engine_cuda(client: httpx.Client, index: str, engine: str, package: str, version: str) -> EngineCuda:
    """Raises LookupError when the index has no such wheel, httpx.HTTPError when it cannot be read."""
    picked = pick_wheel(list_files(client, index, package), package, SpecifierSet(f"=={version}"))
    if picked is None:
        raise LookupError(f"no Linux wheel of {package}=={version} there")
    engine_metadata = wheel_metadata(client, picked[0])
    torch_metadata = None
    torch = pinned_torch(engine_metadata)
    if torch is not None:
        found = pick_wheel(list_files(client, index, torch.name), torch.name, torch.specifier)
        if found is None:
            raise LookupError(f"no Linux wheel of {torch} there")
        torch_metadata = wheel_metadata(client, found[0])
    return from_metadata(engine, package, version, engine_metadata, torch_metadata, str(picked[1]))
