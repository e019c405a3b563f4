#!/usr/bin/env bash
# Set up, then run the whole test suite: the JavaScript client's tests (node's test runner,
# against real daemons), then pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
(cd clients/js && node --test test/*.test.js)
exec .venv/bin/python -m pytest "$@"
