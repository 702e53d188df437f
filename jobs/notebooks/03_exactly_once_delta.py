# Databricks notebook source
# MAGIC %md
# MAGIC # Exactly-once Kafka -> Delta: the two-phase Delta sink
# MAGIC
# MAGIC `jobs/exactly_once_delta.py`: one Delta commit per batch records `txn(appId=sink id,
# MAGIC version=batch id)`, so a batch Spark replays after a lost driver is skipped
# MAGIC (docs/design.md, "Delta sinks"). Recovery class: **precise**.

# COMMAND ----------

# MAGIC %pip install --no-deps -r ./requirements.txt

# COMMAND ----------

# MAGIC %run ./_setup

# COMMAND ----------

from spark_ext.connectors.demo_events import produce_events
from spark_ext.jobs.exactly_once_delta import events_stream, start

TOPIC = new_topic("nb-eod", partitions=3)
produce_events(BOOTSTRAP, TOPIC, 200)


def run(folder) -> None:
    events = events_stream(spark, BOOTSTRAP, TOPIC, max_offsets_per_trigger=150)
    start(events, folder / "events", folder / "_chk", sink_id="events").awaitTermination()


run(ROOT / "clean")
show(spark.read.format("delta").load(str(ROOT / "clean" / "events")).orderBy("event_id"))

# COMMAND ----------

# MAGIC %md
# MAGIC ## A lost driver after the sink's commit, before Spark's commit log
# MAGIC
# MAGIC Rebuilt in process by forgetting the last entry of Spark's commit log; the restart
# MAGIC replays that batch and the sink finds `txn(events, batch)` already in the table.

# COMMAND ----------

from deltalake import DeltaTable

from spark_ext.jobs.cases.kafka_to_delta import EVENTS
from spark_ext.recovery import RecoveryClass, classify, forget_last_commit, read_delta_rows

run(ROOT / "crashed")
replayed = forget_last_commit(ROOT / "crashed" / "_chk")
run(ROOT / "crashed")
table = DeltaTable(str(ROOT / "crashed" / "events"))
print(f"batch {replayed} replayed; sink 'events' last committed batch", end=" ")
print(table.transaction_version("events"), "at table version", table.version())

result = classify(
    read_delta_rows(ROOT / "clean" / "events", EVENTS.columns),
    read_delta_rows(ROOT / "crashed" / "events", EVENTS.columns),
    EVENTS,
)
print(result.recovery_class, f"{result.observed_rows} rows, as in the clean run")
assert result.recovery_class is RecoveryClass.PRECISE

# COMMAND ----------

print("topics deleted:", cleanup())
