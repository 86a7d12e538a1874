#!/usr/bin/env bash
# `make demo`: on a fresh Debian machine as root, install vllmctl, bring up a two-host lab fleet and use it.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "make demo needs root: the lab runs real container hosts (systemd-nspawn)." >&2
  exit 2
fi
export DEBIAN_FRONTEND=noninteractive
# The lab's apt repository is filled from this machine's package lists, so refresh them every time.
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  debootstrap systemd-container openssh-client iproute2 dpkg-dev apt-utils ca-certificates >/dev/null
python3 -m pip install -q -e '.[dev,lab,hub]'

# DEMO_FLEET names the fleet (`make test` runs this script on a fleet of its own, made fresh)
fleet=${DEMO_FLEET:-demo}
inventory=inventories/lab-$fleet.yml
vllmctl lab list --json | python3 -c 'import json,sys; sys.exit(0 if any(f["name"]==sys.argv[1] for f in json.load(sys.stdin)) else 1)' "$fleet" \
  || vllmctl lab up --name "$fleet" --hosts 2 --gpus 8xH100-80GB,2xL40S --inventory "$inventory"

vllmctl lab check --name "$fleet"
# one endpoint for the model: an HAProxy gateway on the first host in front of both replicas (docs/gateway.md)
gateway_url=$(python3 - "$inventory" <<'PY'
import sys, yaml
path = sys.argv[1]
text = open(path).read()
doc = yaml.safe_load(text)
first = next(iter(doc["hosts"]))
model = next(iter(doc["models"]))
if "gateway" not in doc:
    gateway = {"gateway": {"hosts": [first], "models": {model: {"port": 9100}}, "metrics_port": 8405}}
    open(path, "a").write(yaml.safe_dump(gateway, sort_keys=False))
print(f"http://{doc['hosts'][first]['address']}:9100/v1")
PY
)
vllmctl validate "$inventory"
vllmctl facts "$inventory"
vllmctl apply "$inventory" --yes        # driver, engine venv, model, units, start, health, smoke-bench gate
vllmctl apply "$inventory" --check      # a second run has nothing left to do
vllmctl status "$inventory"
vllmctl bench "$inventory" --concurrency 1,4 --requests 16
echo
echo "One endpoint for the model, through the gateway: $gateway_url (e.g. curl $gateway_url/models)"
echo "The demo fleet is still up: try 'vllmctl history $inventory' or 'vllmctl status $inventory --watch'."
echo "Tear it down with: make demo-down${DEMO_FLEET:+ DEMO_FLEET=$DEMO_FLEET}"
