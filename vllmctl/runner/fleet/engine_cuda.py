"""Per host, the CUDA each engine it installs needs: read once per (index, package, version) from the index
and cached on the controller (plans stay fast and work offline once read); else the table, with a warning."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Generator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from vllmctl.inventory.model import EngineSpec
from vllmctl.ops.base import OpError
from vllmctl.ops.engine_cuda import CUDA_MIN_DRIVER, EngineCuda, check_driver, needs_cuda, table_reading
from vllmctl.render.quoting import redact_text
from vllmctl.runner.fleet.engine_index import PYPI, Warn, read_engine_cuda
from vllmctl.tasks.desired import HostContext, index_credentials

TIMEOUT = httpx.Timeout(20.0, connect=5.0)  # an unreachable index must not hold a plan up
TRANSPORT: httpx.BaseTransport | None = None  # the unit suite puts a fake here: it never reaches an index


def default_root(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "vllmctl" / "engine-cuda"


class CudaCache:
    """Readings from the wheels only (never the table's answer), keyed by index, package and version: a
    release's METADATA never changes, so an entry never expires."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, index: str, package: str, version: str) -> Path:
        key = f"{index}\n{package}\n{version}".encode()
        return self.root / f"{hashlib.sha256(key).hexdigest()[:32]}.json"

    def load(self, index: str, engine: EngineSpec) -> EngineCuda | None:
        try:
            doc = json.loads(self.path(index, engine.distribution, engine.version).read_text())
        except (OSError, ValueError):
            return None
        args = {"engine": engine.name, "package": engine.distribution, "version": engine.version}
        return EngineCuda.from_args({**args, "cuda": doc}) if isinstance(doc, dict) else None

    def store(self, index: str, found: EngineCuda) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self.path(index, found.package, found.version).write_text(json.dumps(found.to_args()) + "\n")
        except OSError:
            pass  # a cache that cannot be written only means reading the index again next time


class _IndexAuth(httpx.Auth):
    """The index's USER:PASSWORD, sent to the index's own host only (files may live on another)."""

    def __init__(self, index: str, credentials: str) -> None:
        self.host = httpx.URL(index).host
        user, _, password = credentials.partition(":")
        self.basic = httpx.BasicAuth(user, password)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if request.url.host == self.host:
            yield from self.basic.auth_flow(request)
        else:
            yield request


def _fallback(engine: EngineSpec, why: str, warn: Warn) -> EngineCuda:
    table = table_reading(engine.name, engine.distribution, engine.version)
    driver = (
        f"driver >= {CUDA_MIN_DRIVER[table.cuda]}" if table.cuda in CUDA_MIN_DRIVER else "no known minimum"
    )
    warn(
        f"{engine.distribution} {engine.version}: {why}; the driver check falls back to vllmctl's table "
        f"(ENGINE_CUDA): CUDA {table.cuda}, {driver}"
    )
    return table


def read_one(
    engine: EngineSpec,
    source: str | None,
    credentials: str | None,
    cache: CudaCache,
    online: bool,
    warn: Warn,
    transport: httpx.BaseTransport | None = None,
) -> EngineCuda:
    """`source`: the index URL or controller wheelhouse the host installs from (None: PyPI). A CPU build
    needs no CUDA and no look-up."""
    if not needs_cuda(engine.distribution):
        return table_reading(engine.name, engine.distribution, engine.version)
    index = source or PYPI
    cached = cache.load(index, engine)
    if cached is not None:
        return cached
    if not online and index.startswith(("http://", "https://")):
        return _fallback(engine, f"offline, and {redact_text(index)} was never read for it", warn)
    auth = _IndexAuth(index, credentials) if credentials and index.startswith("http") else None
    try:
        via = transport or TRANSPORT
        with httpx.Client(timeout=TIMEOUT, follow_redirects=True, auth=auth, transport=via) as client:
            found = read_engine_cuda(client, index, engine.name, engine.distribution, engine.version)
    except (
        httpx.HTTPError,
        LookupError,
        OSError,
        ValueError,
        KeyError,
        StopIteration,
        zipfile.BadZipFile,
    ) as exc:
        return _fallback(engine, f"its wheel's METADATA not read from {redact_text(index)} ({exc})", warn)
    cache.store(index, found)
    return found


def _wheelhouse(ctx: HostContext) -> str | None:
    found = ctx.host.vars.get("engine_wheelhouse")
    return str(found) if found else None


def with_engine_cuda(
    contexts: Mapping[str, HostContext],
    warn: Warn,
    online: bool = True,
    environ: Mapping[str, str] = os.environ,
    transport: httpx.BaseTransport | None = None,
) -> dict[str, HostContext]:
    """Each context with `engine_cuda` for the engines its models use, each release read once."""
    cache = CudaCache(default_root(environ))
    memo: dict[tuple[str, str, str | None], EngineCuda] = {}
    updated = {}
    for name, ctx in contexts.items():
        readings: dict[str, Mapping[str, Any]] = {}
        for engine in {ctx.engine(m) for m in ctx.staged_models()}:
            source = _wheelhouse(ctx) or engine.index_url
            key = (engine.distribution, engine.version, source)
            if key not in memo:
                credentials = ctx.secrets.get(index_credentials(engine) or "")
                memo[key] = read_one(engine, source, credentials, cache, online, warn, transport)
            readings[f"{engine.name}-{engine.version}"] = memo[key].to_args()
        updated[name] = replace(ctx, engine_cuda=readings)
    return updated


def engine_driver_errors(
    contexts: Mapping[str, HostContext], warn: Warn, online: bool = True
) -> list[dict[str, str]]:
    """For `vllmctl plan`: each host with a pinned `driver.branch` whose engines need a newer driver."""
    pinned = {name: ctx for name, ctx in contexts.items() if ctx.host.driver.branch is not None}
    errors = []
    for name, ctx in with_engine_cuda(pinned, warn, online).items():
        for engine in sorted({ctx.engine(m) for m in ctx.staged_models()}, key=lambda e: (e.name, e.version)):
            reading = ctx.engine_cuda[f"{engine.name}-{engine.version}"]
            args = {"engine": engine.name, "package": engine.distribution, "version": engine.version}
            try:
                check_driver(EngineCuda.from_args({**args, "cuda": reading}), str(ctx.host.driver.branch))
            except OpError as exc:
                errors.append({"host": name, "message": exc.message, "hint": exc.hint})
    return errors
