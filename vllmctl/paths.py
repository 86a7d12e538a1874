"""Every path and name vllmctl uses on a managed host, defined once: configuration, state, releases, venvs,
units, env files, the lock, the audit log, host-side helpers, caches and the service user."""

from __future__ import annotations

ETC_DIR = "/etc/vllmctl"
LIB_DIR = "/var/lib/vllmctl"
LOG_DIR = "/var/log/vllmctl"
OPT_DIR = "/opt/vllmctl"

STATE_DIR = f"{LIB_DIR}/state"  # .applied/.healthy records (0700: they digest env files)
DCGM_DIAG_PASSED = f"{STATE_DIR}/dcgm-diag.passed"  # the boot id of the last passed DCGM diag
TUNE_MARKER = f"{STATE_DIR}/tune.json"  # a `vllmctl tune` under way here: what to restore if it dies
RELEASES_DIR = f"{LIB_DIR}/releases"  # one directory per release, `current` and `known-good` symlinks
GROUPS_DIR = f"{LIB_DIR}/groups"  # multi-node group releases, one directory per group
HOME_DIR = f"{LIB_DIR}/home"  # the service user's home
BIN_DIR = f"{LIB_DIR}/bin"  # host-side helpers vllmctl uploads
HF_HOME = f"{LIB_DIR}/hf"
HUB_CACHE = f"{LIB_DIR}/models/hub"  # hub models staged before the engine starts
ADAPTERS_DIR = f"{LIB_DIR}/adapters"  # links to staged hub LoRA adapters, one folder per model
WHEELHOUSE_DIR = f"{LIB_DIR}/wheelhouse"
RAY_DIR = f"{LIB_DIR}/ray"  # Ray's --temp-dir: sessions, sockets and logs
LOCK_DIR = f"{LIB_DIR}/lock"  # the host lock: an atomic mkdir
# a run's record of each replica it holds out of service (its owner line), on the model's keeper host:
# OUT_DIR/<model>/<host>-<port>; OUT_LOCK serializes the compare-and-set that claims replicas
OUT_DIR = f"{LIB_DIR}/out"
OUT_LOCK = f"{OUT_DIR}/.lock"
AUDIT_LOG = f"{LOG_DIR}/audit.log"
VENVS_DIR = f"{OPT_DIR}/venvs"  # one venv per engine version
UNIT_DIR = "/etc/systemd/system"
# where a unit's processes are listed: cgroup v2, else a hybrid layout's v2 or v1 systemd hierarchy (a
# Debian 12 container's); a service's cgroup is <root>/system.slice/<unit>
CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd")

UNIT_PREFIX = "vllmctl-"
UNIT_GLOB = f"{UNIT_PREFIX}*"
SERVICE_USER = "vllm"
WAIT_HEALTHY_HELPER = f"{BIN_DIR}/wait-healthy.py"
ENGINE_GONE_HELPER = f"{BIN_DIR}/engine-gone.py"  # before an engine starts: its last run's processes gone
HUB_DOWNLOAD_HELPER = f"{BIN_DIR}/hub-download.py"
VLLM_CLI_HELPER = f"{BIN_DIR}/vllm-cli.py"  # vLLM's CLI under any build's name (multi-node launcher vllm)
# the gateway: HAProxy from the distribution's packages, its config where the package's unit reads it
# a driver release pin (driver.branch: "580.95.05"): every NVIDIA package at that version, as NVIDIA's pinning
# packages do; absent for a branch pin
DRIVER_PIN_PREFS = "/etc/apt/preferences.d/vllmctl-nvidia-driver"
HAPROXY_CONFIG = "/etc/haproxy/haproxy.cfg"
HAPROXY_CANDIDATE = "/etc/haproxy/haproxy.cfg.vllmctl-candidate"  # `haproxy -c` checks it first
HAPROXY_FILES_DIR = "/etc/haproxy/vllmctl"  # API keys to check (0600), TLS certificate and key
HAPROXY_ADMIN_SOCKET = "/run/haproxy/admin.sock"  # the runtime API: drain, ready, show stat
HAPROXY_STATE_FILE = "/var/lib/haproxy/vllmctl-server-state"  # drain/ready kept across a reload
# held by a drain or ready and by the state dump + reload, so neither falls between the other's steps
HAPROXY_STATE_LOCK = "/run/vllmctl-haproxy-state.lock"
HAPROXY_UNIT = "haproxy.service"
KEEPALIVED_CONFIG = "/etc/keepalived/keepalived.conf"
KEEPALIVED_CANDIDATE = "/etc/keepalived/keepalived.conf.vllmctl-candidate"  # `keepalived -t` checks it first
KEEPALIVED_UNIT = "keepalived.service"
KEEPALIVED_CHECK = "/etc/keepalived/vllmctl-haproxy-answers"  # the VIP's check: HAProxy answers
MANAGED_DIRS = (ETC_DIR, LIB_DIR, STATE_DIR, RELEASES_DIR, LOG_DIR, OPT_DIR, VENVS_DIR)


def release_dir(release_id: str) -> str:
    return f"{RELEASES_DIR}/{release_id}"


def group_dir(group: str) -> str:
    return f"{GROUPS_DIR}/{group}"


def env_path(model: str) -> str:
    """A model's env file (0600): secrets and the engine's environment."""
    return f"{ETC_DIR}/{model}.env"


def unit_path(unit: str) -> str:
    return f"{UNIT_DIR}/{unit}"


def out_record(model: str, server: str) -> str:
    """Who holds `server` (`HOST-PORT`) of `model` out of service: one run's owner line."""
    return f"{OUT_DIR}/{model}/{server}"


def state_record(name: str) -> str:
    return f"{STATE_DIR}/{name}"


def adapter_dir(model: str, adapter: str) -> str:
    """Where a hub adapter's staged snapshot is linked, so `--lora-modules` names a fixed local path."""
    return f"{ADAPTERS_DIR}/{model}/{adapter}"


def incoming_dir(user: str) -> str:
    """The SSH user's private folder (0700) where pushed files arrive before their sha256 is checked."""
    return f"/var/tmp/vllmctl-incoming-{user}"


def push_partial(user: str, sha256: str) -> str:
    """A pushed file while it arrives, named by its content: a broken push resumes from what is there."""
    return f"{incoming_dir(user)}/{sha256}.part"
