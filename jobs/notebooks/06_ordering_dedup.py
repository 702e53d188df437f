# Databricks notebook source
# MAGIC %md
# MAGIC # Deterministic order and dedup in front of an order-sensitive fold
# MAGIC
# MAGIC `jobs/ordering_dedup.py`: sensor readings spread over two partitions, some delivered
# MAGIC twice (producer retries). An ordering buffer releases readings in event-time order only
# MAGIC once every partition has passed them; a dedup catalog (Bloom filter in front of an
# MAGIC exact Delta catalog) drops the copies; then an EWMA is folded per sensor. The result
# MAGIC does not depend on batch boundaries or arrival order, so a replay computes it again
# MAGIC exactly.

# COMMAND ----------

# MAGIC %pip install --no-deps -r ./requirements.txt

# COMMAND ----------

# MAGIC %run ./_setup

# COMMAND ----------

# ruff: noqa: E402, F821  (names from ./_setup; imports sit in the cells that use them)
from spark_ext.jobs.ordering_dedup import produce_readings

TOPIC = new_topic("nb-ord", partitions=2)
produced = produce_readings(BOOTSTRAP, TOPIC, sensors=3, per_sensor=20, duplicate_every=4)

# COMMAND ----------

from spark_ext.jobs.ordering_dedup import PipelineOptions, PipelinePaths, start_pipeline


def run(name: str, limit: int | None):
    paths = PipelinePaths(ROOT / name)
    query, sink = start_pipeline(
        spark, BOOTSTRAP, TOPIC, paths, PipelineOptions(max_offsets_per_trigger=limit)
    )
    query.awaitTermination()
    return spark.read.format("delta").load(str(paths.ewma)), sink.metrics


one_batch, metrics = run("one_batch", None)
show(one_batch.orderBy("key", "seq"))
print(
    f"{produced} records produced, {one_batch.count()} readings out, duplicates dropped:", end=" "
)
print(metrics.catalog_duplicates + metrics.batch_duplicates)

# COMMAND ----------

# MAGIC %md
# MAGIC ## Another batch plan, the same output

# COMMAND ----------

from chispa import assert_df_equality

many_batches, _ = run("many_batches", 25)
cols = ["key", "record_id", "event_time", "temp_f", "ewma_f", "seq"]
assert one_batch.count() == 3 * 20
assert_df_equality(one_batch.select(*cols), many_batches.select(*cols), ignore_row_order=True)
print("same readings, same EWMA values, whatever the batches")

# COMMAND ----------

print("topics deleted:", cleanup())
