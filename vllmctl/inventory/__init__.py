"""Inventory: YAML (or Ansible YAML) to a validated, typed Inventory with exact source positions."""
