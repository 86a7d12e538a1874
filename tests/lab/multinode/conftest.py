"""The multinode tests' fixtures, defined once in tests/support/multinode_fixtures.py."""

from multinode_fixtures import load, problems, ray_lab

__all__ = ["load", "problems", "ray_lab"]
