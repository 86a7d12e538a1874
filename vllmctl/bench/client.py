"""The smoke benchmark's client: streams `/v1/completions` with aiohttp (the HTTP stack `vllm bench serve`
uses, so both pay the same client CPU) at a few concurrency levels.

The clock is passed in; every request is bounded in time, every level in count and time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING

from vllmctl.bench.report import EndpointReport, LoadSpec
from vllmctl.bench.sse import SseParser, classify
from vllmctl.bench.stats import LevelSummary, RequestResult, summarize

if TYPE_CHECKING:  # imported where a benchmark runs: every apply imports this module, few run the smoke bench
    import aiohttp

Clock = Callable[[], float]


def completion_payload(model_id: str, prompt: str, output_tokens: int) -> dict[str, object]:
    """The body `vllm bench serve` sends: fixed output length, EOS ignored, server-default sampling, usage."""
    return {
        "model": model_id,
        "prompt": prompt,
        "max_tokens": output_tokens,
        "ignore_eos": True,
        "repetition_penalty": 1.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def stream_completion(
    session: aiohttp.ClientSession, url: str, payload: dict[str, object], clock: Clock
) -> RequestResult:
    """One streamed completion, timed like vLLM's `async_request_openai_completions`."""
    import aiohttp

    start = clock()
    last = start
    ttft = 0.0
    gaps: list[float] = []
    chunks = 0
    usage: dict[str, int] = {}
    try:
        async with session.post(url, json=payload) as response:
            if response.status != 200:
                body = (await response.read()).decode(errors="replace")[:300]
                return RequestResult(False, start, error=f"HTTP {response.status}: {body}")
            parser = SseParser()
            async for data in _events(response, parser):
                message = classify(data)
                if message.kind == "error":
                    return RequestResult(False, start, error=message.error)
                if message.kind == "usage":
                    usage = message.usage
                elif message.kind == "token":
                    now = clock()
                    if chunks == 0:
                        ttft = now - start
                    else:
                        gaps.append(now - last)
                    last = now
                    chunks += 1
                elif message.kind == "done":
                    break
    except aiohttp.ClientError as exc:
        return RequestResult(False, start, error=f"{type(exc).__name__}: {exc}".rstrip(": "))
    if chunks == 0:
        return RequestResult(False, start, error="the stream ended before any token chunk")
    return RequestResult(
        ok=True,
        start=start,
        ttft=ttft,
        itl=tuple(gaps),
        latency=last - start,
        # Without a usage chunk, count chunks (vLLM sends one token per chunk when streaming).
        output_tokens=usage.get("completion_tokens", chunks),
        prompt_tokens=usage.get("prompt_tokens", 0),
    )


async def _events(response: aiohttp.ClientResponse, parser: SseParser) -> AsyncIterator[str]:
    async for chunk in response.content.iter_any():
        for data in parser.feed(chunk):
            yield data
    for data in parser.close():
        yield data


async def run_level(
    session: aiohttp.ClientSession,
    url: str,
    model_id: str,
    prompts: Sequence[str],
    concurrency: int,
    spec: LoadSpec,
    clock: Clock,
) -> LevelSummary:
    """Send every prompt with at most `concurrency` in flight; what is unfinished at the deadline fails."""
    slots = asyncio.Semaphore(concurrency)
    start = clock()

    async def one(prompt: str, output_tokens: int) -> RequestResult:
        async with slots:
            payload = completion_payload(model_id, prompt, output_tokens)
            try:
                return await asyncio.wait_for(
                    stream_completion(session, url, payload, clock), spec.request_timeout_s
                )
            except TimeoutError:
                return RequestResult(False, clock(), error=f"no reply within {spec.request_timeout_s:g} s")

    tasks = [asyncio.create_task(one(prompt, spec.output_for(i))) for i, prompt in enumerate(prompts)]
    finished, unfinished = await asyncio.wait(tasks, timeout=spec.level_timeout_s)
    for task in unfinished:
        task.cancel()
    await asyncio.gather(*unfinished, return_exceptions=True)
    late = f"level deadline of {spec.level_timeout_s:g} s passed first"
    results = [t.result() if t in finished else RequestResult(False, error=late) for t in tasks]
    return summarize(results, concurrency, clock() - start)


async def run_benchmark(
    base_url: str,
    model_id: str,
    prompts_for: Callable[[int, int], list[str]],
    spec: LoadSpec,
    clock: Clock = time.perf_counter,
    on_level: Callable[[LevelSummary], None] | None = None,
    api_key: str | None = None,
) -> EndpointReport:
    """Every level of `spec` against one endpoint; `prompts_for(count, seed)` supplies fresh prompts.
    `api_key`: sent as a bearer token on every request (an engine started with `--api-key` wants it)."""
    import aiohttp

    url = f"{base_url.rstrip('/')}/v1/completions"
    widest = max(spec.concurrency)
    connector = aiohttp.TCPConnector(limit=widest)
    timeout = aiohttp.ClientTimeout(total=spec.request_timeout_s, connect=10.0)
    levels: list[LevelSummary] = []
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers) as session:
        if spec.warmup:
            # One request first, as `vllm bench serve` does, so a cold start is not billed to level one.
            payload = completion_payload(model_id, prompts_for(1, 0)[0], spec.output_tokens)
            warm = await stream_completion(session, url, payload, clock)
            if not warm.ok:
                return EndpointReport(base_url, model_id, error=f"warm-up request failed: {warm.error}")
        for seed, concurrency in enumerate(spec.concurrency, start=1):
            prompts = prompts_for(spec.requests_for(concurrency), seed)
            summary = await run_level(session, url, model_id, prompts, concurrency, spec, clock)
            levels.append(summary)
            if on_level is not None:
                on_level(summary)
    return EndpointReport(base_url, model_id, tuple(levels))
