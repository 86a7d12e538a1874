"""The runner: every flow with I/O (apply, releases, rollback, status), executing plans over a Remote."""
