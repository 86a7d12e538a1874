"""The status tests' fixtures, defined once in tests/support/status_fixtures.py."""

from status_fixtures import queueing_vllm_port

__all__ = ["queueing_vllm_port"]
