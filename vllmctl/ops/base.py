"""What an operation yields: a Step of ordered actions (commands and uploads) or a no-op with its reason."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllmctl.errors import VllmctlError
from vllmctl.render.quoting import shell_join

Args = Mapping[str, Any]
Facts = Mapping[str, Any]
FactRequests = dict[str, tuple[str, ...]]


class OpError(VllmctlError):
    """The host is in a state an operation will not overwrite on its own (e.g. a file where a dir belongs)."""


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Command:
    """Either an argv (each word quoted with `quoting.shell_word` when sent) or a shell string whose values
    were each quoted with it."""

    argv: tuple[str, ...] = ()
    shell: str = ""
    sudo: bool = True
    # secret input the command reads itself (a mirror's credentials): never part of what is shown or run
    stdin: bytes = field(default=b"", repr=False)
    # a wait by design with its own deadline (the health wait): the runner gives it that long plus a margin
    # rather than --timeout, which is sized for one ordinary command and would cut it silently
    wait_s: float | None = None

    def render(self) -> str:
        return self.shell or shell_join(self.argv)


@dataclass(frozen=True)
class Upload:
    """A whole file sent through stdin (never argv), written to a temp name and renamed into place."""

    path: str
    content: str
    mode: str = "0644"
    owner: str = "root"
    group: str = "root"
    secret: bool = False

    @property
    def sha256(self) -> str:
        return sha256_text(self.content)

    def render(self) -> str:
        # secret: the content holds secrets or digests them; even a short digest of a short key can be guessed
        digest = "secret content" if self.secret else f"sha256 {self.sha256[:12]}"
        return f"upload {self.path} mode={self.mode} owner={self.owner}:{self.group} ({digest})"


Action = Command | Upload


@dataclass(frozen=True)
class FileChange:
    """Enough to show a unified diff: the current content is fetched only when --diff asks."""

    path: str
    new_content: str
    exists: bool
    secret: bool = False


@dataclass(frozen=True)
class Step:
    op: str
    target: str
    actions: tuple[Action, ...] = ()
    noop: str | None = None
    change: FileChange | None = None
    warnings: tuple[str, ...] = ()  # what the plan refused to act on (data read back from the host)
    # it stops, restarts or reboots what serves: the runner asks the rollout guard before it runs (and the
    # gateway drains the host), whatever the phase; tests/unit/ops/test_engine_stops.py keeps ops honest
    stops_engines: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.actions)

    def rendered(self) -> list[str]:
        return [action.render() for action in self.actions]


def noop(op: str, target: str, reason: str) -> Step:
    return Step(op=op, target=target, noop=reason)


def run(*argv: str, sudo: bool = True, wait_s: float | None = None) -> Command:
    return Command(argv=tuple(argv), sudo=sudo, wait_s=wait_s)


def make_dirs(*paths: str) -> Command:
    """Create the directories that are missing (0755 under umask 022). An existing one keeps its mode and
    owner: `install -d -m` would re-mode it, and a model's dest may be a shared /srv or /opt."""
    return Command(shell=f"umask 022 && mkdir -p -- {shell_join(paths)}")


def checked_switch(
    path: str, candidate: str, content: str, current: Facts, check: Command
) -> tuple[list[Action], FileChange | None]:
    """A config compared by hash with `current` (its path fact); a new one is uploaded as `candidate`,
    checked on the host by `check` (a refusal stops the step: the live file stays), then moved over `path`."""
    if current.get("sha256") == sha256_text(content):
        return [], None
    change = FileChange(path, content, exists=current.get("type") == "file")
    return [Upload(candidate, content), check, run("mv", "-f", candidate, path)], change


def keep_running(unit: str, state: Facts, reload: Sequence[Action]) -> list[Action]:
    """`unit` enabled; restarted when not active, else `reload` (empty when nothing it reads changed)."""
    actions: list[Action] = []
    if state.get("unit_file_state") != "enabled":
        actions.append(run("systemctl", "enable", unit))
    if state.get("active_state") != "active":
        actions.append(run("systemctl", "restart", unit))
    else:
        actions += reload
    return actions


def stop_and_disable(unit: str, state: Facts) -> list[Action]:
    """`unit` stopped and disabled, where it is enabled or running (the opposite of keep_running)."""
    if state.get("unit_file_state") == "enabled" or state.get("active_state") in ("active", "activating"):
        return [run("systemctl", "disable", "--now", unit)]
    return []


@dataclass(frozen=True)
class Operation:
    """`facts(args)` names the facts the plan needs; `plan(args, facts)` is pure and returns the Step."""

    name: str
    facts: Callable[[Args], FactRequests]
    plan: Callable[[Args, Facts], Step]
    defaults: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, args: Args, facts: Facts) -> Step:
        return self.plan({**self.defaults, **args}, facts)

    def requests(self, args: Args) -> FactRequests:
        return self.facts({**self.defaults, **args})
