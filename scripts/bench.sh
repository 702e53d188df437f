#!/usr/bin/env bash
# Set everything up, start the local broker, run benchmarks by name (no name: list them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
.venv/bin/python -m connectors.kafka.local_broker start >/dev/null
exec .venv/bin/python scripts/bench.py "$@"
