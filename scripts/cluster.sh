#!/usr/bin/env bash
# A Spark standalone cluster on 127.0.0.1 (master + 2 workers x 1 core) from the pyspark install.
#   scripts/cluster.sh start|stop|status [--port 7077] [--workers 2] [--cores 1] [--dir var/cluster]
# Then: scripts/submit.sh jobs/exactly_once_delta.py --profile cluster ...
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python scripts/cluster.py "$@"
