"""The gateway, pure: HAProxy's config from the inventory (config.py) and its runtime API (runtime.py)."""
