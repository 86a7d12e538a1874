"""Command-line entry: builds the parser from the command modules and is the only place that exits.

Exit codes: 0 ok, 1 runtime failure, 2 bad input or usage, 3 plan/check found changes, 128+N stopped by
signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import traceback
from collections.abc import Sequence

from vllmctl import __version__
from vllmctl.commands import command_modules
from vllmctl.console import Ui
from vllmctl.errors import EXIT_FAILURE, VllmctlError
from vllmctl.runner.core import interrupt


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """All commands, or (`only`, the command on the command line) just that one: it is all the run needs."""
    parser = argparse.ArgumentParser(
        prog="vllmctl",
        description="Declarative provisioning for GPU fleets serving LLMs (vLLM, SGLang).",
        epilog="Exit codes: 0 ok, 1 runtime failure, 2 bad input or usage, 3 plan/check found changes.",
    )
    parser.add_argument("--version", action="version", version=f"vllmctl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in command_modules(only):
        module.register(sub)
    return parser


def _write_debug_log(exc: BaseException) -> str:
    directory = os.environ.get("VLLMCTL_LOG_DIR") or tempfile.gettempdir()
    fd, path = tempfile.mkstemp(prefix="vllmctl-debug-", suffix=".log", dir=directory)
    with os.fdopen(fd, "w") as handle:
        handle.write("".join(traceback.format_exception(exc)))
    return path


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # CI time limits, systemctl stop, a lost SSH


def _stop(signum: int, frame: object) -> None:
    """Ctrl-C, SIGTERM and SIGHUP end a run alike: hosts stop at a step boundary and unlock."""
    interrupt.on_signal(signum)


def main(argv: Sequence[str] | None = None) -> int:
    ui = Ui()
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(words[0] if words else None)
    args = parser.parse_args(words)
    interrupt.reset()
    before = {signum: signal.signal(signum, _stop) for signum in STOP_SIGNALS}
    try:
        code: int = args.func(args, ui)
        if interrupt.STOP.is_set():  # a run stopped its hosts at a step boundary and reported what it did
            ui.error(interrupt.reason())
            return 128 + (interrupt.received() or signal.SIGINT)
        return code
    except VllmctlError as exc:
        ui.error(exc.render())
        return exc.exit_code
    except KeyboardInterrupt:
        ui.error(interrupt.reason())
        return 128 + (interrupt.received() or signal.SIGINT)
    except Exception as exc:  # the one place a bug becomes a message and a log, never a traceback
        path = _write_debug_log(exc)
        ui.error(f"unexpected internal error: {type(exc).__name__}: {exc}\n  hint: details in {path}")
        return EXIT_FAILURE
    finally:
        tunnels = sys.modules.get("vllmctl.transport.tunnel")  # loaded only by runs that speak HTTP
        if tunnels is not None:
            tunnels.close_tunnels()  # the run's port forwards and their SSH connections, also after a failure
        for signum, handler in before.items():
            signal.signal(signum, handler)


if __name__ == "__main__":
    sys.exit(main())
