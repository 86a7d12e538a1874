"""Which host copies a folder from which source, and when (pure). Each host holding a verified copy serves at
most `per_source` copies at once, nearest targets first (same locality label), so the copies grow each round;
the controller serves only while no host can: the first copy, or a target every host source has failed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllmctl.fanout.hub import HubSnapshot

CONTROLLER = "controller"
MAX_ATTEMPTS = 3  # sources tried for one target before it is left to the controller's own push


@dataclass(frozen=True)
class Copy:
    target: str
    source: str  # a host name, or CONTROLLER


@dataclass
class Schedule:
    """The state of one folder's fan-out. `holders` hold a verified copy; `pending` need one."""

    holders: list[str]
    pending: list[str]
    per_source: int = 2
    labels: Mapping[str, str] = field(default_factory=dict)  # host -> locality ("" when none)
    busy: dict[str, int] = field(default_factory=dict)  # source -> copies it serves now
    tried: dict[str, set[str]] = field(default_factory=dict)  # target -> sources that failed it
    bad: set[str] = field(default_factory=set)  # sources that died or served a corrupt copy
    failed: dict[str, str] = field(default_factory=dict)  # target -> why it got no copy
    copying: set[str] = field(default_factory=set)  # targets with a copy under way
    controller: bool = True  # False for a hub model: the controller holds no copy to serve

    @property
    def done(self) -> bool:
        return not self.pending and not any(self.busy.values())

    def _live(self) -> list[str]:
        return [h for h in self.holders if h not in self.bad]

    def _pick(self, source: str) -> str | None:
        """The pending target `source` should serve: one near it first, else the first still untried."""
        label = self.labels.get(source, "")
        untried = [t for t in self.pending if source not in self.tried.get(t, set())]
        near = [t for t in untried if label and self.labels.get(t, "") == label]
        return next(iter(near or untried), None)

    def next_copies(self) -> list[Copy]:
        """Copies to start now; call again whenever one ends."""
        started: list[Copy] = []
        assigned = True
        while assigned:
            assigned = False
            for source in sorted(self._live(), key=lambda h: self.busy.get(h, 0)):
                if self.busy.get(source, 0) >= self.per_source:
                    continue
                target = self._pick(source)
                if target is not None:
                    started.append(self._start(target, source))
                    assigned = True
        in_flight = any(n for s, n in self.busy.items() if s != CONTROLLER)
        if self.controller and self.busy.get(CONTROLLER, 0) == 0 and not in_flight:
            live = set(self._live())
            for target in self.pending:
                tried = self.tried.get(target, set())
                if CONTROLLER not in tried and not (live - tried):
                    started.append(self._start(target, CONTROLLER))
                    break
        return started

    def _start(self, target: str, source: str) -> Copy:
        self.pending.remove(target)
        self.copying.add(target)
        self.busy[source] = self.busy.get(source, 0) + 1
        return Copy(target, source)

    def finished(self, copy: Copy) -> None:
        """`copy` arrived and was verified: its target now serves others."""
        self.busy[copy.source] -= 1
        self.copying.discard(copy.target)
        self.holders.append(copy.target)

    def source_failed(self, copy: Copy, why: str) -> None:
        """The source died or sent a corrupt copy: it serves no one else; the target tries another source."""
        self.busy[copy.source] -= 1
        self.copying.discard(copy.target)
        if copy.source != CONTROLLER:
            self.bad.add(copy.source)
        tried = self.tried.setdefault(copy.target, set())
        tried.add(copy.source)
        if len(tried) >= MAX_ATTEMPTS or copy.source == CONTROLLER:
            self.failed[copy.target] = why
        else:
            self.pending.append(copy.target)

    def target_failed(self, copy: Copy, why: str) -> None:
        """The target cannot take a copy (unreachable, disk full): no other source would help."""
        self.busy[copy.source] -= 1
        self.copying.discard(copy.target)
        self.failed[copy.target] = why

    def requeue(self, host: str) -> None:
        """A holder found corrupt is a target again (never its own source); once, however many copies from it
        failed, and not while a copy to it is under way."""
        if host in self.pending or host in self.copying:
            return
        if host in self.holders:
            self.holders.remove(host)
        self.tried.setdefault(host, set()).add(host)
        self.pending.append(host)


def preview(
    holders: Sequence[str],
    pending: Sequence[str],
    per_source: int,
    labels: Mapping[str, str],
    controller: bool = True,
) -> list[list[Copy]]:
    """The rounds `apply` would run if every copy took as long as every other: the plan `--check` shows."""
    schedule = Schedule(list(holders), list(pending), per_source, labels, controller=controller)
    rounds: list[list[Copy]] = []
    while not schedule.done:
        copies = schedule.next_copies()
        if not copies:
            break
        rounds.append(copies)
        for copy in copies:
            schedule.finished(copy)
    return rounds


@dataclass
class HostCopy:
    """How one host got the folder: from which source, how many bytes crossed, how long it took."""

    source: str
    status: str  # "ok", or "failed" (the host's own run pushes from the controller, as before)
    bytes: int = 0
    seconds: float = 0.0
    error: str = ""
    attempts: list[str] = field(default_factory=list)  # "<source>: <why>" for each source that failed


@dataclass
class FolderFanout:
    """One folder's fan-out: the hosts that held it before, those that need it, and how each got it."""

    folder: str
    files: Sequence[Mapping[str, Any]]
    holders: list[str]
    stale: dict[str, list[Mapping[str, Any]]]  # target -> the files it lacks
    recorded: dict[str, dict[str, Any]]  # target -> its manifest's entries before the fan-out
    skipped: dict[str, str] = field(default_factory=dict)  # host -> why it is left to its own push
    planned: dict[str, str] = field(default_factory=dict)  # target -> its source in the preview
    copies: dict[str, HostCopy] = field(default_factory=dict)
    hub: HubSnapshot | None = None  # a hub model: its blobs, each checked by the hash the hub named it by
    seed: str = ""  # a hub model no host held: the host whose own run downloads it first

    @property
    def controller_serves(self) -> bool:
        """The controller holds the folder (never a hub model)."""
        return self.hub is None

    def rounds(self, per_source: int, labels: Mapping[str, str]) -> list[list[Copy]]:
        holders = self.holders or ([self.seed] if self.seed else [])
        return preview(holders, list(self.stale), per_source, labels, self.controller_serves)

    def to_json(self) -> dict[str, Any]:
        found = {
            "holders": self.holders,
            "skipped": self.skipped,
            "hosts": {host: vars(copy) for host, copy in self.copies.items()},
        }
        if self.hub is not None:
            found.update(repo=self.hub.repo, revision=self.hub.revision, commit=self.hub.commit)
        return {**found, "seed": self.seed} if self.seed else found


@dataclass(frozen=True)
class FanoutCopy:
    """One host's copy of a folder, shown among its steps: run before the host's own run, never by it."""

    folder: str
    source: str
    files: int
    size: int

    def render(self) -> str:
        what = f"{self.files} files, {self.size:,} bytes, sha256 checked"
        return f"fan-out copy {self.folder} from {self.source} ({what})"
