"""Dashboards and alert rules for the fleet, built from the inventory: pure (inventory in, objects out)."""
