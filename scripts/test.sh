#!/usr/bin/env bash
# Fresh machine -> green tests: set everything up, start the local Kafka broker and the local
# S3 store, make the driver JVM's class-data archive (once), run pytest.
# Extra arguments go to pytest (e.g. scripts/test.sh -k sinks).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m connectors.kafka.local_broker start
.venv/bin/python -m connectors.s3.local_store start
.venv/bin/python scripts/class_archive.py
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests"; fi
exit "$rc"
