"""Lets release tests import their builders (importlib mode puts no test dir on sys.path)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
