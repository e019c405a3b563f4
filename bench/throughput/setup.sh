#!/usr/bin/env bash
# Set up bench/throughput (not CI): the repository's own setup, the brokers from Debian's
# packages (their system services are not used: the bench starts its own on loopback),
# and the bench's npm packages as package-lock.json pins them.
set -euo pipefail
cd "$(dirname "$0")"
bash ../../scripts/setup.sh
missing=()
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || missing+=(mosquitto)
command -v mosquitto_pub >/dev/null 2>&1 || missing+=(mosquitto-clients)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-benchmark >/dev/null 2>&1 || missing+=(redis-tools)
command -v nats-server >/dev/null 2>&1 || missing+=(nats-server)
command -v rabbitmq-server >/dev/null 2>&1 || [ -x /usr/sbin/rabbitmq-server ] || missing+=(rabbitmq-server)
if [ ${#missing[@]} -gt 0 ]; then
  echo "bench setup: installing ${missing[*]}" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
npm ci --no-audit --no-fund
