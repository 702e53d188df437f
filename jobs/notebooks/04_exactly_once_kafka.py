# Databricks notebook source
# MAGIC %md
# MAGIC # Exactly-once Kafka -> Kafka: the two-phase Kafka sink
# MAGIC
# MAGIC `jobs/exactly_once_kafka.py` forwards events through the two-phase Kafka sink: each
# MAGIC task writes its slice of a micro-batch inside its own Kafka transaction, committed with a
# MAGIC record of the slice (sink id, batch id, a digest of its records); the driver only records
# MAGIC the batch. A batch Spark replays after a lost driver is recognised slice by slice and not
# MAGIC sent again; `read_committed` consumers see every input record exactly once.
# MAGIC
# MAGIC Recovery class: **precise**.

# COMMAND ----------

# MAGIC %pip install --no-deps -r ./requirements.txt

# COMMAND ----------

# MAGIC %run ./_setup

# COMMAND ----------

# ruff: noqa: E402, F821  (names from ./_setup; imports sit in the cells that use them)
from spark_ext.connectors.demo_events import produce_events
from spark_ext.connectors.kafka import read_stream

TOPIC = new_topic("nb-eok", partitions=3)
produce_events(BOOTSTRAP, TOPIC, 200)

# COMMAND ----------

from spark_ext.jobs.exactly_once_kafka import start


def run(name: str) -> str:
    out = new_topic(f"nb-eok-{name}", partitions=3)
    source = read_stream(spark, BOOTSTRAP, TOPIC, max_offsets_per_trigger=150)
    start(source, BOOTSTRAP, out, ROOT / name / "_chk", f"forward_{name}").awaitTermination()
    return out


clean_topic = run("clean")

# COMMAND ----------

# MAGIC %md
# MAGIC ## A lost driver after the batch was committed and recorded, before Spark's commit log

# COMMAND ----------

from spark_ext.recovery import forget_last_commit

crashed_topic = run("crashed")
replayed = forget_last_commit(ROOT / "crashed" / "_chk")
run("crashed")
print(f"batch {replayed} replayed")

# COMMAND ----------

from spark_ext.connectors.kafka import consume_json_rows
from spark_ext.recovery import OutputSpec, RecoveryClass, classify

# Each output record's JSON names the input record it forwards: compare by those.
SOURCE = OutputSpec(columns=("topic", "partition", "offset", "value"))
result = classify(
    consume_json_rows(BOOTSTRAP, clean_topic),
    consume_json_rows(BOOTSTRAP, crashed_topic),
    SOURCE,
)
print(result.recovery_class, f"{result.observed_rows} records, as in the clean run")
assert result.recovery_class is RecoveryClass.PRECISE

# COMMAND ----------

print("topics deleted:", cleanup())
