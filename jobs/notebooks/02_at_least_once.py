# Databricks notebook source
# MAGIC %md
# MAGIC # At-least-once: rows written before the offsets are committed
# MAGIC
# MAGIC `jobs/at_least_once.py` writes each batch, then Spark commits its offsets; a driver lost in
# MAGIC between makes Spark write the batch again. Recovery classes: `events` (a plain copy)
# MAGIC **rollback-repeating**, `ewma` (an order-sensitive fold kept in the sink)
# MAGIC **rollback-divergent**. Below, a clean run and a run whose driver dies after the last
# MAGIC batch's write, rebuilt in process: Spark's commit log forgets the last batch, as the kill
# MAGIC leaves it (`spark-ext check at_least_once` uses a real SIGKILL).

# COMMAND ----------

# MAGIC %pip install --no-deps -r ./requirements.txt

# COMMAND ----------

# MAGIC %run ./_setup

# COMMAND ----------

from spark_ext.connectors.demo_events import produce_events
from spark_ext.connectors.kafka import read_stream
from spark_ext.jobs.at_least_once import AtLeastOncePaths, start
from spark_ext.recovery import forget_last_commit

TOPIC = new_topic("nb-alo", partitions=3)
produce_events(BOOTSTRAP, TOPIC, 200, malformed_every=25)


def run(paths: AtLeastOncePaths) -> None:
    source = read_stream(spark, BOOTSTRAP, TOPIC, max_offsets_per_trigger=150)
    start(source, paths).awaitTermination()


clean, crashed = AtLeastOncePaths(ROOT / "clean"), AtLeastOncePaths(ROOT / "crashed")
run(clean)
run(crashed)
replayed = forget_last_commit(crashed.checkpoint)
run(crashed)
print(f"batch {replayed} was written twice")
show(spark.read.format("delta").load(str(crashed.ewma)).orderBy("user_id"))

# COMMAND ----------

from spark_ext.jobs.cases.kafka_to_delta import EVENTS, EWMA
from spark_ext.recovery import RecoveryClass, classify, read_delta_rows

events = classify(
    read_delta_rows(clean.events, EVENTS.columns),
    read_delta_rows(crashed.events, EVENTS.columns),
    EVENTS,
)
ewma = classify(
    read_delta_rows(clean.ewma, EWMA.columns), read_delta_rows(crashed.ewma, EWMA.columns), EWMA
)
print("events:", events.recovery_class, f"{events.duplicate_rows} duplicates")
print("ewma:  ", ewma.recovery_class, f"{len(ewma.state_diffs)} users differ, e.g.")
for diff in ewma.state_diffs[:3]:
    print("   ", diff.key, "clean", diff.expected, "recovered", diff.observed)
assert events.recovery_class is RecoveryClass.ROLLBACK_REPEATING
assert events.duplicate_rows > 0 and events.differing_rows == 0
assert ewma.recovery_class is RecoveryClass.ROLLBACK_DIVERGENT
# the users of the replayed batch were folded twice: their event counts went up
assert ewma.state_diffs and all(
    d.observed["events"] > d.expected["events"]
    for d in ewma.state_diffs
    if d.expected and d.observed
)

# COMMAND ----------

print("topics deleted:", cleanup())
