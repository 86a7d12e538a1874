"""`vllmctl tune` at the edge: one replica drained from the gateway, each candidate of the sweep run on
it as units rendered from a variant of the inventory (no release recorded), loaded at rising concurrency until
the SLO breaks, and the replica put back on its known-good release by the rollback machinery, whatever
happened. A marker on the host says a tune is under way, so a killed run is restored by the next one."""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from vllmctl.bench.endpoints import endpoints_for
from vllmctl.bench.report import LoadSpec
from vllmctl.errors import InputError, VllmctlError
from vllmctl.inventory import load_inventory
from vllmctl.inventory.model import Inventory, runs_on_cpu
from vllmctl.ops import Command, Upload
from vllmctl.paths import TUNE_MARKER
from vllmctl.runner.core.audit import lock_owner
from vllmctl.runner.core.execute import RunOptions
from vllmctl.runner.core.playbook_run import run_playbook
from vllmctl.runner.fleet.hosts import deployment_plans, host_contexts, keys_from, resolve_secrets, ssh_remote
from vllmctl.runner.gateway.control import fleet_servers, ssh_gateway
from vllmctl.runner.releases.release import GateOptions, read_releases
from vllmctl.runner.releases.rollback_host import roll_back_host
from vllmctl.runner.tune.load import combine, measure
from vllmctl.tasks.playbooks import parse_playbook
from vllmctl.transport.tunnel import base_url
from vllmctl.tune.search import Trial, knobs_for, sweep

Log = Callable[[str], None]
TUNE_PLAYBOOK = parse_playbook(
    """name: tune
phases:
  - name: models
    tasks: [{task: model_env_files}, {task: model_units}]
  - name: services
    tasks: [{task: model_services}, {task: health_check}]
""",
    "vllmctl/runner/tune/sweep.py",
)


@dataclass(frozen=True)
class TuneRequest:
    inventory: str
    model: str
    slo: Mapping[str, float]
    host: str | None = None
    input_tokens: int = 128
    output_tokens: int = 64
    shapes: tuple[tuple[int, int], ...] = ()  # recorded (input, output) lengths, in turn; else the two above
    concurrency: tuple[int, ...] = (1, 2, 4, 8, 16)
    budget_s: float = 1800.0
    max_trials: int = 8
    command_timeout_s: float = 600.0
    health_timeout_s: float = 600.0


@dataclass
class TuneOutcome:
    host: str
    planned: dict[str, Any]  # the engine args the inventory's plan gives the replica
    given: dict[str, Any]  # the model's engine_args as the inventory writes them (what a proposal changes)
    trials: list[Trial] = field(default_factory=list)
    restored: dict[str, Any] = field(default_factory=dict)  # the rollback to known-good at the end
    drained: bool = False


class Variants:
    """The inventory with the model's engine_args changed: written, validated and planned as `apply` would
    (a candidate either of them refuses is never run)."""

    def __init__(self, inventory: Inventory, model: str, host: str, workdir: Path) -> None:
        self.inventory, self.model, self.host, self.workdir = inventory, model, host, workdir
        self.text = Path(inventory.path).read_text()
        self.loaded: dict[tuple[tuple[str, Any], ...], tuple[Inventory, dict[str, Any]]] = {}

    def document(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        doc: dict[str, Any] = yaml.safe_load(self.text)
        engine_args = doc["models"][self.model].setdefault("engine_args", {})
        engine_args.update(changes)
        return doc

    def load(self, changes: Mapping[str, Any]) -> tuple[Inventory, dict[str, Any]]:
        """The variant and its plans, read once per candidate: the sweep checks it, then runs it."""
        key = tuple(sorted(changes.items()))
        if key not in self.loaded:
            path = self.workdir / f"candidate-{len(self.loaded) + 1}.yml"
            path.write_text(yaml.safe_dump(self.document(changes), sort_keys=False))
            variant = load_inventory(path)
            self.loaded[key] = (variant, deployment_plans(variant, [self.host], online=False))
        return self.loaded[key]

    def refusal(self, changes: Mapping[str, Any]) -> str:
        try:
            self.load(changes)
        except VllmctlError as exc:  # the problem itself, after the file's name and line
            lines = [ln.strip() for ln in exc.render().splitlines() if ln.strip()]
            found = next((ln for ln in lines if ": " in ln and not ln.startswith("hint:")), lines[0])
            return found.split(": ", 1)[-1] if found.startswith(str(self.workdir)) else found
        return ""


def _chosen_host(inventory: Inventory, model: str, host: str | None) -> str:
    if model not in inventory.models:
        raise InputError(f"no model named {model!r}", f"known: {', '.join(inventory.models)}")
    hosts = inventory.models[model].hosts
    if inventory.models[model].cluster is not None:
        raise InputError(f"{model} is a multi-node model", "tune runs on one replica of a one-host model")
    if host is not None and host not in hosts:
        raise InputError(f"--host {host}: {model} does not run there", f"its hosts: {', '.join(hosts)}")
    chosen = host or hosts[0]
    others = len([h for h in hosts if h != chosen])
    wanted = inventory.models[model].min_available
    if others < wanted:  # the rollout's rule: a model keeps min_available replicas serving
        raise InputError(
            f"tuning {model} on {chosen} would leave {others} of its min_available {wanted} replicas serving",
            "tune a model with another replica to serve meanwhile, or lower its min_available",
        )
    return chosen


class Tuner:
    def __init__(self, request: TuneRequest, log: Log, workdir: Path) -> None:
        self.request, self.log = request, log
        self.inventory = load_inventory(request.inventory)
        self.host = _chosen_host(self.inventory, request.model, request.host)
        self.variants = Variants(self.inventory, request.model, self.host, workdir)
        self.secrets = resolve_secrets(self.inventory, os.environ)
        self.keys = keys_from(self.inventory, self.secrets)
        self.owner = lock_owner(datetime.now(UTC).isoformat(timespec="seconds"))
        self.context = host_contexts(self.inventory, [self.host], self.secrets, stage_models=False)[self.host]

    def evaluate(self, changes: dict[str, int]) -> Trial:
        """One candidate: its units started on the replica (health-checked), then the load levels."""
        variant, plans = self.variants.load(changes)
        self.log(f"{self.host}: candidate {changes or 'as planned'}")
        contexts = host_contexts(variant, [self.host], self.secrets, plans, stage_models=False)
        opts = RunOptions(
            forks=1,
            command_timeout_s=self.request.command_timeout_s,
            host_timeout_s=self.request.health_timeout_s + self.request.command_timeout_s,
            lock_owner=self.owner,
        )
        run = run_playbook(TUNE_PLAYBOOK, contexts, ssh_remote, opts, time.time).hosts[self.host]
        if run.status != "ok":
            return Trial(changes, None, detail={"error": run.error or "the candidate did not start"})
        plan = plans.get(self.host, {}).get(self.request.model)  # a CPU build's args as given: no plan
        count = len(plan.replicas) if plan is not None else 1  # tensor parallelism changes it
        replicas = {(self.host, self.request.model): count}
        found = endpoints_for(variant, [self.host], [self.request.model], replicas, base_url)
        spec = LoadSpec(
            concurrency=self.request.concurrency,
            output_tokens=self.request.output_tokens,
            shapes=self.request.shapes,
        )
        key, request = self.keys.get(self.request.model), self.request
        with ThreadPoolExecutor(max_workers=len(found)) as pool:  # every replica of the host at once
            loads = list(
                pool.map(
                    lambda e: measure(e.base_url, e.model, spec, request.input_tokens, request.slo, key),
                    found,
                )
            )
        trial = combine(changes, loads)
        self.log(f"{self.host}: goodput {trial.score:.2f} req/s over {len(loads)} replica(s)")
        return trial

    def tp_options(self) -> tuple[int, ...]:
        """The tensor-parallel sizes the planner accepts for the model on this host's GPUs (none on a CPU
        build): where there are several, the sweep weighs fewer, wider replicas against more, narrower."""
        gpus = self.inventory.hosts[self.host].gpus
        if runs_on_cpu(self.inventory, self.host, self.request.model) or gpus is None:
            return ()
        sizes = [t for t in (1, 2, 4, 8) if t <= gpus.count]
        return tuple(t for t in sizes if not self.variants.refusal({"tensor_parallel_size": t}))

    def planned(self) -> dict[str, Any]:
        plans = deployment_plans(self.inventory, [self.host], online=False)
        plan = plans.get(self.host, {}).get(self.request.model)
        return dict(plan.engine_args) if plan else dict(self.inventory.models[self.request.model].engine_args)

    def known_good(self) -> str:
        """The release the replica returns to; a marker an interrupted tune left is acted on first."""
        remote = ssh_remote(self.context)
        try:
            state = read_releases(remote, self.host, self.request.command_timeout_s)
            left = remote.read_file(TUNE_MARKER, self.request.command_timeout_s)
        finally:
            remote.close()
        if left:
            earlier = str(json.loads(left).get("known_good") or state.known_good)
            self.log(f"{self.host}: an interrupted tune left a candidate here: restoring release {earlier}")
            self.restore(earlier)
        if state.known_good is None:
            raise VllmctlError(
                f"{self.host}: no known-good release to return to",
                f"apply {self.inventory.path} first: tune puts the replica back on a release that served",
            )
        return state.known_good

    def mark(self, known_good: str) -> None:
        remote = ssh_remote(self.context)
        try:
            text = json.dumps({"model": self.request.model, "known_good": known_good, "by": self.owner})
            result = remote.execute(Upload(TUNE_MARKER, text + "\n", "0600"), self.request.command_timeout_s)
            if not result.ok:
                raise result.error("writing the tune marker")
        finally:
            remote.close()

    def restore(self, known_good: str) -> dict[str, Any]:
        """The replica on its known-good release again (units from the release, health waited for); the
        marker is removed only once that passed."""
        remote = ssh_remote(self.context)
        try:
            gate = GateOptions(
                owner=self.owner,
                command_timeout_s=self.request.command_timeout_s,
                health_timeout_s=self.request.health_timeout_s,
                api_keys=self.keys,
            )
            restored = roll_back_host(self.context, remote, gate, to=known_good)
            if restored.ok:
                remote.execute(Command(argv=("rm", "-f", TUNE_MARKER)), self.request.command_timeout_s)
            return restored.to_json()
        finally:
            remote.close()

    def gateway(self) -> Any:
        """The gateway in front of the model, or None: its view of every replica, to drain this one."""
        gateway = self.inventory.gateway
        if gateway is None or self.request.model not in gateway.ports:
            return None
        behind = sorted({h for name in gateway.ports for h in self.inventory.models[name].hosts})
        plans = deployment_plans(self.inventory, behind, online=False)
        return ssh_gateway(
            self.inventory, fleet_servers(self.inventory, plans), self.request.command_timeout_s
        )


def tune(request: TuneRequest, log: Log, clock: Callable[[], float] = time.monotonic) -> TuneOutcome:
    """The sweep on one replica, drained from the gateway for its whole length; the replica is restored
    to its known-good release and put back in the gateway whatever happened."""
    deadline = clock() + request.budget_s
    with tempfile.TemporaryDirectory(prefix="vllmctl-tune-") as workdir:
        tuner = Tuner(request, log, Path(workdir))
        planned = tuner.planned()
        max_model_len = int(planned.get("max_model_len") or 2048)
        known_good = tuner.known_good()
        given = dict(tuner.inventory.models[request.model].engine_args)
        outcome = TuneOutcome(tuner.host, planned, given)
        gateway = tuner.gateway()
        tuner.mark(known_good)
        try:
            if gateway is not None:
                gateway.drain(tuner.host)
                event = (gateway.host_events(tuner.host) or [{}])[-1]
                if event.get("event") != "drained" or event.get("pending"):
                    raise VllmctlError(
                        f"{tuner.host}: not drained from the gateway ({event.get('error') or event})",
                        "tune never loads a replica the gateway still sends traffic to: check the gateway",
                    )
                outcome.drained = True
            knobs = knobs_for(planned, max_model_len, tuner.tp_options())
            outcome.trials = sweep(
                knobs, tuner.evaluate, tuner.variants.refusal, request.max_trials, lambda: clock() < deadline
            )
        finally:
            outcome.restored = tuner.restore(known_good)
            if gateway is not None:
                gateway.ready(tuner.host)
                gateway.close()
    return outcome
