"""The runner: every flow with I/O. `apply.py` and `rollback.py` are the flows the commands call; each
sub-package is one flow's edge, paired with its pure package (`releases/`, `gateway/`, `multinode/`,
`fanout/`, `tune/`, `status/`), over `fleet/` (what a run deploys) and `core/` (the executor)."""

# Hosts worked on at once (`--forks`), chosen from benchmarks/fleet_apply.py: with one SSH connection per host
# and no busy loops left, the controller's CPU per host is the same at any width, so only the number of
# waves matters; 64 covers a 64-host fleet in one wave, where 16 took four (docs/executor.md, Performance).
DEFAULT_FORKS = 64

# The one timeout policy: `--timeout` bounds each remote command. Reads (facts, status, history) answer in
# seconds; changes (apply, rollback) run package installs and model copies as one command. Bookkeeping steps
# (release records, pointers, journal tails) never wait longer than BOOKKEEPING_TIMEOUT_S.
READ_TIMEOUT_S = 60.0
CHANGE_TIMEOUT_S = 600.0
BOOKKEEPING_TIMEOUT_S = 120.0


def bookkeeping_timeout_s(command_timeout_s: float) -> float:
    return min(float(command_timeout_s), BOOKKEEPING_TIMEOUT_S)
