"""Environment variable names an inventory may not set in a model's env file (secrets, `vars.env`).

Three kinds, each refused for a stated reason (docs/inventory.md lists them):
- names that change which code or files a process loads: glibc's list of variables it drops for setuid
  programs (LD_*, GCONV_PATH, ...), Python's startup variables, and shell startup files;
- names systemd sets for the service (identity, sockets, directories): overriding them breaks the unit;
- names vllmctl sets itself (GPU pinning, the model cache, the API key, Ray's addresses), which have their
  own inventory settings.
"""

from __future__ import annotations

from vllmctl.inventory.values import Finding

LOADS_CODE = frozenset(
    {
        "PATH", "GCONV_PATH", "GETCONF_DIR", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "MALLOC_TRACE",
        "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "GLIBC_TUNABLES",
        "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONEXECUTABLE", "PYTHONPLATLIBDIR",
        "PYTHONBREAKPOINT", "PYTHONWARNINGS", "PYTHONINSPECT", "PYTHONPYCACHEPREFIX",
        "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS",
    }
)  # fmt: skip
SYSTEMD_SETS = frozenset(
    {
        "HOME", "USER", "LOGNAME", "SHELL", "NOTIFY_SOCKET", "MAINPID", "INVOCATION_ID", "JOURNAL_STREAM",
        "CREDENTIALS_DIRECTORY", "RUNTIME_DIRECTORY", "STATE_DIRECTORY", "CACHE_DIRECTORY", "LOGS_DIRECTORY",
        "CONFIGURATION_DIRECTORY", "WATCHDOG_USEC", "WATCHDOG_PID",
    }
)  # fmt: skip
VLLMCTL_SETS = {
    "CUDA_VISIBLE_DEVICES": "vllmctl pins each replica to its GPUs",
    "HF_HOME": "vllmctl keeps the hub cache under /var/lib/vllmctl",
    "HF_HUB_CACHE": "vllmctl stages hub models there before the start",
    "HF_HUB_OFFLINE": "vllmctl stages hub models, then serves them offline",
    "VLLM_API_KEY": "set engine_args.api_key: {secret: NAME}",
    "VLLM_HOST_IP": "vllmctl sets each node's address in a multi-node group",
    "VLLM_PORT": "set it with the group's ray.distributed_port",
    "NCCL_SOCKET_IFNAME": "set it with the group's cluster_interface",
    "GLOO_SOCKET_IFNAME": "set it with the group's cluster_interface",
    "VLLM_NO_USAGE_STATS": "vllmctl turns usage reporting off",
    "DO_NOT_TRACK": "vllmctl turns usage reporting off",
    "RAY_USAGE_STATS_ENABLED": "vllmctl turns usage reporting off",
}
LOADS_CODE_PREFIXES = ("LD_", "BASH_FUNC_")
SYSTEMD_PREFIXES = ("SYSTEMD_", "LISTEN_")


def reserved_env_problem(name: str) -> Finding | None:
    """Why an env file may not set `name` (compared in upper case, as env files are written), or None."""
    upper = name.upper()
    if upper in LOADS_CODE or upper.startswith(LOADS_CODE_PREFIXES):
        return Finding(
            f"{upper} may not be set: it changes which code or files the engine loads",
            "pick another name: an inventory never changes which code the engine runs",
        )
    if upper in SYSTEMD_SETS or upper.startswith(SYSTEMD_PREFIXES):
        return Finding(f"{upper} may not be set: systemd sets it for the service", "pick another name")
    if upper in VLLMCTL_SETS:
        return Finding(f"{upper} may not be set: vllmctl sets it", VLLMCTL_SETS[upper])
    return None
