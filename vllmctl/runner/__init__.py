"""The runner: every flow with I/O (apply, releases, rollback, status), executing plans over a Remote."""

# Hosts worked on at once (`--forks`), chosen from benchmarks/fleet_apply.py: with one SSH connection per host
# and no busy loops left, the controller's CPU per host is the same at any width, so only the number of
# waves matters; 64 covers a 64-host fleet in one wave, where 16 took four (docs/executor.md, Performance).
DEFAULT_FORKS = 64
