"""The shell each fan-out copy runs (pure): a one-time key made on the target, a forced read-only `rrsync`
line granted on the source (bounded by `from=` and `expiry-time=`), the pull into the folder's incoming
directory, the sha256 check before any file counts, and the revocations."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from vllmctl.render.quoting import shell_join, shell_word

PACKAGES = ("rsync",)  # rsync and rrsync (Debian 12 and Ubuntu 24.04 ship rrsync in /usr/bin)
INCOMING = ".vllmctl-incoming"  # inside the folder: a verified file is renamed into place, never copied
KEY_COMMENT = "vllmctl-fanout-"
ACCESS_MINUTES = 120  # the granted line expires on the source even if nothing revokes it
IO_TIMEOUT_S = 60  # rsync gives up on a source that sends nothing this long (a dead host)
CORRUPT_EXIT = 65
GIT_SUMS = "gitsums"  # a hub model copy's `<git blob id>  blobs/<id>` lines (fanout/hub.py)
RECEIVED = re.compile(r"^Total bytes received: ([\d,]+)", re.MULTILINE)

# apt sources may not be read yet on a fresh host: update once, only if the install cannot find the package
INSTALL = (
    "command -v rsync >/dev/null && command -v rrsync >/dev/null && exit 0; "
    "export DEBIAN_FRONTEND=noninteractive; i='apt-get install -y -q --no-install-recommends rsync'; "
    "$i >/dev/null 2>&1 || { apt-get update -q >/dev/null && $i >/dev/null; } && command -v rrsync >/dev/null"
)


def key_comment(token: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{8,64}", token):
        raise ValueError(f"not a fan-out token: {token!r}")
    return KEY_COMMENT + token


def prepare(source_address: str) -> str:
    """Run on the target as root: a private directory with a new ed25519 key; prints the directory, the
    public key and the address the target reaches the source from (the source's `from=`)."""
    addr = shell_word(source_address)
    return (
        "set -e; umask 077; d=$(mktemp -d /run/vllmctl-fanout.XXXXXX); "
        'ssh-keygen -q -t ed25519 -N "" -C vllmctl-fanout -f "$d/key"; '
        f"ip=$(getent ahosts {addr} | awk 'NR==1{{print $1}}'); "
        "from=$(ip -o route get \"$ip\" | sed -n 's/.* src \\([^ ]*\\).*/\\1/p'); "
        'echo "$d"; cat "$d/key.pub"; echo "${from:-$ip}"'
    )


def authorized_line(public_key: str, folder: str, from_address: str, token: str) -> str:
    """The source's authorized_keys options after the expiry, which the grant computes on the source's clock:
    only a read-only rsync of `folder`, only from the target, nothing else (`restrict`)."""
    kind, blob = public_key.split()[:2]
    if not re.fullmatch(r"ssh-ed25519", kind) or not re.fullmatch(r"[A-Za-z0-9+/=]+", blob):
        raise ValueError("not an ed25519 public key")
    if not re.fullmatch(r"[0-9A-Fa-f.:]+", from_address):
        raise ValueError(f"not an IP address: {from_address!r}")
    command = f"rrsync -ro {shell_word(folder)}".replace("\\", "\\\\").replace('"', '\\"')
    return f'from="{from_address}",command="{command}",restrict {kind} {blob} {key_comment(token)}'


def grant(line: str, run_token: str) -> str:
    """Run on the source as the SSH user: appends `line` with an expiry on this host's clock, after removing
    the lines earlier runs left (their keys' private halves went with their targets' directories)."""
    mine = key_comment(run_token)
    return (
        'set -e; umask 077; mkdir -p ~/.ssh; f=~/.ssh/authorized_keys; touch "$f"; '
        f"sed -i '/ {KEY_COMMENT}[0-9a-f]*$/{{/ {mine}[0-9a-f]*$/!d}}' \"$f\"; "
        f"e=$(date -d '+{ACCESS_MINUTES} min' +%Y%m%d%H%M); "
        f'printf \'expiry-time="%s",%s\\n\' "$e" {shell_word(line)} >> "$f"'
    )


def revoke(token: str) -> str:
    """Run on the source as the SSH user: one copy's line removed (each copy has its own token, the run's
    followed by the copy's number, so one copy ending never closes another's); true when there is none."""
    return f'f=~/.ssh/authorized_keys; [ -f "$f" ] || exit 0; sed -i \'/ {key_comment(token)}$/d\' "$f"'


def known_hosts_line(address: str, port: int, key_type: str, key_base64: str) -> str:
    """The source's host key as the controller verified it: the target checks it strictly, never learns it."""
    host = address if port == 22 else f"[{address}]:{port}"
    return f"{host} {key_type} {key_base64}\n"


def sums_text(files: Sequence[Mapping[str, Any]]) -> str:
    """sha256 per file; a hub model's git-kept file has none (its git blob id is checked instead)."""
    return "".join(f"{f['sha256']}  {f['name']}\n" for f in files if f["sha256"])


def names_text(files: Sequence[Mapping[str, Any]]) -> str:
    return "".join(f"{f['name']}\n" for f in files)


def pull(
    keydir: str,
    folder: str,
    source_address: str,
    port: int,
    user: str,
    owner: str = "root",
    group: str = "root",
) -> str:
    """Run on the target as root: the files named in `keydir/files` pulled into the incoming directory
    (a cut-off pull's partial file is the basis of the next: rsync sends only what it lacks, and checks the
    whole file after), checked against `keydir/sums` (and a hub model's git-kept files against their git blob
    ids, `keydir/gitsums`), then renamed into the folder.
    A file whose hash does not match is removed and the script exits CORRUPT_EXIT: it never counts."""
    d, inc, q = shell_word(keydir), shell_word(f"{folder}/{INCOMING}"), shell_word
    ssh = shell_join(
        [
            "ssh", "-i", f"{keydir}/key", "-o", "IdentitiesOnly=yes",
            "-o", f"UserKnownHostsFile={keydir}/known_hosts", "-o", "StrictHostKeyChecking=yes",
            "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
            "-o", "ServerAliveCountMax=3", "-p", str(port), "-l", user,
        ]
    )  # fmt: skip
    target = f"{source_address}:" if ":" not in source_address else f"[{source_address}]:"
    rsync = shell_join(
        ["rsync", "-rt", "--partial", "--stats", f"--timeout={IO_TIMEOUT_S}",
         f"--files-from={keydir}/files", "-e", ssh, target, f"{folder}/{INCOMING}/"]
    )  # fmt: skip
    outside = q(f"not writing into {folder}: the name resolves outside it")
    return (
        f"set -e; umask 022; install -d -m 0700 {inc}; {rsync}; cd {inc}; "
        f"if [ -s {d}/sums ] && ! bad=$(sha256sum --check --quiet {d}/sums 2>/dev/null); then "
        "printf '%s\\n' \"$bad\" | sed -n 's/: FAILED.*//p' | "
        'while IFS= read -r n; do rm -f -- "$n"; done; '
        f'echo "sha256 mismatch: $bad" >&2; exit {CORRUPT_EXIT}; fi; '
        f"if [ -f {d}/{GIT_SUMS} ]; then python3 {d}/git_check.py {d}/{GIT_SUMS} || exit {CORRUPT_EXIT}; fi; "
        f"top=$(realpath -m -- {q(folder)}); "
        f'while IFS= read -r n; do p=$(realpath -m -- "$(dirname -- {q(folder)}/"$n")"); '
        f'case "$p/" in "$top"/*) ;; *) echo {outside} "$n" >&2; exit 1 ;; esac; '
        f'mkdir -p -- "$p"; chmod 0644 -- "$n"; chown {q(owner + ":" + group)} -- "$n"; '
        f'mv -f -- "$n" "$p/${{n##*/}}"; done < {d}/files; cd /; rm -rf -- {inc}'
    )  # the same test as quoting.shell_resolves_under, for each name the pull brought


def cleanup(keydir: str) -> str:
    """Run on the target as root: its one-time key is gone, so the source's line opens nothing."""
    return f"rm -rf -- {shell_word(keydir)}"


def bytes_received(stdout: str) -> int:
    found = RECEIVED.search(stdout)
    return int(found.group(1).replace(",", "")) if found else 0
