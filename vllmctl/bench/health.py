"""Health polling of one engine endpoint: `/health` answers 200, then `/v1/models` lists the served model.

Retries with growing waits up to a deadline (Kamal style); the clock and sleep are passed in, nothing hidden.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

import httpx

# The startup deadline is a fixed part plus a part per GiB of weights:
# - FLOOR_S covers what every start pays whatever the size: Python and CUDA initialisation (~20 s),
#   torch.compile on a cold cache (~30-90 s), CUDA graph capture (~10-60 s), KV profiling; measured 36-57 s
#   for the lab's tiny model on 2 CPU cores, and 1-3 min for 7-8B models on one GPU.
# - SLOPE_S_PER_GIB is reading the weights at ~256 MiB/s, a slow disk or network filesystem with a cold
#   page cache (local NVMe is 5-10x faster): 16 GiB (8B bf16) adds 64 s, 131 GiB (70B bf16) adds 524 s.
FLOOR_S = 300.0
SLOPE_S_PER_GIB = 4.0
FIRST_WAIT_S = 0.5
WAIT_GROWTH = 1.5
MAX_WAIT_S = 10.0
PROBE_TIMEOUT_S = 5.0

Stage = Literal["health", "models", "ready"]


def startup_deadline_s(weights_gib: float) -> float:
    """Seconds to wait for an engine holding `weights_gib` of weights (per node) to become ready."""
    return FLOOR_S + SLOPE_S_PER_GIB * max(0.0, weights_gib)


def growing_waits(
    first_s: float = FIRST_WAIT_S, growth: float = WAIT_GROWTH, cap_s: float = MAX_WAIT_S
) -> Iterator[float]:
    """0.5, 0.75, 1.125, ... seconds, never above `cap_s`."""
    wait = first_s
    while True:
        yield min(wait, cap_s)
        wait *= growth


@dataclass(frozen=True)
class Progress:
    """What one failed attempt found, and how long the poller waits before the next."""

    attempt: int
    elapsed_s: float
    stage: Stage
    error: str
    next_wait_s: float


class HealthCheck(Protocol):
    """How the gate waits for health: on_progress may raise to stop (the unit died); api_key goes to /v1."""

    def __call__(
        self,
        base_url: str,
        model: str,
        deadline_s: float,
        on_progress: Callable[[Progress], None],
        api_key: str | None = None,
    ) -> HealthResult: ...


@dataclass(frozen=True)
class HealthResult:
    ok: bool
    elapsed_s: float
    attempts: int
    stage: Stage  # how far the last attempt got: "ready" when ok
    last_error: str = ""


def auth_headers(api_key: str | None) -> dict[str, str]:
    """What an engine started with `--api-key` (VLLM_API_KEY) wants on every /v1 request."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def probe(
    client: httpx.Client, base_url: str, model_id: str, timeout_s: float, api_key: str | None = None
) -> tuple[Stage, str]:
    """One attempt: ('ready', '') or the stage that failed and why."""
    base = base_url.rstrip("/")
    try:
        health = client.get(f"{base}/health", timeout=timeout_s)
        if health.status_code != 200:
            return "health", f"GET /health answered {health.status_code}"
        models = client.get(f"{base}/v1/models", timeout=timeout_s, headers=auth_headers(api_key))
        if models.status_code != 200:
            return "models", f"GET /v1/models answered {models.status_code}"
        listed = [str(entry.get("id")) for entry in models.json().get("data", [])]
    except httpx.HTTPError as exc:
        return "health", f"{type(exc).__name__}: {exc}".rstrip(": ")
    except (ValueError, AttributeError):
        return "models", "GET /v1/models did not return an OpenAI model list"
    if model_id not in listed:
        return "models", f"/v1/models lists {', '.join(listed) or 'nothing'}, not {model_id}"
    return "ready", ""


def wait_healthy(
    base_url: str,
    model_id: str,
    deadline_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    on_progress: Callable[[Progress], None] | None = None,
    client: httpx.Client | None = None,
    waits: Iterator[float] | None = None,
    api_key: str | None = None,
) -> HealthResult:
    """Poll until the endpoint serves `model_id` or `deadline_s` has passed; never sleeps past it."""
    own_client = client is None
    http = client or httpx.Client(trust_env=False)
    pauses = waits or growing_waits()
    start = clock()
    attempts = 0
    try:
        while True:
            attempts += 1
            remaining = deadline_s - (clock() - start)
            timeout = max(0.1, min(PROBE_TIMEOUT_S, remaining))
            stage, error = probe(http, base_url, model_id, timeout, api_key)
            elapsed = clock() - start
            if stage == "ready":
                return HealthResult(True, elapsed, attempts, stage)
            wait = min(next(pauses), deadline_s - elapsed)
            if wait <= 0:
                return HealthResult(False, elapsed, attempts, stage, error)
            if on_progress is not None:
                on_progress(Progress(attempts, elapsed, stage, error, wait))
            sleep(wait)
    finally:
        if own_client:
            http.close()
