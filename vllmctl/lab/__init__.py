"""Local lab fleet: real systemd-nspawn container hosts, fake GPUs and an offline package server."""
