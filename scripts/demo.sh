#!/usr/bin/env bash
# Fresh machine -> the main demo: set everything up, start the local Kafka broker, then run the
# exactly-once Kafka -> Delta job clean and once killed with SIGKILL mid-commit and restarted,
# and print the recovery harness's verdict ("precise") with the path of its HTML report.
# The first pipeline alone (Kafka -> Delta with a quarantine table): scripts/demo_ingest.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m connectors.kafka.local_broker start
exec .venv/bin/python scripts/demo_recovery.py "$@"
