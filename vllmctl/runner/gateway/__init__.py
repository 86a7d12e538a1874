"""The gateway at the edge (pairs with `vllmctl/gateway/`): drain and ready servers around engine restarts,
and the gateway's own gate after a rollout."""
