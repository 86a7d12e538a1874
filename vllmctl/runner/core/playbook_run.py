"""Runs a playbook across hosts: batches (`serial`, `--batch-size`), threads (`--forks`), a deadline per
host. A host's failure stops no other host's converge; only the rollout (runner/releases/rollout.py) holds a
host back before its engines stop, and once it stopped, later batches are not started."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

from vllmctl.errors import VllmctlError
from vllmctl.runner.core.execute import Event, HostRun, RunOptions
from vllmctl.runner.core.interrupt import deferred, reason
from vllmctl.runner.core.remote import Remote
from vllmctl.runner.core.results import HostResult, RunResult
from vllmctl.tasks.desired import HostContext
from vllmctl.tasks.playbooks import Playbook


def batches(hosts: Sequence[str], size: int | None, first: Sequence[str] = ()) -> list[list[str]]:
    """`first` (those among `hosts`) alone, then the rest `size` at a time (all at once without a size)."""
    seeds = [h for h in hosts if h in first]
    rest = [h for h in hosts if h not in seeds]
    if not size or size <= 0:
        return [b for b in (seeds, rest) if b]
    return ([seeds] if seeds else []) + [list(rest[i : i + size]) for i in range(0, len(rest), size)]


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
    pending = batches(list(contexts), size, opts.first)
    for index, batch in enumerate(pending):
        outcomes = _run_batch(batch, playbook, contexts, connect, opts, clock, notify)
        result.hosts.update(outcomes)
        if index == 0 and opts.first and opts.after_first is not None and not opts.stop.is_set():
            opts.after_first(outcomes)
        failed = sum(1 for name in batch if outcomes[name].status in ("failed", "unreachable"))
        stopped = opts.guard.stopped if opts.guard is not None else ""
        if opts.stop.is_set():
            result.aborted = reason()
        elif stopped:
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
    finished: dict[str, HostResult] = {}  # kept by the worker: a signal may land before a future is stored
    runs: dict[str, HostRun] = {}

    def one(name: str) -> HostResult:
        try:
            remote = connect(contexts[name])
        except VllmctlError as exc:
            finished[name] = HostResult(name, "unreachable", error=exc.message, hint=exc.hint)
            return finished[name]
        runs[name] = HostRun(contexts[name], remote, playbook, opts, clock)
        finished[name] = runs[name].run(emit)
        return finished[name]

    outcomes: dict[str, HostResult] = {}
    pool = ThreadPoolExecutor(max_workers=max(1, min(opts.forks, len(batch))), thread_name_prefix="vllmctl")
    futures: dict[str, Future[HostResult]] = {}
    try:
        with deferred():  # a signal now sets opts.stop: the hosts stop at a step boundary, then clean up
            for name in batch:
                futures[name] = pool.submit(one, name)
            deadline = time.monotonic() + opts.host_timeout_s + 60
            # a host's wait for its rollout turn extends its own deadline (HostRun), so this one too
            while time.monotonic() < deadline + _longest_turn_wait(runs):
                if not wait(futures.values(), timeout=0.5).not_done:
                    break
    except KeyboardInterrupt:  # Ctrl-C outside the CLI (no handler), or a second signal
        opts.stop.set()  # the hosts stop at their next step boundary and clean up
        pool.shutdown(wait=True, cancel_futures=True)
    for name in batch:
        future = futures.get(name)
        if name in finished:
            outcomes[name] = finished[name]
        elif future is None or future.cancelled():
            outcomes[name] = HostResult(name, "skipped", error=f"not started: {reason()}")
        elif not future.done():
            outcomes[name] = HostResult(name, "failed", error=f"{name}: no answer within the host deadline")
        else:
            try:
                outcomes[name] = future.result()
            except Exception as exc:  # a bug on one host must not hide the others' results
                error = f"internal error: {type(exc).__name__}: {exc}"
                outcomes[name] = HostResult(name, "failed", error=error)
    pool.shutdown(wait=False, cancel_futures=True)
    return outcomes


def _longest_turn_wait(runs: Mapping[str, HostRun]) -> float:
    return max((run.turn_wait_s() for run in list(runs.values())), default=0.0)
