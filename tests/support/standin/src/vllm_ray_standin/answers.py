"""The vLLM stand-in's pure parts (vllmctl lab; NOT vLLM): its command line, the starts real vLLM refuses,
and its OpenAI-shaped answers and `/metrics` text. Standard library only; unit-tested without Ray."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

LOG_PREFIX = "vLLM stand-in (vllmctl lab):"


class Refused(Exception):
    """A start the stand-in refuses; the message says why (and, where vLLM refuses it too, in its words)."""


@dataclass(frozen=True)
class Options:
    model: str
    served_names: tuple[str, ...]
    host: str
    port: int
    backend: str | None
    tp: int
    pp: int
    max_model_len: int | None
    tokenizer: str | None = None


@dataclass(frozen=True)
class Stage:
    """One pipeline stage as its Ray task saw its node."""

    hostname: str
    has_model: bool


def parse(argv: Sequence[str]) -> Options:
    """The flags the stand-in reads, in vLLM's spelling; every other flag is ignored, as the unit passes
    the engine arguments vllmctl chose for real vLLM."""
    parser = argparse.ArgumentParser(prog="vllm-ray-standin", add_help=False, allow_abbrev=False)
    parser.add_argument("--model", required=True)
    parser.add_argument("--served-model-name", nargs="+")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--distributed-executor-backend")
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--tokenizer")
    known, _others = parser.parse_known_args(list(argv))
    return Options(
        model=known.model,
        served_names=tuple(known.served_model_name or [known.model]),
        host=known.host,
        port=known.port,
        backend=known.distributed_executor_backend,
        tp=known.tensor_parallel_size,
        pp=known.pipeline_parallel_size,
        max_model_len=known.max_model_len,
        tokenizer=known.tokenizer,
    )


def check_start(options: Options, config: Mapping[str, Any]) -> None:
    """Raise `Refused` for a start the stand-in cannot serve, before it touches Ray."""
    if options.backend != "ray":
        raise Refused(
            f"serves only over Ray, got --distributed-executor-backend {options.backend or '(none)'}: "
            "pass --distributed-executor-backend ray (this is a test stand-in, not vLLM)"
        )
    derived = config.get("max_position_embeddings")
    if options.max_model_len is not None and isinstance(derived, int) and options.max_model_len > derived:
        # vLLM's own words (vllm/config/model.py), so the gate's error lines read the same
        raise Refused(
            f"ValueError: User-specified max_model_len ({options.max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={derived} in model's config.json)."
        )


def models_list(options: Options, created: int) -> dict[str, Any]:
    data = [
        {
            "id": name,
            "object": "model",
            "created": created,
            "owned_by": "vllm-ray-standin",
            "root": options.model,
            "max_model_len": options.max_model_len,
        }
        for name in options.served_names
    ]
    return {"object": "list", "data": data}


def completion_text(options: Options, stages: Sequence[Stage]) -> str:
    where = ", ".join(stage.hostname for stage in stages)
    return (
        f" vLLM stand-in (vllmctl lab) answering for {options.served_names[0]} over Ray, "
        f"PP {options.pp} x TP {options.tp}, pipeline stages on {where}."
    )


def completion(
    options: Options, stages: Sequence[Stage], request: Mapping[str, Any], number: int, created: int
) -> dict[str, Any]:
    """An OpenAI `text_completion` object; its text is the same for every prompt."""
    text = completion_text(options, stages)
    prompt_tokens = len(str(request.get("prompt", "")).split())
    completion_tokens = len(text.split())
    return {
        "id": f"cmpl-standin-{number}",
        "object": "text_completion",
        "created": created,
        "model": str(request.get("model")),
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def stream_chunks(body: Mapping[str, Any], request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A completion as vLLM streams it: one token (here: one word) per chunk, `max_tokens` of them when EOS
    is ignored (as `vllm bench serve` asks), then the usage chunk when `stream_options` asks for it."""
    words = [f" {word}" for word in body["choices"][0]["text"].split()]
    count = int(request.get("max_tokens") or len(words)) if request.get("ignore_eos") else len(words)
    base = {key: body[key] for key in ("id", "object", "created", "model")}
    chunks = [
        {
            **base,
            "choices": [{"index": 0, "text": words[i % len(words)], "logprobs": None, "finish_reason": None}],
        }
        for i in range(count)
    ]
    usage = {**body["usage"], "completion_tokens": count}
    usage["total_tokens"] = usage["prompt_tokens"] + count
    if (request.get("stream_options") or {}).get("include_usage"):
        chunks.append({**base, "choices": [], "usage": usage})
    return chunks


def not_found(model: str) -> dict[str, Any]:
    message = f"The model `{model}` does not exist."
    return {"error": {"message": message, "type": "NotFoundError", "param": None, "code": 404}}


def metrics_text(options: Options, requests: int, prompt_tokens: int, completion_tokens: int) -> str:
    """A few of vLLM's own series (what `vllmctl status` reads), labelled with the served model."""
    label = '{model_name="' + options.served_names[0] + '"}'
    done = '{finished_reason="stop",model_name="' + options.served_names[0] + '"}'
    lines = [
        f"vllm:num_requests_running{label} 0.0",
        f"vllm:num_requests_waiting{label} 0.0",
        f"vllm:kv_cache_usage_perc{label} 0.0",
        f"vllm:request_success_total{done} {float(requests)}",
        f"vllm:prompt_tokens_total{label} {float(prompt_tokens)}",
        f"vllm:generation_tokens_total{label} {float(completion_tokens)}",
    ]
    return "\n".join(lines) + "\n"
