# Databricks notebook source
# MAGIC %md
# MAGIC # At-most-once: offsets committed before the write
# MAGIC
# MAGIC `jobs/at_most_once.py` reads JSON events from Kafka and appends them to Delta in
# MAGIC `foreachBatch`. Per micro-batch it **first** commits the batch's offsets (its own offset
# MAGIC log), **then** writes the rows. A driver lost between the two loses the batch: the
# MAGIC restarted query replays it, sees its offsets committed and skips it.
# MAGIC
# MAGIC Recovery class: **gap** -- rows missing, none extra, none duplicated.

# COMMAND ----------

# MAGIC %pip install --no-deps -r ./requirements.txt

# COMMAND ----------

# MAGIC %run ./_setup

# COMMAND ----------

# MAGIC %md
# MAGIC ## Input: 200 demo events (one in 25 malformed) in a 3-partition topic

# COMMAND ----------

# ruff: noqa: E402, F821  (names from ./_setup; imports sit in the cells that use them)
from spark_ext.connectors.demo_events import produce_events

TOPIC = new_topic("nb-amo", partitions=3)
produce_events(BOOTSTRAP, TOPIC, 200, malformed_every=25)

# COMMAND ----------

# MAGIC %md
# MAGIC ## A clean run, in batches of 150 offsets

# COMMAND ----------

from spark_ext.connectors.kafka import read_stream
from spark_ext.jobs.at_most_once import AtMostOncePaths, start


def run(paths: AtMostOncePaths):
    """Run the job on the topic in batches of 150 offsets; returns its ``events`` table."""
    start(
        read_stream(spark, BOOTSTRAP, TOPIC, max_offsets_per_trigger=150), paths
    ).awaitTermination()
    return spark.read.format("delta").load(str(paths.events))


clean = AtMostOncePaths(ROOT / "clean")
show(run(clean).orderBy("event_id"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## A run whose driver dies after step 1 (offsets committed) of its last batch
# MAGIC
# MAGIC In process we rebuild what the kill leaves behind: the last batch's offsets are
# MAGIC committed, its rows are not in the table (`RESTORE` to the version before them), and
# MAGIC Spark's commit log lacks the batch. `spark-ext check at_most_once` does the same with a
# MAGIC real SIGKILL (see `00_recovery_harness`).

# COMMAND ----------

from delta.tables import DeltaTable

from spark_ext.recovery import forget_last_commit

crashed = AtMostOncePaths(ROOT / "crashed")
run(crashed)
table = DeltaTable.forPath(spark, str(crashed.events))
last_batch = forget_last_commit(crashed.checkpoint)
versions = table.history().selectExpr("max(version)").first()[0]
table.restoreToVersion(versions - 1)  # the last batch's rows never landed
print(f"batch {last_batch}: offsets committed, rows lost with the driver")

run(crashed)  # the restart: Spark replays the batch, the job skips it

# COMMAND ----------

# MAGIC %md
# MAGIC ## What the crash did: the harness's classifier

# COMMAND ----------

from spark_ext.jobs.cases.kafka_to_delta import EVENTS
from spark_ext.recovery import RecoveryClass, classify, read_delta_rows

result = classify(
    read_delta_rows(clean.events, EVENTS.columns),
    read_delta_rows(crashed.events, EVENTS.columns),
    EVENTS,
)
print(result.recovery_class, f"{result.missing_rows} rows missing, {len(result.extra)} extra")
assert result.recovery_class is RecoveryClass.GAP

# COMMAND ----------

print("topics deleted:", cleanup())
