"""Who serves, for the rollout: the gate's readiness probe per replica, and the set of serving refs read
lazily (the gateway's UP servers for models behind it, each engine's /health otherwise)."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping

from vllmctl.releases.rollout import ServingReplica

PROBE_TIMEOUT_S = 3.0

Probe = Callable[[ServingReplica], bool]  # does it answer /health and list its model?


def health_probe(
    api_keys: Mapping[str, str], url_of: Callable[[ServingReplica], str] = lambda r: r.url
) -> Probe:
    """One attempt of the release gate's own readiness probe (GET /health, then /v1/models listing the
    model: another engine on the port does not count), with the model's API key, at `url_of` the replica
    (tunnelled where its host needs it: the forward opens only for a replica probed)."""

    def probe(replica: ServingReplica) -> bool:
        import httpx

        from vllmctl.bench.health import probe as ready

        with httpx.Client(trust_env=False) as client:
            key = api_keys.get(replica.model)
            return ready(client, url_of(replica), replica.model, PROBE_TIMEOUT_S, key)[0] == "ready"

    return probe


class Serving(Container[str]):
    """Which refs serve, asked lazily: the gateway's UP set for models behind it (read once), each engine's
    /health otherwise (each asked at most once)."""

    def __init__(
        self, replicas: Iterable[ServingReplica], up: set[str] | None, behind: Container[str], probe: Probe
    ):
        self.by_ref = {r.ref: r for r in replicas}
        self.up, self.behind, self.probe = up, behind, probe
        self.asked: dict[str, bool] = {}

    def __contains__(self, ref: object) -> bool:
        replica = self.by_ref.get(str(ref))
        if replica is None:
            return False
        if self.up is not None and replica.model in self.behind:
            return replica.ref in self.up
        if replica.ref not in self.asked:
            self.asked[replica.ref] = self.probe(replica)
        return self.asked[replica.ref]
