"""SSH transport on Fabric, the only package that imports fabric or paramiko: the inventory merged with
`~/.ssh/config`, strict host keys, deadlines, one connection per host, results that word their own failure."""

from vllmctl.transport.result import TAIL_CHARS, GroupResult, Result, tail
from vllmctl.transport.ssh import SshTransport
from vllmctl.transport.target import SshTarget, load_ssh_config, resolve_target

__all__ = [
    "TAIL_CHARS",
    "GroupResult",
    "Result",
    "SshTarget",
    "SshTransport",
    "load_ssh_config",
    "resolve_target",
    "tail",
]
