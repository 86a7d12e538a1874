"""nouveau blacklisted, pure: the modprobe.d file NVIDIA's driver needs (nouveau holds the GPU otherwise),
and the initramfs rebuilt when the file changes, since nouveau loads from the initramfs at boot (DeepOps
writes the same two lines, then `update-initramfs -u` or `dracut -f`). A loaded nouveau makes
`driver_reboot` reboot."""

from __future__ import annotations

from vllmctl.ops.base import Args, Command, FactRequests, Facts, Operation, Step, noop
from vllmctl.ops.files import config_file

BLACKLIST_PATH = "/etc/modprobe.d/blacklist-nouveau.conf"
BLACKLIST = (
    "# written by vllmctl: the NVIDIA driver needs the GPU\nblacklist nouveau\noptions nouveau modeset=0\n"
)
# Debian/Ubuntu's initramfs-tools, else dracut; a host with neither (a container) boots without an initramfs
REBUILD_INITRAMFS = (
    "if command -v update-initramfs >/dev/null 2>&1; then update-initramfs -u; "
    "elif command -v dracut >/dev/null 2>&1; then dracut -f; "
    "else echo 'no update-initramfs or dracut: no initramfs to rebuild'; fi"
)


def _facts(args: Args) -> FactRequests:
    return {"paths": (BLACKLIST_PATH,)}


def _plan(args: Args, facts: Facts) -> Step:
    if not args.get("branch"):
        return noop("nouveau_blacklist", BLACKLIST_PATH, "no driver branch pinned (driver.branch)")
    written = config_file(BLACKLIST_PATH, BLACKLIST, facts)
    if written is None:
        return noop("nouveau_blacklist", BLACKLIST_PATH, "nouveau is blacklisted")
    actions, change = written
    return Step(
        "nouveau_blacklist", BLACKLIST_PATH, (*actions, Command(shell=REBUILD_INITRAMFS)), change=change
    )


NOUVEAU_BLACKLIST = Operation("nouveau_blacklist", _facts, _plan)
