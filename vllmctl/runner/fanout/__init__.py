"""The weights fan-out at the edge (pairs with `vllmctl/fanout/`): controller folders and hub models copied
host to host, one copy's SSH session, and the copies in each host's results."""
