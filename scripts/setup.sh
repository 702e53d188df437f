#!/usr/bin/env bash
# Set up everything the project needs on a fresh machine, idempotently:
#   1. a Java 17+ runtime and Maven (Debian packages, only if missing),
#   2. the virtualenv .venv with the project installed, pinned by constraints.txt (pip's cache
#      makes a re-run fast),
#   3. the JVM jars (Delta, Spark's Kafka connector, the Kafka broker, hadoop-aws for s3a://,
#      the S3Proxy store) in ~/.cache/spark_ext.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then
  echo "setup: installing Java and Maven"
  apt-get update -qq && apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null
fi

PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
stamp=.venv/.installed-$(cat pyproject.toml setup.py constraints.txt | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "setup: installing the project into .venv (the tested set: constraints.txt)"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -c constraints.txt -e ".[dev]"
  # The checkout's connectors/ and jobs/ (the wheel's spark_ext.connectors, spark_ext.jobs)
  # importable from anywhere in .venv, as the console script needs: README, "Install".
  pwd >"$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/spark_ext_checkout.pth"
  rm -f .venv/.installed-* && touch "$stamp"
fi
.venv/bin/python scripts/fetch_jars.py
