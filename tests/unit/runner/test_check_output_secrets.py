"""`apply --check --json` shows no digest that depends on a secret: with a short API key, every digest of
the env file (the `.applied` and `.healthy` records, the env file itself) could be brute-forced from it."""

from __future__ import annotations

import itertools
import json
import string

from executor_builders import inventory, model
from fake_remote import FakeHost, FakeRemote

from vllmctl.ops import sha256_text
from vllmctl.runner.core.execute import RunOptions
from vllmctl.runner.core.playbook_run import run_playbook
from vllmctl.runner.fleet.hosts import host_contexts
from vllmctl.tasks.desired import HostContext, applied_hash, render_env
from vllmctl.tasks.playbooks import parse_playbook

KEY = "qz"  # two letters: 676 guesses
PLAYBOOK = parse_playbook(
    "name: t\nphases:\n  - name: models\n    tasks:\n      - task: model_env_files\n"
    "      - task: model_units\n  - name: services\n    tasks:\n      - task: model_services\n"
    "      - task: health_check\n",
    "t.yml",
)


def _contexts(key: str) -> dict[str, HostContext]:
    engine_args = {"api_key": {"secret": "api_key"}}
    inv = inventory(["h1"], {"m": model("m", ("h1",), engine_args=engine_args)})
    return host_contexts(inv, ["h1"], {"api_key": key})


def _digests(key: str) -> set[str]:
    """Every 12-hex prefix of a digest over the env file that vllmctl computes for this key."""
    ctx = _contexts(key)["h1"]
    (m,) = ctx.models()
    (replica,) = ctx.plan(m).replicas
    applied = applied_hash(ctx, m, replica)
    return {applied[:12], sha256_text(applied)[:12], sha256_text(render_env(ctx, m))[:12]}


def test_the_check_output_holds_no_digest_a_short_api_key_can_be_guessed_from() -> None:
    host = FakeHost("h1")
    options = RunOptions(check=True, lock_owner="me")
    result = run_playbook(
        PLAYBOOK,
        _contexts(KEY),
        lambda ctx: FakeRemote(host, [0.0], []),
        options,
        lambda: 0.0,
    )
    shown = json.dumps(result.to_json())
    assert ".applied" in shown and ".healthy" in shown  # both records would be written
    candidates = ("".join(pair) for pair in itertools.product(string.ascii_lowercase, repeat=2))
    assert [key for key in candidates if any(digest in shown for digest in _digests(key))] == []
