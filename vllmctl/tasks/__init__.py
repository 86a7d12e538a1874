"""Desired state: playbooks (ordered data) and the tasks they name, each expanded for one host into operation
calls (pure)."""
