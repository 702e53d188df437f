#!/usr/bin/env bash
# Fresh machine -> the main demo: set everything up, start the local Kafka broker, then run the
# exactly-once Kafka -> Delta job clean and once killed with SIGKILL mid-commit and restarted,
# and print the recovery harness's verdict ("precise") with the path of its HTML report.
# Arguments go to `spark-ext check` (default: exactly_once_delta; e.g. other jobs, --profile).
# The first pipeline alone (Kafka -> Delta with a quarantine table): scripts/demo_ingest.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m connectors.kafka.local_broker start
exec .venv/bin/spark-ext check "${@:-exactly_once_delta}"
