"""The unit suite never reaches a package index: the engine's CUDA look-up gets an index that answers 503
(so the table answers, with its warning), and its cache lives in each test's own temporary directory."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest


@pytest.fixture(autouse=True)
def no_package_index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from vllmctl.runner import engine_cuda

    unreachable = httpx.MockTransport(lambda request: httpx.Response(503, text="no index in unit tests"))
    monkeypatch.setattr(engine_cuda, "TRANSPORT", unreachable)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
