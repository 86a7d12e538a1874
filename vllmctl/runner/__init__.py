"""Gather → plan → execute across hosts: planning (pure), the remote interface, execution and results."""

from vllmctl.runner.execute import RunOptions, run_playbook
from vllmctl.runner.results import HostResult, RunResult, StepResult

__all__ = ["HostResult", "RunOptions", "RunResult", "StepResult", "run_playbook"]
