"""`vllmctl tune` at the edge (pairs with `vllmctl/tune/`): the sweep on one drained replica, one
candidate's load, and writing the winner where it was measured."""
