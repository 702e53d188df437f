# Databricks notebook source
# MAGIC %md
# MAGIC # Exactly-once Kafka -> Kafka: the two-phase Kafka sink
# MAGIC
# MAGIC `jobs/exactly_once_kafka.py`: each task writes its slice of a batch in a Kafka transaction
# MAGIC committed with a record of the slice, so a batch Spark replays after a lost driver is not
# MAGIC sent again (docs/design.md, "Kafka sinks"). Recovery class, for `read_committed`
# MAGIC consumers: **precise**.

# COMMAND ----------

# MAGIC %pip install --no-deps -r ./requirements.txt

# COMMAND ----------

# MAGIC %run ./_setup

# COMMAND ----------

from spark_ext.connectors.demo_events import produce_events
from spark_ext.connectors.kafka import read_stream
from spark_ext.jobs.exactly_once_kafka import start

TOPIC = new_topic("nb-eok", partitions=3)
produce_events(BOOTSTRAP, TOPIC, 200)


def run(name: str, out: str) -> None:
    source = read_stream(spark, BOOTSTRAP, TOPIC, max_offsets_per_trigger=150)
    start(source, BOOTSTRAP, out, ROOT / name / "_chk", f"forward_{name}").awaitTermination()


clean_topic, crashed_topic = new_topic("nb-eok-clean"), new_topic("nb-eok-crashed")
run("clean", clean_topic)

# COMMAND ----------

# MAGIC %md
# MAGIC ## A lost driver after the batch was committed and recorded, before Spark's commit log

# COMMAND ----------

from spark_ext.connectors.kafka import consume_json_rows
from spark_ext.recovery import OutputSpec, RecoveryClass, classify, forget_last_commit

run("crashed", crashed_topic)
replayed = forget_last_commit(ROOT / "crashed" / "_chk")
run("crashed", crashed_topic)  # the restart replays the batch into the same topic
print(f"batch {replayed} replayed")

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
