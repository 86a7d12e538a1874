"""Multi-node models at the edge (pairs with `vllmctl/multinode/`): preflight, the group release on every
node, its rollback, `vllmctl cluster`'s flows and apply's multi-node step."""
