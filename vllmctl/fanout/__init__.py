"""Staging a controller folder once and fanning it out host to host: the order of copies (schedule.py)
and the scripts that grant, pull, verify and revoke (scripts.py). Pure; runner/fanout/folders.py runs them."""
