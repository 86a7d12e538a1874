"""Inventory: YAML (or Ansible YAML) to a validated, typed Inventory with exact source positions."""

from vllmctl.inventory.loader import load_inventory
from vllmctl.inventory.schema import inventory_schema

__all__ = ["inventory_schema", "load_inventory"]
