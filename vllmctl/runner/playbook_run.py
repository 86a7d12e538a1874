"""Runs a playbook across hosts: batches (`serial`, `--batch-size`), threads (`--forks`), a deadline per
host. A host's failure stops no other host's converge; only the rollout (runner/rollout.py) holds a host back
before its engines stop, and once it stopped, later batches are not started."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait

from vllmctl.errors import VllmctlError
from vllmctl.runner.execute import Event, HostRun, RunOptions
from vllmctl.runner.remote import Remote
from vllmctl.runner.results import HostResult, RunResult
from vllmctl.tasks.desired import HostContext
from vllmctl.tasks.playbooks import Playbook


def batches(hosts: Sequence[str], size: int | None) -> list[list[str]]:
    if not size or size <= 0:
        return [list(hosts)] if hosts else []
    return [list(hosts[i : i + size]) for i in range(0, len(hosts), size)]


def run_playbook(
    playbook: Playbook,
    contexts: Mapping[str, HostContext],
    connect: Callable[[HostContext], Remote],
    opts: RunOptions,
    clock: Callable[[], float],
    emit: Event | None = None,
) -> RunResult:
    """Converge each host in `contexts` (already limited), batch by batch, hosts in a batch in parallel."""
    notify: Event = emit or (lambda host, phase, text: None)
    result = RunResult(playbook.name, opts.check, {name: HostResult(name) for name in contexts})
    size = opts.batch_size or playbook.serial
    limit = opts.max_fail_percentage if opts.max_fail_percentage is not None else playbook.max_fail_percentage
    pending = batches(list(contexts), size)
    for index, batch in enumerate(pending):
        outcomes = _run_batch(batch, playbook, contexts, connect, opts, clock, notify)
        result.hosts.update(outcomes)
        failed = sum(1 for name in batch if outcomes[name].status in ("failed", "unreachable"))
        stopped = opts.guard.stopped if opts.guard is not None else ""
        if stopped:
            result.aborted = stopped
        elif limit is not None and failed and 100.0 * failed / len(batch) > limit:
            why = f"(max_fail_percentage {limit:g})"
            result.aborted = f"batch {index + 1}: {failed} of {len(batch)} hosts failed {why}"
        if result.aborted:
            for name in (name for later in pending[index + 1 :] for name in later):
                result.hosts[name] = HostResult(name, "skipped", error=f"not started: {result.aborted}")
            break
    if not result.aborted and opts.guard is not None:
        result.aborted = opts.guard.stopped
    return result


def _run_batch(
    batch: list[str],
    playbook: Playbook,
    contexts: Mapping[str, HostContext],
    connect: Callable[[HostContext], Remote],
    opts: RunOptions,
    clock: Callable[[], float],
    emit: Event,
) -> dict[str, HostResult]:
    def one(name: str) -> HostResult:
        try:
            remote = connect(contexts[name])
        except VllmctlError as exc:
            return HostResult(name, "unreachable", error=exc.message, hint=exc.hint)
        return HostRun(contexts[name], remote, playbook, opts, clock).run(emit)

    outcomes: dict[str, HostResult] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, min(opts.forks, len(batch))), thread_name_prefix="vllmctl")
    futures = {name: pool.submit(one, name) for name in batch}
    wait(futures.values(), timeout=opts.host_timeout_s + 60)
    for name, future in futures.items():
        if not future.done():
            outcomes[name] = HostResult(name, "failed", error=f"{name}: no answer within the host deadline")
            continue
        try:
            outcomes[name] = future.result()
        except Exception as exc:  # a bug on one host must not hide the others' results
            outcomes[name] = HostResult(name, "failed", error=f"internal error: {type(exc).__name__}: {exc}")
    pool.shutdown(wait=False, cancel_futures=True)
    return outcomes
