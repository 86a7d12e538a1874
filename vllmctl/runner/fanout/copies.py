"""One copy of a fan-out over fresh SSH connections: the controller's push to a first host, or a pull
from a host that holds the folder, with the grant revoked and the one-time key removed whatever happens.
A failure says whom it blames, so the schedule retries from another source or gives the target up."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vllmctl.errors import TransportError, VllmctlError
from vllmctl.facts.disk import MANIFEST_NAME
from vllmctl.fanout import scripts
from vllmctl.fanout.schedule import CONTROLLER, Copy, FolderFanout
from vllmctl.ops.model_stage import MODEL_SYNC, PushFile, manifest_text
from vllmctl.runner.core.remote import SshRemote
from vllmctl.tasks.desired import HostContext
from vllmctl.transport import SshTransport

SENT = re.compile(r"^sent (\d+) of", re.MULTILINE)


@dataclass(frozen=True)
class CopyOutcome:
    copy: Copy
    blame: str  # "", "source" or "target"
    bytes: int = 0
    seconds: float = 0.0
    error: str = ""
    corrupt: bool = False  # the source's files do not match their sha256: it is no holder any more


class Copier:
    """Runs copies of one folder over fresh SSH connections (one per copy and host: copies run in threads)."""

    def __init__(
        self, fanout: FolderFanout, contexts: Mapping[str, HostContext], timeout: float, token: str
    ) -> None:
        self.fanout, self.contexts, self.timeout, self.token = fanout, contexts, timeout, token

    def transport(self, host: str) -> SshTransport:
        return SshTransport(self.contexts[host].host)

    def run(self, copy: Copy, number: int, clock: Callable[[], float] = time.monotonic) -> CopyOutcome:
        """The copy; `number` (unique in the run, given out by the one thread that schedules) names its
        grant, so one copy's revocation never closes another's."""
        start = clock()
        token = f"{self.token}{number:04x}"
        try:
            sent = self._push(copy.target) if copy.source == CONTROLLER else self._pull(copy, token)
        except CopyFailed as failed:
            return CopyOutcome(copy, failed.blame, 0, clock() - start, failed.message, failed.corrupt)
        except VllmctlError as exc:
            return CopyOutcome(copy, "target", 0, clock() - start, exc.message)
        return CopyOutcome(copy, "", sent, clock() - start)

    def _push(self, target: str) -> int:
        """The controller's push to one host, by the model_sync operation its own run would plan."""
        args = {"dest": self.fanout.folder, "files": list(self.fanout.files)}
        remote = SshRemote(self.transport(target))
        try:
            facts = remote.gather(MODEL_SYNC.requests(args), self.timeout)
            sent = 0
            for action in MODEL_SYNC(args, facts).actions:
                result = remote.execute(action, self.timeout)
                if not result.ok:
                    raise CopyFailed("target", result.failure("pushing from the controller"))
                if isinstance(action, PushFile):
                    found = SENT.search(result.stdout)
                    sent += int(found.group(1)) if found else action.size
            return sent
        finally:
            remote.close()

    def _pull(self, copy: Copy, token: str) -> int:
        folder, stale = self.fanout.folder, self.fanout.stale[copy.target]
        target, source = self.transport(copy.target), self.transport(copy.source)
        keydir = ""
        try:
            try:
                host_key = source.host_key()
            except TransportError as exc:
                raise CopyFailed("source", exc.message) from exc
            ready = target.run(scripts.prepare(source.target.hostname), sudo=True, timeout=60)
            if not ready.ok or len(ready.stdout.split("\n")) < 3:
                raise CopyFailed("target", ready.failure("making a one-time key"))
            keydir, public_key, from_address = ready.stdout.split("\n")[:3]
            where = source.target
            for name, text in (
                ("known_hosts", scripts.known_hosts_line(where.hostname, where.port, *host_key)),
                ("files", scripts.names_text(stale)),
                ("sums", scripts.sums_text(stale)),
                *self.extra_files(stale),
            ):
                target.put(text.encode(), f"{keydir}/{name}", mode="0600", timeout=60)
            line = scripts.authorized_line(public_key, folder, from_address, token)
            granted = self._on_source(source, scripts.grant(line, self.token))
            if not granted.ok:
                raise CopyFailed("source", granted.failure("granting the copy"))
            pulled = target.run(
                scripts.pull(keydir, folder, where.hostname, where.port, where.user),
                sudo=True,
                timeout=self.timeout,
            )
            if pulled.exited == scripts.CORRUPT_EXIT:
                self.distrust(source, pulled.stderr)  # rsync checked what it sent: the source's file is wrong
                raise CopyFailed("source", f"{copy.source}'s copy is corrupt: {pulled.stderr.strip()}", True)
            if not pulled.ok and "No space left on device" in pulled.stderr:
                target.run(["rm", "-rf", "--", f"{folder}/{scripts.INCOMING}"], sudo=True, timeout=60)
                raise CopyFailed("target", pulled.failure(f"copying from {copy.source}: disk full"))
            if not pulled.ok:
                raise CopyFailed("source", pulled.failure(f"copying from {copy.source}"))
            self.finish(target, keydir, copy)
            return scripts.bytes_received(pulled.stdout)
        finally:
            self._end(source, target, keydir, token)

    def extra_files(self, stale: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
        """More files for the copy's key directory (a hub copy's checks and layout)."""
        return []

    def finish(self, target: SshTransport, keydir: str, copy: Copy) -> None:
        """Once every file is in place: the manifest that makes the host's own push a no-op."""
        manifest = manifest_text([*self.fanout.files, *self._gone(copy.target)])
        target.put(manifest.encode(), f"{self.fanout.folder}/{MANIFEST_NAME}", timeout=60)

    def distrust(self, source: SshTransport, stderr: str) -> None:
        """The source's manifest removed: if no copy repairs it, its own run pushes every file again."""
        with contextlib.suppress(TransportError):
            source.run(["rm", "-f", "--", f"{self.fanout.folder}/{MANIFEST_NAME}"], sudo=True, timeout=60)

    def _gone(self, host: str) -> list[dict[str, Any]]:
        """Entries of files the controller no longer has: kept, so the host's own run deletes them."""
        names = {f["name"] for f in self.fanout.files}
        old = self.fanout.recorded.get(host, {})
        return [{"name": n, **entry} for n, entry in old.items() if n not in names]

    def _on_source(self, source: SshTransport, script: str) -> Any:
        try:
            return source.run(script, timeout=60)
        except TransportError as exc:
            raise CopyFailed("source", exc.message) from exc

    def _end(self, source: SshTransport, target: SshTransport, keydir: str, token: str) -> None:
        """Remove and revoke, whatever happened: the target's key first, so a source that is gone keeps
        only a line no key opens, which expires on its own."""
        steps = [(target, scripts.cleanup(keydir), True), (source, scripts.revoke(token), False)]
        for transport, command, sudo in steps:
            if transport is target and not keydir:
                transport.close()
                continue
            try:
                transport.run(command, sudo=sudo, timeout=60)
            except TransportError:
                pass
            finally:
                transport.close()


class CopyFailed(Exception):
    def __init__(self, blame: str, message: str, corrupt: bool = False) -> None:
        super().__init__(message)
        self.blame, self.message, self.corrupt = blame, message, corrupt
