#!/usr/bin/env bash
# Set up everything overlay needs on a fresh Debian/Ubuntu-like machine: a Java runtime
# for Spark, and a virtualenv (.venv) with the project and its development extras.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: a Java runtime for Spark; ip and nft for the network-namespace lab;
# sshd and ssh for the remote-deploy tests; Node.js and npm for clients/js.
missing=()
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v nft >/dev/null 2>&1 || missing+=(nftables)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
if ! .venv/bin/python -c "import overlay, trio, pyspark, pytest_trio" >/dev/null 2>&1 \
   || [ pyproject.toml -nt .venv/.installed ]; then
  # pip's chatter goes to a log; it is shown only when the install fails.
  if ! { .venv/bin/pip install -q --upgrade pip && .venv/bin/pip install -q -e '.[dev]'; } \
       >.venv/pip.log 2>&1; then
    cat .venv/pip.log >&2
    exit 1
  fi
  touch .venv/.installed
fi

# The JavaScript client's dependencies, exactly as package-lock.json pins them.
if [ ! -d clients/js/node_modules ] || [ clients/js/package-lock.json -nt clients/js/node_modules ]; then
  if ! (cd clients/js && npm ci --no-audit --no-fund) >.venv/npm.log 2>&1; then
    cat .venv/npm.log >&2
    exit 1
  fi
  touch clients/js/node_modules
fi
