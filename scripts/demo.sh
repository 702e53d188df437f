#!/usr/bin/env bash
# Fresh machine -> the main demo: set everything up, start the local Kafka broker, produce
# events (some malformed), run the ingest job end to end and print the tables' row counts.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m connectors.local_kafka start
exec .venv/bin/python scripts/demo.py "$@"
