"""The unit suite never reaches a package index: the engine's CUDA look-up gets an index that answers 503
(so the table answers, with its warning), and reads no cache a real run left in ~/.cache."""

from __future__ import annotations

import httpx
import pytest


@pytest.fixture(autouse=True)
def no_package_index(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    from vllmctl.runner.fleet import engine_cuda

    unreachable = httpx.MockTransport(lambda request: httpx.Response(503, text="no index in unit tests"))
    monkeypatch.setattr(engine_cuda, "TRANSPORT", unreachable)
    # shared by the session: nothing is stored through a 503, and tests that store pass their own environ
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))
