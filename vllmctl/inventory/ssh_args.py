"""The bastion in Ansible's `ansible_ssh_common_args` as vllmctl's `ssh.jump_host` ([user@]host[:port]):
`-o ProxyJump=...`, `-J ...`, or `-o ProxyCommand="ssh -W %h:%p [-q] [-p PORT] [-l USER] [user@]host"`."""

from __future__ import annotations

import re
import shlex

# flags that take no argument and change nothing about where or as whom vllmctl connects
HARMLESS_FLAGS = {"-q", "-C", "-4", "-6", "-T", "-t", "-v", "-vv", "-vvv", "-A", "-a", "-x", "-N", "-n"}
SHAPES = (
    "a bastion is read from `-o ProxyJump=[user@]host[:port]`, `-J [user@]host[:port]` or "
    '`-o ProxyCommand="ssh -W %h:%p [-q] [-p PORT] [-l USER] [user@]host"`; other -o options are ignored'
)


class SshArgsProblem(Exception):
    def __init__(self, message: str, hint: str = SHAPES) -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


def _words(text: str, what: str) -> list[str]:
    try:
        return shlex.split(text)  # as Ansible's ssh connection plugin splits them
    except ValueError as exc:
        raise SshArgsProblem(f"{what} cannot be split into words ({exc})") from None


def _options(words: list[str]) -> list[tuple[str, str]]:
    """(flag, argument) pairs: `-o X`, `-oX`, `-J X`, `-JX`; a harmless flag gets ""."""
    found: list[tuple[str, str]] = []
    rest = iter(words)
    for word in rest:
        if word in HARMLESS_FLAGS:
            continue
        flag, attached = word[:2], word[2:]
        if flag not in ("-o", "-J"):
            raise SshArgsProblem(f"ansible_ssh_common_args: '{word}' is not an option vllmctl reads")
        argument = attached or next(rest, "")
        if not argument:
            raise SshArgsProblem(f"ansible_ssh_common_args: {flag} has no value")
        found.append((flag, argument))
    return found


def _proxy_command(command: str) -> str:
    """The bastion of `ssh -W %h:%p ... [user@]host`, the only ProxyCommand vllmctl can follow itself."""
    words = _words(command, "ProxyCommand")
    if not words or words[0].rsplit("/", 1)[-1] != "ssh":
        raise SshArgsProblem(f"ProxyCommand '{command}' does not run ssh")
    user = port = forward = ""
    targets: list[str] = []
    rest = iter(words[1:])
    for word in rest:
        if word in HARMLESS_FLAGS:
            continue
        if word in ("-W", "-p", "-l", "-o"):
            value = next(rest, "")
            if word == "-W":
                forward = value
            elif word == "-p":
                port = value
            elif word == "-l":
                user = value
            continue  # other -o options of the bastion's own ssh are ignored like the outer ones
        if word.startswith("-"):
            raise SshArgsProblem(f"ProxyCommand option '{word}' is not one vllmctl can follow")
        targets.append(word)
    if forward != "%h:%p" or len(targets) != 1:
        raise SshArgsProblem(f"ProxyCommand '{command}' is not `ssh -W %h:%p [user@]host`")
    host = targets[0]
    if user and "@" not in host:
        host = f"{user}@{host}"
    return f"{host}:{port}" if port else host


def jump_host(common_args: str) -> str | None:
    """The bastion the args name, or None; raise SshArgsProblem for a proxy vllmctl cannot follow."""
    jumps: list[str] = []
    for flag, argument in _options(_words(common_args, "ansible_ssh_common_args")):
        if flag == "-J":
            jumps.append(argument)
            continue
        match = re.match(r"\s*([A-Za-z]+)\s*(?:=|\s)\s*(.*)", argument, re.DOTALL)
        key, value = (match[1], match[2].strip()) if match else (argument.strip(), "")
        if key.lower() == "proxyjump":
            jumps.append(value)
        elif key.lower() == "proxycommand":
            jumps.append("none" if value.lower() == "none" else _proxy_command(value))
    if len(jumps) > 1:
        hint = "keep one ProxyJump or ProxyCommand"
        raise SshArgsProblem("ansible_ssh_common_args names more than one proxy", hint)
    return None if not jumps or jumps[0].lower() == "none" else jumps[0]
