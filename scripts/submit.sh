#!/usr/bin/env bash
# spark-submit a job with the project's jars on the driver's and the executors' classpaths.
#   scripts/submit.sh [spark-submit options] jobs/X.py [job arguments]
# e.g. scripts/submit.sh jobs/exactly_once_delta.py --profile cluster --topic events ...
# The job's --profile decides the master (conf/cluster.toml: spark://127.0.0.1:7077).
# spark.jars set by the session builder would come too late for a driver JVM that
# spark-submit already started, so the jars go on --jars and --driver-class-path here.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY="${PYSPARK_PYTHON:-$ROOT/.venv/bin/python}"  # the project's venv unless the caller names one
# The job's --profile names the master; a spark:// master that does not answer is reported
# at once (spark-submit would retry for about a minute and end in a Java stack trace).
PROFILE=local
ARGS=("$@")
for ((i = 0; i < ${#ARGS[@]}; i++)); do
  if [[ ${ARGS[$i]} == --profile && $((i + 1)) -lt ${#ARGS[@]} ]]; then PROFILE=${ARGS[$((i + 1))]}; fi
  if [[ ${ARGS[$i]} == --profile=* ]]; then PROFILE=${ARGS[$i]#--profile=}; fi
done
MASTER=$(PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PY" -c "import sys; from spark_ext.config import load_profile; print(load_profile(sys.argv[1]).spark.master)" "$PROFILE")
if [[ $MASTER == spark://* ]]; then
  "$PY" "$ROOT/scripts/cluster.py" check --master "$MASTER" || exit 2
fi
JARS=$("$PY" -c "from spark_ext import jvm; print(','.join(str(p) for p in jvm.spark_jars()))")
export PYSPARK_PYTHON="$PY" PYSPARK_DRIVER_PYTHON="$PY"
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$(dirname "$PY")/spark-submit" \
  --jars "$JARS" \
  --driver-class-path "${JARS//,/:}" \
  --conf "spark.executorEnv.PYTHONPATH=$ROOT" \
  --conf "spark.executorEnv.PYSPARK_PYTHON=$PY" \
  --conf "spark.pyspark.python=$PY" \
  "$@"
