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
# Two test processes (pytest-xdist), each test module whole in one: job processes wait on JVMs,
# brokers and stores, so two modules at a time fill 2 cores (docs/design.md, "Tests").
.venv/bin/python -m pytest -n "${SPARK_EXT_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests"; fi
exit "$rc"
