#!/usr/bin/env bash
# Set up, then run the main job: a local overlay publishing and subscribing, then the
# Spark analysis of every node's traces. Extra arguments go to deploy.main_job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m deploy.main_job "$@"
