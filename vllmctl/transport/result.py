"""What a remote command gave back, Invoke-style: a `Result` knows its host and command and words its own
failure (redacted, stderr tail); a `GroupResult` maps hosts to results and says which failed."""

from __future__ import annotations

from dataclasses import dataclass

from vllmctl.errors import VllmctlError
from vllmctl.render.quoting import redact_text

TAIL_CHARS = 2000
SHOWN_COMMAND_CHARS = 80


def tail(text: str, limit: int = TAIL_CHARS) -> str:
    return text if len(text) <= limit else "…" + text[-limit:]


@dataclass(frozen=True)
class Result:
    stdout: str
    stderr: str
    exited: int
    timed_out: bool = False
    command: str = ""  # as the caller gave it, before the sudo and timeout wrapping; never holds a secret
    host: str = ""  # the inventory name

    @property
    def ok(self) -> bool:
        return self.exited == 0 and not self.timed_out

    @property
    def failed(self) -> bool:
        return not self.ok

    @property
    def return_code(self) -> int:
        """Invoke's name for `exited`."""
        return self.exited

    def shown_command(self) -> str:
        """The command's first line, cut to a readable length, in backticks."""
        lines = self.command.strip().splitlines() or [""]
        first = lines[0]
        cut = len(lines) > 1 or len(first) > SHOWN_COMMAND_CHARS
        return f"`{redact_text(first[:SHOWN_COMMAND_CHARS])}{'…' if cut else ''}`"

    def output_tail(self, limit: int = 500) -> str:
        """The end of stderr (stdout when stderr is empty), URL credentials redacted; '(none)' when empty."""
        text = redact_text((self.stderr or self.stdout).strip())
        return (text[-limit:] if len(text) > limit else text) or "(none)"

    def headline(self, what: str = "") -> str:
        """`HOST: WHAT failed (exit N)`, or `timed out`; WHAT defaults to the command in backticks."""
        verb = "timed out" if self.timed_out else "failed"
        where = f"{self.host}: " if self.host else ""
        return f"{where}{what or self.shown_command()} {verb} (exit {self.exited})"

    def failure(self, what: str = "", limit: int = 500) -> str:
        """One message: the headline and the output's tail, e.g. "gpu-1: `apt-get update` failed (exit 100):
        E: ...". Empty for a command that succeeded."""
        return "" if self.ok else f"{self.headline(what)}: {self.output_tail(limit)}"

    def error(self, what: str = "", limit: int = 500) -> VllmctlError:
        """The error the runner raises for this failure: the headline, and `stderr: TAIL` as the hint."""
        return VllmctlError(self.headline(what), f"stderr: {self.output_tail(limit)}")


class GroupResult(dict[str, Result]):
    """Results by host, as Fabric's GroupResult: `.failed` and `.succeeded` are the subsets."""

    @property
    def failed(self) -> dict[str, Result]:
        return {host: result for host, result in self.items() if result.failed}

    @property
    def succeeded(self) -> dict[str, Result]:
        return {host: result for host, result in self.items() if result.ok}

    @property
    def ok(self) -> bool:
        return not self.failed
