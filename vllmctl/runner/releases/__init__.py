"""Releases and rollouts at the edge (pairs with `vllmctl/releases/`): a host's release and gate, its
rollback, the history read from hosts, the rollout guard with its waves, canary soak and out-of-service
records, and the drains a dead run left."""
