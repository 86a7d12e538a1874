"""The bench tests' fixtures, defined once in tests/support/bench_fixtures.py."""

from bench_fixtures import fake_server, make_clock, vllm_server

__all__ = ["fake_server", "make_clock", "vllm_server"]
