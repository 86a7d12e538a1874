"""The executor's core, used by every flow: one host's run (lock, facts, steps, deadlines) and many hosts'
(batches, forks), the Remote a host is reached through, results and how they look, signals, the audit line,
the controller's fact cache, reboots, the wait on a started engine, and the seam where engines stop."""
