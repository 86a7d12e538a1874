"""Which replicas runs hold out of service, pure: the record a run keeps per replica it takes out (its owner
line, on the model's keeper host), whose it is, whether its run is gone, which hosts another live run holds
out, what a later run heals, and what `status` says of a drained server."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from vllmctl.releases.rollout import ServingReplica

SEPARATOR = "\t"
DRAINED = ("DRAIN", "MAINT")


@dataclass(frozen=True)
class OutRecord:
    """`server` (`HOST-PORT`, the gateway's server name) of `model` is held out of service by `owner`."""

    model: str
    server: str
    owner: str

    @property
    def host(self) -> str:
        return self.server.rsplit("-", 1)[0]

    @property
    def ref(self) -> str:
        """The gateway's `backend/server` (a model's backend is named after it)."""
        return f"{self.model}/{self.server}"

    def line(self) -> str:
        return f"{self.model}/{self.server}{SEPARATOR}{self.owner}"


def server_name(replica: ServingReplica) -> str:
    return f"{replica.host}-{replica.port}"


def parse_records(text: str) -> list[OutRecord]:
    """The keeper's listing, one `model/server<TAB>owner` line per record (a line of another shape is
    skipped: it is no record vllmctl wrote)."""
    found = []
    for line in text.splitlines():
        name, sep, owner = line.partition(SEPARATOR)
        model, slash, server = name.partition("/")
        if sep and slash and model and server:
            found.append(OutRecord(model, server, owner.strip()))
    return found


def listing(records: Iterable[OutRecord]) -> str:
    """The records as the keeper lists them (the compare-and-set compares this text)."""
    return "\n".join(r.line() for r in records)


def keepers(
    replicas: Sequence[ServingReplica], gateway_hosts: Sequence[str], behind: Collection[str]
) -> dict[str, str]:
    """model -> the one host that keeps its records: the first gateway host for a model behind the gateway
    (where its drains live), else the host of its first replica."""
    found: dict[str, str] = {}
    for replica in replicas:
        if replica.model in behind and gateway_hosts:
            found.setdefault(replica.model, gateway_hosts[0])
        else:
            found.setdefault(replica.model, replica.host)
    return found


@dataclass(frozen=True)
class Holders:
    """Records sorted by whose they are: this run's, another live run's (or one this controller cannot
    judge: another controller's, another boot's), and those whose run is gone."""

    mine: tuple[OutRecord, ...] = ()
    foreign: tuple[OutRecord, ...] = ()
    stale: tuple[OutRecord, ...] = ()


def sort_records(records: Iterable[OutRecord], me: str, stale: Callable[[str], bool]) -> Holders:
    """`me`: this run's owner line; `stale(owner)`: its run died on this controller (facts/lock_owner)."""
    mine, foreign, gone = [], [], []
    for record in records:
        if record.owner == me:
            mine.append(record)
        elif stale(record.owner):
            gone.append(record)
        else:
            foreign.append(record)
    return Holders(tuple(mine), tuple(foreign), tuple(gone))


def held_hosts(foreign: Iterable[OutRecord], models: Collection[str]) -> set[str]:
    """The hosts of `models` whose replicas another live run holds out: out of service for this run too."""
    return {r.host for r in foreign if r.model in models}


def claims(
    host: str, models: Collection[str], replicas: Sequence[ServingReplica], me: str
) -> list[OutRecord]:
    """The records a run writes when it takes `host` out: one per replica of `models` on it."""
    return [OutRecord(r.model, server_name(r), me) for r in replicas if r.host == host and r.model in models]


def replica_of(record: OutRecord, replicas: Sequence[ServingReplica]) -> ServingReplica | None:
    return next((r for r in replicas if r.model == record.model and server_name(r) == record.server), None)


@dataclass(frozen=True)
class Holder:
    """What `status` says of a drained server: the run that holds it, and whether that run is gone."""

    owner: str = ""  # "" when no record names it: drained by a person (runtime API, maintenance)
    gone: bool = False

    @property
    def held(self) -> bool:
        """A live run holds it: anything else is a drain no run will put back."""
        return bool(self.owner) and not self.gone

    def to_json(self) -> dict[str, object]:
        return {"held_by": self.owner or None, "run_gone": self.gone, "orphan": not self.held}

    def describe(self) -> str:
        if not self.owner:
            return "no run holds it (drained by hand?)"
        if self.gone:
            return f"no run holds it: its run died ({self.owner}); the next apply puts it back"
        return f"held by a run ({self.owner})"


def drain_holders(
    statuses: Mapping[str, str], records: Iterable[OutRecord], stale: Callable[[str], bool]
) -> dict[str, Holder]:
    """ref -> its holder, for each server whose status (`show stat`) is DRAIN or MAINT."""
    owners = {r.ref: r.owner for r in records}
    return {
        ref: Holder(owners.get(ref, ""), bool(owners.get(ref)) and stale(owners[ref]))
        for ref, status in statuses.items()
        if status.startswith(DRAINED)
    }
