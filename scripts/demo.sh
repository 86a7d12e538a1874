#!/usr/bin/env bash
# `make demo`: on a fresh Debian machine as root, install vllmctl, bring up a two-host lab fleet and use it.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "make demo needs root: the lab runs real container hosts (systemd-nspawn)." >&2
  exit 2
fi
export DEBIAN_FRONTEND=noninteractive
if ! command -v debootstrap >/dev/null || ! command -v systemd-nspawn >/dev/null; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends \
    debootstrap systemd-container openssh-client iproute2 dpkg-dev apt-utils ca-certificates >/dev/null
fi
python3 -m pip install -q -e '.[dev,lab,hub]'

inventory=inventories/lab-demo.yml
vllmctl lab list --json | python3 -c 'import json,sys; sys.exit(0 if any(f["name"]=="demo" for f in json.load(sys.stdin)) else 1)' \
  || vllmctl lab up --name demo --hosts 2 --gpus 8xH100-80GB,2xL40S --inventory "$inventory"

vllmctl lab check --name demo
vllmctl validate "$inventory"
vllmctl facts "$inventory"
vllmctl plan "$inventory"
vllmctl apply "$inventory" --yes
echo
echo "The demo fleet is still up: try 'vllmctl facts $inventory' or 'vllmctl apply $inventory --check --diff'."
echo "Tear it down with: make demo-down"
