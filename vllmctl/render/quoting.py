"""One quoting function per place a value lands on a host: a POSIX shell word, a systemd unit (ExecStart
words, Environment= assignments, other settings), an EnvironmentFile line, an HTTP URL, a haproxy.cfg word,
a path confined under a root. A value that cannot be written safely for its target raises QuotingError,
never passes."""

from __future__ import annotations

import ipaddress
import posixpath
import re
import shlex
from collections.abc import Iterable
from urllib.parse import quote, urlsplit, urlunsplit

from vllmctl.errors import VllmctlError


class QuotingError(VllmctlError):
    """A value that has no safe spelling for its target (a newline in an env file, a NUL, a path out)."""

    def __init__(self, message: str, hint: str = "fix the value in the inventory (see `vllmctl validate`)"):
        super().__init__(message, hint)


# --- POSIX shell ------------------------------------------------------------------------------------------


def shell_word(value: object) -> str:
    """One word for sh/bash, whatever it holds (single quotes: nothing inside is expanded)."""
    text = str(value)
    _refuse(text, "\0", "a shell word")
    return shlex.quote(text)


def shell_join(argv: Iterable[object]) -> str:
    return " ".join(shell_word(word) for word in argv)


# --- systemd unit files -----------------------------------------------------------------------------------

_UNIT_BARE = re.compile(r"[A-Za-z0-9_./:=,+@-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _refuse(text: str, chars: str, target: str) -> None:
    found = sorted({ch for ch in text if ch in chars})
    if found:
        shown = ", ".join(repr(ch) for ch in found)
        raise QuotingError(f"{text[:60]!r} cannot be written as {target}: it holds {shown}")


def _c_escape(text: str) -> str:
    """Inside systemd's double quotes: C escapes, every control character as \\xNN (a raw CR ends a line)."""
    _refuse(text, "\0", "a systemd value")
    text = text.replace("\\", "\\\\").replace('"', '\\"')
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _unit_quoted(text: str) -> str:
    return text if _UNIT_BARE.fullmatch(text) else f'"{_c_escape(text)}"'


def unit_exec_word(value: object) -> str:
    """One ExecStart argv word: `%` is a specifier and `$` an environment expansion there, so both double."""
    return _unit_quoted(str(value).replace("%", "%%").replace("$", "$$"))


def unit_exec(argv: Iterable[object]) -> str:
    """A whole ExecStart= line. The program must be absolute: systemd reads a leading `-@:+!` as a prefix."""
    words = [str(word) for word in argv]
    if not words or not words[0].startswith("/"):
        raise QuotingError(f"ExecStart program {words[:1]} is not an absolute path")
    return " ".join(unit_exec_word(word) for word in words)


def env_name(name: object) -> str:
    """A variable name systemd and the shell both accept; anything else is refused (systemd would drop the
    whole assignment and log it, value included)."""
    text = str(name)
    if not ENV_NAME.fullmatch(text):
        raise QuotingError(f"{text[:60]!r} is not an environment variable name (letters, digits, _)")
    return text


def unit_environment(name: object, value: object) -> str:
    """One Environment= assignment: quoted whole; `%` doubles, `$` stays (systemd does not expand it here)."""
    return _unit_quoted(env_name(name) + "=" + str(value).replace("%", "%%"))


def unit_setting(value: object) -> str:
    """Any other unit setting (Description=, User=, WorkingDirectory=, After=): `%` doubles; characters that
    would end the line or continue it onto the next (a trailing backslash) are refused."""
    text = str(value)
    if _CONTROL.search(text) or text.endswith("\\"):
        raise QuotingError(f"{text[:60]!r} cannot be a systemd setting: control character or trailing '\\'")
    return text.replace("%", "%%")


def unit_file_name(name: object) -> str:
    """A unit name: systemd's character set, so it is one file under /etc/systemd/system and one word."""
    text = str(name)
    if not re.fullmatch(r"[A-Za-z0-9:_.@\\-]{1,246}\.(service|timer|target)", text) or text.startswith("."):
        raise QuotingError(f"{text[:60]!r} is not a valid systemd unit name")
    return text


# --- EnvironmentFile= -------------------------------------------------------------------------------------

# systemd.exec(5): valid are Unicode scalar values other than NUL, U+FEFF and the noncharacters
_ENV_FILE_INVALID = "\0\n\r\ufeff" + "".join(chr(c) for c in range(0xFDD0, 0xFDF0))


def env_file_line(name: object, value: object) -> str:
    """`NAME="value"` for an EnvironmentFile: inside double quotes systemd (and sh) unescape only `\\"`,
    `\\\\`, `\\$` and `` \\` ``, so those four are escaped; a newline has no spelling there and is refused."""
    text = str(value)
    bad = [ch for ch in text if ch in _ENV_FILE_INVALID or (ord(ch) & 0xFFFE) == 0xFFFE]
    if bad:
        raise QuotingError(
            f"the value of {env_name(name)} cannot go in an env file: it holds {bad[0]!r}",
            "an env-file value is one line; put multi-line data in a file and pass its path",
        )
    escaped = re.sub(r'([\\"$`])', r"\\\1", text)
    return f'{env_name(name)}="{escaped}"'


# --- HTTP URLs --------------------------------------------------------------------------------------------


def url_host(address: str) -> str:
    """The host part of a URL: a DNS name or IPv4 address as is, an IPv6 address in brackets; anything else
    (a `/`, `@`, `?`, `#`, space or `:` that is not IPv6) would change what the URL points at: refused."""
    bare = address.removeprefix("[").removesuffix("]")
    if ":" in bare and "%" not in bare:  # a zone (`fe80::1%eth0`) has no plain spelling in a URL
        try:
            return f"[{ipaddress.IPv6Address(bare)}]"
        except ValueError:
            pass
    elif ":" not in bare and re.fullmatch(r"[A-Za-z0-9_](?:[A-Za-z0-9._-]*[A-Za-z0-9_])?", bare):
        return bare
    raise QuotingError(f"{address[:60]!r} cannot be the host of a URL")


def http_url(address: str, port: int, path: str = "") -> str:
    """`http://host:port` plus `path` (segments quoted); the port must be a real one."""
    if not 0 < int(port) < 65536:
        raise QuotingError(f"port {port} is out of range")
    segments = "".join("/" + url_path_segment(part) for part in path.strip("/").split("/") if part)
    return f"http://{url_host(address)}:{int(port)}{segments}"


def url_path_segment(value: object) -> str:
    """One path segment: `/`, `?`, `#`, `%` and everything outside the unreserved set percent-encoded."""
    return quote(str(value), safe="")


def url_with_credentials(url: str, credentials: str | None) -> str:
    """`url` with `user:password` (each percent-encoded) as its userinfo; `url` itself when none is given."""
    if not credentials:
        return url
    parts = urlsplit(url)
    user, sep, password = credentials.partition(":")
    userinfo = quote(user, safe="") + (":" + quote(password, safe="") if sep else "")
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{parts.netloc.rpartition('@')[2]}"))


def has_credentials(url: str) -> bool:
    return "@" in urlsplit(url).netloc


_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@")


def redact_text(text: str) -> str:
    """Any URL's user:password@ in text (a URL, a tool's error output) replaced by `***@`: what output,
    JSON and logs may show."""
    return _URL_USERINFO.sub(r"\1***@", text)


# --- haproxy.cfg ------------------------------------------------------------------------------------------

_HAPROXY_WORD = re.compile(r"[A-Za-z0-9._:/@\[\]-]+")


def haproxy_word(value: object) -> str:
    """One word of haproxy.cfg (a name, an address, a path): only characters HAProxy reads literally; a space,
    `#`, a quote, a backslash or `$` (which it expands) would change the line, so they are refused."""
    text = str(value)
    if not _HAPROXY_WORD.fullmatch(text):
        raise QuotingError(f"{text[:60]!r} cannot be written as one haproxy.cfg word")
    return text


# --- keepalived.conf --------------------------------------------------------------------------------------

_KEEPALIVED_WORD = re.compile(r"[A-Za-z0-9._:/@-]+")


def keepalived_word(value: object) -> str:
    """One word of keepalived.conf (a name, an address, an interface): keepalived splits its lines on blanks,
    reads `#` and `!` as comments, `{` `}` as blocks and `$` as its own variables, so all of them are
    refused rather than escaped."""
    text = str(value)
    if not _KEEPALIVED_WORD.fullmatch(text):
        raise QuotingError(f"{text[:60]!r} cannot be written as one keepalived.conf word")
    return text


# --- paths on a host --------------------------------------------------------------------------------------


def host_path(path: object) -> str:
    """An absolute, normalized path (`/srv/m`, never `/srv/../etc` or `srv/m`) with no control characters."""
    text = str(path)
    if not text.startswith("/") or posixpath.normpath(text) != text or text.startswith("//"):
        raise QuotingError(f"{text[:60]!r} is not an absolute, normalized path")
    if _CONTROL.search(text):
        raise QuotingError(f"{text[:60]!r} holds a control character")
    return text


def path_component(value: object) -> str:
    """One file or directory name: no `/`, not `.` or `..`, no control character."""
    text = str(value)
    if not text or text in (".", "..") or "/" in text or _CONTROL.search(text):
        raise QuotingError(f"{text[:60]!r} is not a single file name")
    return text


def venv_dir_name(value: object) -> str:
    """An engine venv's directory name (`vllm-0.11.0`): one path component, and a literal in the `sed`
    expression that fixes its scripts' #! lines, so only the characters engine versions use."""
    text = str(value)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+!-]{0,127}", text):
        raise QuotingError(f"{text[:60]!r} cannot name a venv directory (letters, digits, '._+!-')")
    return text


def shell_resolves_under(path: str, root: str) -> str:
    """A shell test, true when `path`'s directory resolves on the host (symlinks followed) inside `root`:
    text confined by `confined_path` can still be redirected by a link someone planted in `root`."""
    where = f'"$(realpath -m -- "$(dirname -- {shell_word(path)})")/"'
    return f'case {where} in "$(realpath -m -- {shell_word(root)})"/*) true ;; *) false ;; esac'


def confined_path(root: str, name: object) -> str:
    """`root/name` for a relative, normalized `name` that stays under `root` (no `..`, not `root` itself)."""
    base = host_path(root)
    text = str(name)
    joined = posixpath.normpath(posixpath.join(base, text))
    inside = joined.startswith(base.rstrip("/") + "/")
    normalized = posixpath.normpath(text) == text and not text.startswith("/")
    if not normalized or ".." in text.split("/") or not inside or _CONTROL.search(text):
        raise QuotingError(f"{text[:60]!r} is not a relative path inside {base}")
    return joined
