"""The presets tests' fixtures, defined once in tests/support/presets_fixtures.py."""

from presets_fixtures import load, problems

__all__ = ["load", "problems"]
