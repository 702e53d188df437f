# Databricks notebook source
# MAGIC %md
# MAGIC # Exactly once = at least once + dedup: the dedup sink
# MAGIC
# MAGIC `jobs/dedup_delta.py`: sensor readings, every fourth delivered twice, written to Delta
# MAGIC through `DeltaDedupSink`: Bloom filters per bucket in front of an exact Delta catalog, no
# MAGIC Spark state store, one commit per batch (docs/design.md, "Dedup").

# COMMAND ----------

# MAGIC %pip install --no-deps -r ./requirements.txt

# COMMAND ----------

# MAGIC %run ./_setup

# COMMAND ----------

from spark_ext.jobs.dedup_delta import DedupPaths, start
from spark_ext.jobs.ordering_dedup import dedup_summary, produce_readings

TOPIC = new_topic("nb-dedup", partitions=2)
produced = produce_readings(BOOTSTRAP, TOPIC, sensors=3, per_sensor=20, duplicate_every=4)


def run(name: str, limit: int | None):
    paths = DedupPaths(ROOT / name)
    query, sink = start(spark, BOOTSTRAP, TOPIC, paths, max_offsets_per_trigger=limit)
    query.awaitTermination()
    return spark.read.format("delta").load(str(paths.unique)), sink.metrics


one_batch, metrics = run("one_batch", None)
show(one_batch.orderBy("sensor", "event_time"))
print(f"{produced} records produced (with close markers), {one_batch.count()} readings out")
print(dedup_summary(metrics))

# COMMAND ----------

# MAGIC %md
# MAGIC ## Another batch plan, the same rows
# MAGIC
# MAGIC In small batches most copies arrive a batch after their original: the Bloom filter says
# MAGIC "maybe", the catalog confirms, the copy is dropped.

# COMMAND ----------

from chispa import assert_df_equality

many_batches, many = run("many_batches", 15)
assert one_batch.count() == one_batch.select("reading_id").distinct().count() == 3 * 20
assert many.catalog_duplicates > 0
assert_df_equality(one_batch, many_batches, ignore_row_order=True)
print("each reading exactly once, whatever the batches")

# COMMAND ----------

print("topics deleted:", cleanup())
