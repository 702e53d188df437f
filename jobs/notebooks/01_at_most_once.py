# Databricks notebook source
# MAGIC %md
# MAGIC # At-most-once: offsets committed before the write
# MAGIC
# MAGIC `jobs/at_most_once.py` commits a batch's offsets, then writes its rows; a driver lost in
# MAGIC between loses the batch. Recovery class: **gap**.

# COMMAND ----------

# MAGIC %pip install --no-deps -r ./requirements.txt

# COMMAND ----------

# MAGIC %run ./_setup

# COMMAND ----------

from spark_ext.connectors.demo_events import produce_events
from spark_ext.connectors.kafka import read_stream
from spark_ext.jobs.at_most_once import AtMostOncePaths, start

TOPIC = new_topic("nb-amo", partitions=3)
produce_events(BOOTSTRAP, TOPIC, 200, malformed_every=25)


def run(paths: AtMostOncePaths):
    """Run the job on the topic in batches of 150 offsets; returns its ``events`` table."""
    source = read_stream(spark, BOOTSTRAP, TOPIC, max_offsets_per_trigger=150)
    start(source, paths).awaitTermination()
    return spark.read.format("delta").load(str(paths.events))


clean = AtMostOncePaths(ROOT / "clean")
show(run(clean).orderBy("event_id"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## A driver lost after step 1 (offsets committed) of its last batch
# MAGIC
# MAGIC Rebuilt in process: the last batch's rows leave the table (`RESTORE`) and Spark's commit
# MAGIC log forgets the batch; `spark-ext check at_most_once` uses a real SIGKILL.

# COMMAND ----------

from delta.tables import DeltaTable

from spark_ext.jobs.cases.kafka_to_delta import EVENTS
from spark_ext.recovery import RecoveryClass, classify, forget_last_commit, read_delta_rows

crashed = AtMostOncePaths(ROOT / "crashed")
run(crashed)
table = DeltaTable.forPath(spark, str(crashed.events))
last_batch = forget_last_commit(crashed.checkpoint)
versions = table.history().selectExpr("max(version)").first()[0]
table.restoreToVersion(versions - 1)  # the last batch's rows never landed
print(f"batch {last_batch}: offsets committed, rows lost with the driver")
run(crashed)  # the restart: Spark replays the batch, the job skips it

result = classify(
    read_delta_rows(clean.events, EVENTS.columns),
    read_delta_rows(crashed.events, EVENTS.columns),
    EVENTS,
)
print(result.recovery_class, f"{result.missing_rows} rows missing, {len(result.extra)} extra")
assert result.recovery_class is RecoveryClass.GAP

# COMMAND ----------

print("topics deleted:", cleanup())
