"""Health polling of one engine endpoint: `/health` answers 200, then `/v1/models` lists the served model.

Retries with growing waits up to a deadline (Kamal style); the clock and sleep are passed in, nothing hidden.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from vllmctl.bench.readiness import (
    PROBE_TIMEOUT_S,
    HealthResult,
    Progress,
    Stage,
    growing_waits,
)

if TYPE_CHECKING:  # imported where an endpoint is polled: apply imports this module, a no-op apply polls none
    import httpx


def auth_headers(api_key: str | None) -> dict[str, str]:
    """What an engine started with `--api-key` (VLLM_API_KEY) wants on every /v1 request."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def probe(
    client: httpx.Client, base_url: str, model_id: str, timeout_s: float, api_key: str | None = None
) -> tuple[Stage, str]:
    """One attempt: ('ready', '') or the stage that failed and why."""
    import httpx

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
    import httpx

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
