"""A fan-out's copies in each host's results: the copy as the first step of the host's models phase,
planned, changed, or a warning beside the push or download its own run made instead."""

from __future__ import annotations

from collections.abc import Sequence

from vllmctl.fanout.schedule import FanoutCopy, FolderFanout
from vllmctl.ops import Step
from vllmctl.runner.core.results import RunResult, StepResult


def record_fanout(result: RunResult, found: Sequence[FolderFanout], check: bool) -> None:
    """Each host's fan-out copy as the first step of its models phase: planned (--check), changed, or, when
    it failed, a warning beside the controller's push its own run made instead."""
    for fanout in found:
        size = {h: sum(int(f["size"]) for f in files) for h, files in fanout.stale.items()}
        count = {h: len(files) for h, files in fanout.stale.items()}
        outcomes: dict[str, tuple[str, str]] = (
            {t: (s, "planned") for t, s in fanout.planned.items()}
            if check
            else {h: (c.source, c.status) for h, c in fanout.copies.items()}
        )
        for host, (source, status) in outcomes.items():
            if host not in result.hosts or host not in count:
                continue
            copy = FanoutCopy(fanout.folder, source, count[host], size[host])
            if status == "failed":
                error = fanout.copies[host].error
                own = "pushed from the controller" if fanout.hub is None else "downloaded it from the hub"
                why = f"fan-out copy failed ({error}); its own run {own}"
                step = Step("model_fanout", fanout.folder, noop="not copied", warnings=(why,))
                added = StepResult("models", step, "ok")
            else:
                step = Step("model_fanout", fanout.folder, (copy,))  # type: ignore[arg-type]
                added = StepResult("models", step, "planned" if check else "changed")
            result.hosts[host].steps.insert(0, added)
