"""The vLLM stand-in's effects (vllmctl lab; NOT vLLM): one Ray task per pipeline stage, placed like vLLM's
workers (a STRICT_SPREAD placement group of PP bundles of TP GPUs), then an OpenAI-compatible HTTP server."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from vllm_ray_standin.answers import (
    LOG_PREFIX,
    Options,
    Refused,
    Stage,
    check_start,
    completion,
    metrics_text,
    models_list,
    not_found,
    parse,
    stream_chunks,
)

PLACEMENT_TIMEOUT_S = 120.0


def log(message: str) -> None:
    print(f"{LOG_PREFIX} {message}", file=sys.stderr, flush=True)


def read_config(model: str) -> dict[str, Any]:
    path = Path(model) / "config.json"
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise Refused(
            f"cannot read {path}: {exc} (the stand-in serves local model directories only)"
        ) from exc
    return loaded if isinstance(loaded, dict) else {}


def check_tokenizer(options: Options) -> None:
    """vLLM loads the tokenizer before it starts: a `--tokenizer` directory that is not there stops it (the
    planner cannot know, so the lab uses this for an engine that refuses a start the planner accepted)."""
    path = options.tokenizer
    if path is not None and not (Path(path) / "tokenizer_config.json").is_file():
        raise Refused(
            f"OSError: Can't load tokenizer for '{path}'. Make sure '{path}' is the correct path to a "
            "directory containing all relevant files for a tokenizer."
        )


def stage_probe(model: str) -> tuple[str, bool]:
    """Runs on the stage's node, in a Ray worker."""
    return socket.gethostname(), (Path(model) / "config.json").is_file()


def place_stages(options: Options) -> list[Stage]:
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
    bundles = [{"GPU": float(options.tp), "CPU": 1.0} for _ in range(options.pp)]
    group = placement_group(bundles, strategy="STRICT_SPREAD")
    try:
        ray.get(group.ready(), timeout=PLACEMENT_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError as exc:
        raise Refused(
            f"Ray could not place {options.pp} bundles of {bundles[0]} on {options.pp} different nodes in "
            f"{PLACEMENT_TIMEOUT_S:.0f} s: ray.available_resources() = {ray.available_resources()}"
        ) from exc
    probe = ray.remote(stage_probe)
    pending = [
        probe.options(
            num_cpus=1,
            num_gpus=options.tp,
            scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=index),
        ).remote(options.model)
        for index in range(options.pp)
    ]
    stages = [Stage(hostname, has_model) for hostname, has_model in ray.get(pending)]
    missing = [stage.hostname for stage in stages if not stage.has_model]
    if missing:
        raise Refused(
            f"{options.model}/config.json is missing on {', '.join(missing)}: stage the model there"
        )
    return stages  # the placement group stays reserved while this driver lives, as vLLM's workers hold theirs


@dataclass
class Served:
    options: Options
    stages: list[Stage]
    created: int = field(default_factory=lambda: int(time.time()))
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.requests += 1
            body = completion(self.options, self.stages, request, self.requests, int(time.time()))
            self.prompt_tokens += body["usage"]["prompt_tokens"]
            self.completion_tokens += body["usage"]["completion_tokens"]
        return body


def handler_for(served: Served) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, b"", "text/plain")
            elif self.path == "/v1/models":
                self._json(200, models_list(served.options, served.created))
            elif self.path == "/metrics":
                with served.lock:
                    text = metrics_text(
                        served.options, served.requests, served.prompt_tokens, served.completion_tokens
                    )
                self._send(200, text.encode(), "text/plain; version=0.0.4")
            else:
                self._json(404, {"error": {"message": f"no route {self.path}", "code": 404}})

        def do_POST(self) -> None:
            if self.path != "/v1/completions":
                self._json(404, {"error": {"message": f"no route {self.path}", "code": 404}})
                return
            try:
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            except ValueError:
                self._json(400, {"error": {"message": "the body is not JSON", "code": 400}})
                return
            if not isinstance(request, dict) or request.get("model") not in served.options.served_names:
                model = request.get("model") if isinstance(request, dict) else None
                self._json(404, not_found(str(model)))
                return
            body = served.answer(request)
            if request.get("stream"):
                self._stream(stream_chunks(body, request))
            else:
                self._json(200, body)

        def _stream(self, chunks: list[dict[str, Any]]) -> None:
            """Server-sent events, then `[DONE]`; the connection closes after it (HTTP/1.0)."""
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for chunk in chunks:
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")

        def _json(self, status: int, body: dict[str, Any]) -> None:
            self._send(status, json.dumps(body).encode(), "application/json")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log(f"{self.address_string()} {format % args}")

    return Handler


def main(argv: Sequence[str] | None = None) -> int:
    options = parse(sys.argv[1:] if argv is None else argv)
    try:
        check_start(options, read_config(options.model))
        check_tokenizer(options)
        if os.environ.get("RAY_ADDRESS"):
            log(
                f"placing PP {options.pp} x TP {options.tp} on the Ray cluster at {os.environ['RAY_ADDRESS']}"
            )
            stages = place_stages(options)
        else:  # a single-node engine (no Ray cluster in its env file): the one stage is this host, no Ray
            stages = [Stage(*stage_probe(options.model))]
    except Refused as exc:
        log(str(exc))
        return 1
    log(f"pipeline stages on {', '.join(stage.hostname for stage in stages)}")
    server = ThreadingHTTPServer((options.host, options.port), handler_for(Served(options, stages)))
    server.daemon_threads = True
    log(f"serving {', '.join(options.served_names)} on http://{options.host}:{options.port}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:  # systemd stops the unit with SIGINT, as it stops vLLM
        log("stopped")
    return 0
