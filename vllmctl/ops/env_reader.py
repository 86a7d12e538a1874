"""The env-file reader the host-side helpers (stdlib Python, run as root) embed: the exact inverse of
`quoting.env_file_line` (`NAME="value"` with `\\ \\" \\$ \\`` escaped), as systemd reads those lines."""

from __future__ import annotations

READ_ENV = r"""
def read_env(path):
    import re
    env = {}
    try:
        handle = open(path, encoding="utf-8", newline="\n")
    except OSError:
        return env
    with handle:
        for line in handle:
            key, sep, value = line.rstrip("\n").partition("=")
            if not sep or key.lstrip().startswith(("#", ";")):
                continue
            if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
                value = re.sub(r'\\([\\"$`])', r"\1", value[1:-1])
            env[key.strip()] = value
    return env
"""
