"""`vllmctl status` at the edge (pairs with `vllmctl/status/`): units, pointers, health and metrics over the
fleet, the GPU gates' verdict now, and which gateway host holds the virtual IP."""
