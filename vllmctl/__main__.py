"""Entry for `python -m vllmctl`."""

from vllmctl.cli import main

raise SystemExit(main())
