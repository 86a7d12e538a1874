"""Servers a dead run left out of service, put back by the next run before it takes anything out: a record
whose run died on this controller names each; once its replica serves, it is set ready on every gateway
host and waited for UP, and the record goes with an audit line on its keeper host."""

from __future__ import annotations

from typing import Any

from vllmctl.releases.out_of_service import OutRecord, replica_of, sort_records
from vllmctl.releases.rollout import ServingReplica
from vllmctl.runner.releases.rollout import RolloutGuard


def heal_orphans(guard: RolloutGuard) -> list[dict[str, Any]]:
    """Each server a dead run held out: `healed` (back in service, record removed) or `left` and why."""
    records = guard.records
    if records is None:
        return []
    replicas = [*guard.replicas, *guard.group_servers]
    found = records.read({r.model for r in replicas})
    report = []
    for record in sort_records(found, records.owner, records.stale).stale:
        entry: dict[str, Any] = {"model": record.model, "server": record.server, "owner": record.owner}
        why = _put_back(guard, record, replica_of(record, replicas))
        if why:
            report.append({**entry, "event": "left", "reason": why})
            continue
        audit = {"by": records.owner, "event": "put back a server a dead run left out of service", **entry}
        if records.remove([record], audit):
            report.append({**entry, "event": "healed"})
        else:
            report.append(
                {**entry, "event": "left", "reason": "put back, but its record could not be removed"}
            )
    return report


def _put_back(guard: RolloutGuard, record: OutRecord, replica: ServingReplica | None) -> str:
    if replica is None:  # no longer in the inventory: the gateway's config lists it no more
        return ""
    if not guard.probe(replica):
        return "its engine does not serve yet; the run that restarts it puts it back"
    gateway = guard.gateway
    behind = gateway is not None and record.model in gateway.gateway.ports
    if behind and gateway is not None and not gateway.ready_servers(record.host, [record.ref]):
        return "set ready, but the gateway did not see it UP in time"
    return ""


def heal_lines(report: list[dict[str, Any]]) -> list[str]:
    """What a run says of each server a dead run left out."""
    lines = []
    for entry in report:
        said = (
            f"{entry['model']}/{entry['server']}: left out of service by a run that died ({entry['owner']})"
        )
        lines.append(f"{said}: {'put back' if entry['event'] == 'healed' else entry['reason']}")
    return lines
