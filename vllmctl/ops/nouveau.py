"""nouveau blacklisted, pure: the modprobe.d file NVIDIA's driver needs (nouveau holds the GPU otherwise),
and the initramfs rebuilt when the file changes, since nouveau loads from the initramfs at boot (DeepOps
writes the same two lines, then `update-initramfs -u` or `dracut -f`). A loaded nouveau makes
`driver_reboot` reboot."""

from __future__ import annotations

from vllmctl.ops.base import (
    Args,
    Command,
    FactRequests,
    Facts,
    FileChange,
    Operation,
    OpError,
    Step,
    Upload,
    make_dirs,
    noop,
)

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
    current = (facts.get("paths") or {}).get(BLACKLIST_PATH, {"type": "absent"})
    if current["type"] not in ("absent", "file"):
        raise OpError(f"{BLACKLIST_PATH} is a {current['type']}, not a file", f"remove {BLACKLIST_PATH}")
    upload = Upload(BLACKLIST_PATH, BLACKLIST)
    if current["type"] == "file" and current.get("sha256") == upload.sha256:
        return noop("nouveau_blacklist", BLACKLIST_PATH, "nouveau is blacklisted")
    change = FileChange(BLACKLIST_PATH, BLACKLIST, exists=current["type"] == "file")
    # a minimal system (the lab's) has no /etc/modprobe.d until kmod is installed
    actions = (make_dirs("/etc/modprobe.d"), upload, Command(shell=REBUILD_INITRAMFS))
    return Step("nouveau_blacklist", BLACKLIST_PATH, actions, change=change)


NOUVEAU_BLACKLIST = Operation("nouveau_blacklist", _facts, _plan)
